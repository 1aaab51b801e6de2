// conv_plan.h (private) — what the conv family's two kernel generations share
// (conv.cc: CUTLASS 2.x implicit GEMM on sm80 tensor ops; conv_sm90.cc:
// CUTLASS 3.x sm90 implicit GEMM with TMA and wgmma): the analysed group and
// the parts of dice_forward that do not depend on the kernel. Output of these
// functions is CUDA C++ text for nvcc (extension form, extension_compiler.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cutlass_epilogue.h"
#include "dice/core/task.h"
#include "families.h"

namespace dice::generator::tmpl {

/// The MMA math of a float32 conv: TF32 (PyTorch's default for convs), 3xTF32
/// (DICE_STRICT_FP32=1, float32 accuracy), or the 16-bit tensor ops.
enum class Math { kTf32, kFastF32, kHalf };

/// The analysed group: conv2d (groups 1) + elementwise epilogue (conv.cc's Analyze).
struct ConvPlan {
  ir::DType dtype = ir::DType::kFloat32;
  Math math = Math::kTf32;
  int x = 0, w = 1, bias = -1, extra = -1;  // group input indices (-1: absent)
  bool extra_full = false;                   // output-shaped (else per-channel)
  Source source = Source::kNone;
  int64_t N = 0, C = 0, H = 0, W = 0, K = 0, R = 0, S = 0, P = 0, Q = 0;
  std::vector<int64_t> attrs;  // {sh, sw, ph, pw, dh, dw}
  int align_ab = 1, align_c = 1;  // elements per access: x/weight (along C), source/output (along K)
  EpilogueDag epi;
};

/// "in<i>": the name dice_forward gives group input i.
inline std::string In(int i) { return "in" + std::to_string(i); }

/// dice_forward's opening: <climits>/<vector>, the dice_conv_check helper,
/// the signature, every input checked, the size checks (N, C, H, W, K, R, S, P,
/// Q from the tensors and the baked attributes; groups 1; access widths), the
/// device guard and stream, x and the weight as channels_last (`xl`, `wl`,
/// checked for the access width) and the channels_last output `out`. Leaves
/// the body open for the kernel's part.
std::string ConvHostPrologue(const Task& task, const ConvPlan& p);

/// The epilogue's source tensor as dice_forward statements: `torch::Tensor
/// csrc` (undefined without one): the bias, the per-channel extra as [K], the
/// output-shaped extra as channels_last, or bias ± extra summed once.
std::string ConvSourceTensor(const ConvPlan& p);

/// dice_conv_check of `csrc` for the source's access width ("" without a source).
std::string ConvSourceCheck(const ConvPlan& p);

/// CUTLASS 3.x sm90 candidates for the plan (conv_sm90.cc): TMA im2col loads,
/// wgmma (TF32 for float32, the 16-bit tensor ops otherwise), the
/// non-persistent warp-specialized schedule, the epilogue as an EVT whose
/// compute node calls `functor`'s DiceEpilogue::Apply. Empty unless the task's
/// arch is sm_90 / sm_90a, the math is not 3xTF32, and C and K allow 16-byte
/// accesses (TMA). Each source carries the "dice-nvcc-arch-feature: a" line
/// (built for sm_90a, extension_compiler.h NvccArch). At most `max_candidates`.
std::vector<Candidate> ConvSm90Candidates(const Task& task, const ConvPlan& p, const std::string& functor,
                                          int max_candidates);

}  // namespace dice::generator::tmpl
