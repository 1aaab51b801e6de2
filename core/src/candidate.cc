// Implementation of dice/core/candidate.h: launch-plan JSON and hashing.
#include "dice/core/candidate.h"

#include <nlohmann/json.hpp>

#include "dice/core/ir.h"

namespace dice {
inline namespace core {

std::string LaunchPlan::ToJson() const {
  nlohmann::json j;
  j["launches"] = nlohmann::json::array();
  for (const auto& l : launches) {
    nlohmann::json k = {{"kernel", l.kernel},
                        {"grid", {l.grid[0], l.grid[1], l.grid[2]}},
                        {"block", {l.block[0], l.block[1], l.block[2]}},
                        {"smem", l.shared_mem_bytes}};
    if (l.cluster_ctas != 0) k["cluster"] = l.cluster_ctas;
    j["launches"].push_back(std::move(k));
  }
  j["workspace"] = workspace_bytes;
  return j.dump();
}

Expected<LaunchPlan> LaunchPlan::FromJson(const std::string& json) {
  auto j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status(StatusCode::kCorrupt, "launch plan is not a JSON object");
  LaunchPlan plan;
  try {
    if (!j.contains("launches") || !j["launches"].is_array() || j["launches"].empty()) {
      return Status(StatusCode::kCorrupt, "launch plan has no 'launches' array");
    }
    for (const auto& l : j["launches"]) {
      KernelLaunch k;
      k.kernel = l.at("kernel").get<std::string>();
      const auto& grid = l.at("grid");
      const auto& block = l.at("block");
      if (!grid.is_array() || grid.size() != 3 || !block.is_array() || block.size() != 3) {
        return Status(StatusCode::kCorrupt, "launch plan: grid/block of kernel '" + k.kernel + "' must have 3 entries");
      }
      for (int d = 0; d < 3; ++d) {
        k.grid[d] = grid[d].get<uint32_t>();
        k.block[d] = block[d].get<uint32_t>();
        if (k.grid[d] == 0 || k.block[d] == 0) {
          return Status(StatusCode::kCorrupt, "launch plan: zero grid/block dim in kernel '" + k.kernel + "'");
        }
      }
      if (static_cast<uint64_t>(k.block[0]) * k.block[1] * k.block[2] > 1024) {
        return Status(StatusCode::kCorrupt, "launch plan: more than 1024 threads per block in '" + k.kernel + "'");
      }
      k.shared_mem_bytes = l.value("smem", 0u);
      k.cluster_ctas = l.value("cluster", 0u);
      if (k.cluster_ctas > 16) {
        return Status(StatusCode::kCorrupt, "launch plan: cluster of " + std::to_string(k.cluster_ctas) +
                                                " CTAs in '" + k.kernel + "' (at most 16)");
      }
      if (k.kernel.empty()) return Status(StatusCode::kCorrupt, "launch plan: empty kernel name");
      plan.launches.push_back(std::move(k));
    }
    plan.workspace_bytes = j.value("workspace", uint64_t{0});
  } catch (const nlohmann::json::exception& e) {
    return Status(StatusCode::kCorrupt, std::string("launch plan: ") + e.what());
  }
  return plan;
}

bool LaunchPlan::operator==(const LaunchPlan& o) const {
  if (workspace_bytes != o.workspace_bytes || launches.size() != o.launches.size()) return false;
  for (size_t i = 0; i < launches.size(); ++i) {
    const auto &a = launches[i], &b = o.launches[i];
    if (a.kernel != b.kernel || a.grid != b.grid || a.block != b.block || a.shared_mem_bytes != b.shared_mem_bytes ||
        a.cluster_ctas != b.cluster_ctas) {
      return false;
    }
  }
  return true;
}

const char* CandidateFormName(CandidateForm form) {
  switch (form) {
    case CandidateForm::kDevice: return "device";
    case CandidateForm::kExtension: return "extension";
    case CandidateForm::kLibrary: return "library";
  }
  return "device";
}

Expected<CandidateForm> ParseCandidateForm(const std::string& name) {
  for (CandidateForm f : {CandidateForm::kDevice, CandidateForm::kExtension, CandidateForm::kLibrary})
    if (name == CandidateFormName(f)) return f;
  return Status(StatusCode::kCorrupt, "unknown candidate form '" + name + "'");
}

std::string Candidate::Hash() const {
  // The form's name starts the hashed text (device and extension hash as they
  // always have; a library-backed candidate no longer hashes like an extension).
  std::string text = std::string(CandidateFormName(form)) + "\n";
  text += std::to_string(source.size()) + "\n" + source + "\n" + plan.ToJson() + "\n";
  for (const auto& f : extra_flags) text += f + "\n";
  text += reduced_precision ? "rp1" : "rp0";
  return ir::Sha256Hex(text);
}

}  // namespace core
}  // namespace dice
