// gemm_plan.h (private) — what the gemm family's two kernel generations
// share (gemm.cc: CUTLASS 2.x device GEMM on sm80 tensor ops; gemm_sm90.cc:
// CUTLASS 3.x sm90 GEMM with TMA and wgmma): the analysed group and the part
// of dice_forward that does not depend on the kernel. Output of these
// functions is CUDA C++ text for nvcc (extension form, extension_compiler.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cutlass_epilogue.h"
#include "dice/core/candidate.h"
#include "dice/core/task.h"

namespace dice::generator::tmpl {

/// The analysed group: linear (x [..., K], weight [N, K][, bias [N]]) + an
/// elementwise epilogue reading at most one extra tensor (gemm.cc's file comment).
struct GemmPlan {
  ir::DType dtype = ir::DType::kFloat32;
  int x = 0, w = 1, bias = -1, extra = -1;  // group input indices (-1: absent)
  bool extra_full = false;                   // extra is output-shaped (else per-column)
  Source source = Source::kNone;
  int64_t M = 0, N = 0, K = 0;
  int align_ab = 1, align_c = 1;  // elements per access: A/B (along K), C/D (along N)
  EpilogueDag epi;                // node 0 = the linear value or the folded add
};

/// The plan of `task`'s group. Errors: kUnsupported "gemm: <why>" (not one
/// linear + elementwise epilogue, mixed dtypes, non-contiguous inputs, an
/// extra tensor neither per-column nor output-shaped, odd K/N for 16-bit
/// types, an empty GEMM).
Expected<GemmPlan> AnalyzeGemm(const Task& task);

/// dice_forward's opening, shared by both generations (`text`): the checking
/// helper, the signature, every input checked, M, N, K read from the tensors
/// and the baked configuration checked, the CUDA guard and `stream`, `out`
/// [M, N] allocated, the host-summed source `csum` when the plan folds bias
/// ± extra, and `using E`. `c_ptr` / `ldc`: the source tensor's data pointer
/// and leading dimension as C++ expressions ("0LL": one row, broadcast).
struct GemmHostPrologue {
  std::string text;
  std::string c_ptr, ldc;
};
GemmHostPrologue GemmPrologue(const Task& task, const GemmPlan& p);

/// Whether the plan's epilogue source is one row broadcast down M (linear's
/// bias, a per-column extra tensor, or bias ± a per-column extra) rather than
/// an output-shaped tensor or none.
inline bool RowSource(const GemmPlan& p) {
  return p.source == Source::kBias || (p.source != Source::kNone && !p.extra_full);
}

/// The sm90 generation (gemm_sm90.cc, issue 18 item 1): bf16 / f16 linear +
/// epilogue on CUTLASS 3.x's GemmUniversal with the TMA warp-specialized
/// cooperative schedule (wgmma, TMA loads of x and the weight), the epilogue
/// an epilogue visitor tree whose compute node is the generated
/// DiceEpilogue::Apply (`functor`, EpilogueFunctorSource) fed by the
/// accumulator and the source row or tensor. Up to `max_candidates`
/// extension-form candidates (sm_90a: "// dice-nvcc-arch-feature: a"),
/// origins "template:gemm/sm90-tc/<MxNxK tile>[/c2]". None unless
/// $DICE_GEMM_SM90=1 (off until measured on a GPU), the target is sm_90 /
/// sm_90a, the dtype 16-bit, and every row 16-byte aligned (TMA).
std::vector<Candidate> GemmSm90Candidates(const Task& task, const GemmPlan& p, const std::string& functor,
                                          int max_candidates);

}  // namespace dice::generator::tmpl
