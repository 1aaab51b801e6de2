// Shared by the SDAR model/decoder tests: the plain-PyTorch reference's
// outputs (tests/generator/sdar_reference.py make-fixture): two tiny random
// checkpoints (f32 untied, bf16 tied), reference logits and greedy decodes.
// The fixture is generated once per version of the script into the temp
// folder (the folder name carries a hash of the script text; the script
// writes atomically, so parallel test processes are safe).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "dice/generator/checkpoint.h"
#include "dice/generator/sdar_model.h"

namespace dice::testing {

/// The fixture folder, or "" after printing why it could not be made.
inline const std::string& SdarReferenceDir() {
  static const std::string dir = [] {
    const std::string script = std::string(DICE_SOURCE_DIR) + "/tests/generator/sdar_reference.py";
    std::ifstream in(script);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ostringstream name;
    name << "dice_sdar_reference_" << std::hex << std::hash<std::string>{}(text);
    const std::string out = (std::filesystem::temp_directory_path() / name.str()).string();
    if (!std::filesystem::exists(out + "/reference.json")) {
      const std::string cmd = "python3 '" + script + "' make-fixture --out '" + out + "'";
      if (std::system(cmd.c_str()) != 0 || !std::filesystem::exists(out + "/reference.json")) {
        std::fprintf(stderr, "could not make the SDAR reference fixture: %s\n", cmd.c_str());
        return std::string();
      }
    }
    return out;
  }();
  return dir;
}

/// reference.json of the fixture.
inline nlohmann::json SdarReferenceJson() {
  std::ifstream in(SdarReferenceDir() + "/reference.json");
  return nlohmann::json::parse(in);
}

/// A float32 tensor of reference.safetensors (undefined when absent).
inline torch::Tensor SdarReferenceTensor(const std::string& name) {
  auto file = generator::SafetensorsFile::Open(SdarReferenceDir() + "/reference.safetensors");
  if (!file.ok()) return {};
  auto view = file->Get(name);
  if (!view.ok() || view->dtype != generator::WeightDtype::kF32) return {};
  auto t = torch::empty(view->shape, torch::kFloat32);
  std::memcpy(t.data_ptr(), view->data, view->nbytes);
  return t;
}

/// The reference's "forward_ids" ([batch, tokens] int64, CPU): the token ids
/// its logits fixture was computed on.
inline torch::Tensor SdarReferenceForwardIds() {
  auto ids = SdarReferenceJson()["forward_ids"].get<std::vector<std::vector<int64_t>>>();
  auto t = torch::empty({static_cast<int64_t>(ids.size()), static_cast<int64_t>(ids[0].size())}, torch::kLong);
  for (size_t b = 0; b < ids.size(); ++b) {
    for (size_t i = 0; i < ids[b].size(); ++i) t[b][i] = ids[b][i];
  }
  return t;
}

/// Test fixture with the reference checkpoint's f32 weights loaded on the
/// CPU as `model_` (fails the test when python3 with torch + safetensors,
/// needed to write the fixture, is missing).
class SdarF32ReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(SdarReferenceDir().empty()) << "python3 with torch + safetensors is needed for the reference";
    auto model = generator::SdarModel::Load(SdarReferenceDir() + "/f32");
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::make_unique<generator::SdarModel>(std::move(*model));
  }
  std::unique_ptr<generator::SdarModel> model_;
};

}  // namespace dice::testing
