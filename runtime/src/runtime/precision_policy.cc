// precision_policy.cc — the TF32 rule per op class (precision_policy.h).
#include "dice/runtime/precision_policy.h"

#include "dice/runtime/winner_versions.h"

#include <cstdlib>
#include <cstring>

namespace dice::runtime {

std::string ReducedPrecisionRefusal(const TuneOptions& options, const ir::Graph& graph) {
  const char* strict = std::getenv("DICE_STRICT_FP32");
  if (strict != nullptr && std::strcmp(strict, "1") == 0) return "DICE_STRICT_FP32=1 is set";
  if (options.allow_reduced_precision) return "";
  bool conv = false, gemm = false;
  for (const ir::Op& op : graph.ops) {
    conv = conv || op.kind == ir::OpKind::kConv2d;
    gemm = gemm || op.kind == ir::OpKind::kLinear;
  }
  if (!conv && !gemm) {
    return "the group has no convolution or GEMM (only TuneOptions::allow_reduced_precision allows it there)";
  }
  const bool conv_off = conv && !options.tf32_conv, gemm_off = gemm && !options.tf32_matmul;
  if (conv_off && gemm_off) return "torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32 are off";
  if (conv_off) return "torch.backends.cudnn.allow_tf32 is off";
  if (gemm_off) return "torch.backends.cuda.matmul.allow_tf32 is off";
  return "";
}

std::string RefusedWinnerReason(const TuneOptions& options, const ir::Graph& graph,
                                const cache::WinnerRecord& winner) {
  std::string stale = StaleBuildReason(winner, options.torch_version, CutlassVersion(), CublasVersion());
  if (!stale.empty()) return stale;
  if (!winner.reduced_precision) return "";
  const std::string why = ReducedPrecisionRefusal(options, graph);
  if (why.empty()) return "";
  return "winner " + winner.origin + " uses TF32 (reduced precision) and " + why;
}

}  // namespace dice::runtime
