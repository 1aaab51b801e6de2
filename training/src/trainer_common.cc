// Private trainer helpers: see trainer_common.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "trainer_common.h"

#include <ATen/autocast_mode.h>

#include <nlohmann/json.hpp>

#include "dice/training/checkpoint_io.h"
#include "dice/training/split.h"

namespace dice::training {

Expected<torch::Device> ParseTrainDevice(const std::string& text) {
  if (text == "cpu") return torch::Device(torch::kCPU);
  if (text.rfind("cuda", 0) == 0) {
    torch::Device d(torch::kCPU);
    try {
      d = torch::Device(text);
    } catch (const c10::Error&) {
      return Status(StatusCode::kInvalidArgument, "--device '" + text + "' is not cpu, cuda or cuda:N");
    }
    if (!torch::cuda::is_available()) {
      return Status(StatusCode::kNoDevice, "--device " + text + " asked for but no CUDA device is present");
    }
    return d;
  }
  return Status(StatusCode::kInvalidArgument, "--device '" + text + "' is not cpu, cuda or cuda:N");
}

Expected<torch::Device> ParseRankDevice(const std::string& text, int local_rank, int world) {
  auto device = ParseTrainDevice(text);
  if (!device.ok()) return device.status();
  if (device->is_cuda() && !device->has_index() && world > 1)
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
  return *device;
}

Expected<int64_t> EndOfTurnId(const generator::Tokenizer& tokenizer, const generator::SdarConfig& config) {
  int64_t id = tokenizer.TokenToId("<|im_end|>");
  if (id < 0) id = tokenizer.TokenToId("<|endoftext|>");
  if (id < 0 || id >= config.vocab_size) {
    return Status(StatusCode::kInvalidArgument, "the tokenizer has no <|im_end|> or <|endoftext|> token inside the "
                                                "model's vocabulary of " + std::to_string(config.vocab_size));
  }
  return id;
}

Expected<generator::PromptTemplates> LoadTemplatesOrDefault(const std::string& path) {
  if (path.empty()) return generator::PromptTemplates::Default();
  return generator::PromptTemplates::Load(path);
}

bool IsStageKind(const std::string& stage, const std::string& kind) {
  return stage == "e2e" ? (kind == "e2e" || kind == "task") : (kind == "infill" || IsDeviceKind(kind));
}

Expected<std::vector<CukeExample>> ReadStageTasks(const std::string& path, const std::string& stage,
                                                  const std::string& split, int64_t max_tasks,
                                                  const std::string& command,
                                                  const std::function<void(const std::string&)>& on_skipped) {
  std::vector<std::string> skipped;
  auto all = ReadExamples(path, &skipped);
  if (!all.ok()) return all.status();
  if (on_skipped) {
    for (const auto& s : skipped) on_skipped(s);
  }
  std::vector<CukeExample> tasks;
  for (auto& e : *all) {
    const bool split_ok = InSplit(e.split, split);
    if (IsStageKind(stage, e.kind) && split_ok) tasks.push_back(std::move(e));
    if (max_tasks > 0 && static_cast<int64_t>(tasks.size()) == max_tasks) break;
  }
  if (tasks.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  command + ": " + path + " has no " + split + " task for stage " + stage);
  }
  return tasks;
}

generator::DecodeOptions RolloutDecodeOptions(int64_t max_new_tokens, int64_t denoising_steps, double confidence_threshold,
                                   double temperature, int64_t samples, uint64_t seed,
                                   const std::vector<int64_t>& eos_ids, bool cuda) {
  generator::DecodeOptions d;
  d.max_new_tokens = max_new_tokens;
  d.denoising_steps = denoising_steps;
  d.remasking = generator::Remasking::kDynamic;
  d.confidence_threshold = confidence_threshold;
  d.temperature = temperature;
  d.num_samples = samples;
  d.seed = seed;
  d.eos_ids = eos_ids;
  d.cuda_graphs = cuda;
  return d;
}

std::string Printable(const std::string& text, size_t max) {
  std::string out;
  for (unsigned char c : text) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::vector<int64_t> AnswerStopIds(const generator::Tokenizer& tokenizer, int64_t end_of_turn) {
  std::vector<int64_t> ids = {end_of_turn};
  const int32_t eot = tokenizer.TokenToId("<|endoftext|>");
  if (eot >= 0 && eot != end_of_turn) ids.push_back(eot);
  return ids;
}

AutocastGuard::AutocastGuard(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  previous_ = at::autocast::is_autocast_enabled(at::kCUDA);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(at::kCUDA, previous_);
  at::autocast::clear_cache();
}

Status SaveTrainerState(const std::string& out_dir, const std::string& kind, int64_t step,
                        torch::optim::Optimizer& optimizer) {
  try {
    torch::save(optimizer, out_dir + "/optimizer.pt.tmp");
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, "saving " + out_dir + "/optimizer.pt: " + e.what_without_backtrace());
  }
  if (std::rename((out_dir + "/optimizer.pt.tmp").c_str(), (out_dir + "/optimizer.pt").c_str()) != 0) {
    return Status(StatusCode::kIoError, "cannot rename " + out_dir + "/optimizer.pt.tmp");
  }
  nlohmann::json j = {{"kind", kind}, {"step", step}};
  return WriteFileAtomic(out_dir + "/trainer_state.json", j.dump(2) + "\n");
}

Expected<int64_t> LoadTrainerState(const std::string& dir, const std::string& kind, torch::optim::Optimizer* optimizer) {
  auto text = ReadFile(dir + "/trainer_state.json");
  if (!text.ok()) {
    return Status(StatusCode::kNotFound, "cannot resume from " + dir + ": " + text.status().message());
  }
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer() ||
      !j.contains("kind") || !j["kind"].is_string()) {
    return Status(StatusCode::kCorrupt, dir + "/trainer_state.json: expected {\"kind\": string, \"step\": integer}");
  }
  if (j["kind"].get<std::string>() != kind) {
    return Status(StatusCode::kCorrupt, dir + "/trainer_state.json is a " + j["kind"].get<std::string>() +
                                            " state, not " + kind);
  }
  auto opt = ReadFile(dir + "/optimizer.pt");
  if (!opt.ok()) return Status(StatusCode::kNotFound, "cannot resume from " + dir + ": " + opt.status().message());
  try {
    torch::load(*optimizer, dir + "/optimizer.pt");
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, "loading " + dir + "/optimizer.pt: " + e.what_without_backtrace());
  }
  return j["step"].get<int64_t>();
}

}  // namespace dice::training
