// template_generator.cc — TemplateGenerator (templates.h): groups with a
// conv2d go to the conv family, those with a linear to the skinny-GEMM (few rows), cuBLASLt and gemm families;
// the others are lowered and dispatched to the elementwise or row family.
#include <cstdlib>
#include <string>

#include "dice/generator/templates.h"
#include "families.h"
#include "layout.h"
#include "gemv.h"
#include "lowering.h"

namespace dice::generator {

Expected<std::vector<Candidate>> TemplateGenerator::Generate(const Task& task, int max_candidates) {
  if (max_candidates <= 0) return std::vector<Candidate>{};
  // Contractions never reach Lower (which refuses them): the gemm family.
  // A bare linear with few rows (decode steps) gets the skinny-GEMM family's
  // NVRTC candidates first, then the gemm family's.
  if (tmpl::HasConv(task.graph)) return tmpl::ConvCandidates(task, max_candidates);
  if (tmpl::HasContraction(task.graph)) {
    // Skinny GEMMs first (few rows), then cuBLASLt's fused epilogues, then
    // CUTLASS; the group is unsupported only when every family refuses it
    // (the gemm family's reason is the one reported). A bf16/f16 group that
    // cuBLASLt takes gets no CUTLASS candidates (CutlassAfterLt).
    std::vector<Candidate> all;
    auto skinny = tmpl::SkinnyGemmCandidates(task, max_candidates, task.target);
    if (skinny.ok()) all = std::move(skinny).value();
    auto lt = tmpl::GemmLtCandidates(task, max_candidates - static_cast<int>(all.size()));
    if (lt.ok()) {
      for (auto& c : *lt) all.push_back(std::move(c));
    }
    if (lt.ok() && !lt->empty() && !tmpl::CutlassAfterLt(task)) return all;
    auto gemm = tmpl::GemmCandidates(task, max_candidates - static_cast<int>(all.size()));
    if (gemm.ok()) {
      for (auto& c : *gemm) all.push_back(std::move(c));
    } else if (all.empty()) {
      return gemm.status();
    }
    return all;
  }
  auto lowered = tmpl::Lower(task);
  if (!lowered.ok()) return lowered.status();
  tmpl::ToMemoryOrder(&*lowered);  // channels_last & co: iterate in memory order (layout.h)
  if (tmpl::Numel(lowered->F) == 0) {
    return Status(StatusCode::kUnsupported, "templates: empty iteration space (a zero-sized tensor)");
  }
  if (lowered->num_reduces == 0) return tmpl::ElementwiseCandidates(*lowered, max_candidates, task.target);
  return tmpl::RowCandidates(*lowered, max_candidates, task.target);
}

namespace tmpl {

bool CutlassAfterLt(const Task& task) {
  if (task.outputs.empty() || task.outputs[0].dtype == ir::DType::kFloat32) return true;
  const char* keep = std::getenv("DICE_GEMM_CUTLASS_16BIT");
  return keep != nullptr && std::string(keep) == "1";
}

int ArchNumber(const std::string& arch) {
  int sm = 0;
  if (arch.rfind("sm_", 0) == 0) {
    for (size_t i = 3; i < arch.size() && arch[i] >= '0' && arch[i] <= '9'; ++i) sm = sm * 10 + (arch[i] - '0');
  }
  return sm;
}

}  // namespace tmpl

}  // namespace dice::generator
