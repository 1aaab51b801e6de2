// dice/generator/templates.h — parametric CUDA templates (always available).
//
// TemplateGenerator emits candidates (device form in the candidate.h calling
// convention, or extension form for gemm and gemm_lt) for a fusion group by lowering it to primitive ops and picking
// a schedule family:
//   * elementwise: pure elementwise DAGs with broadcasting and scalar
//     constants; variants over block size, vector width (16-byte loads when
//     contiguous and aligned) and elements per thread; grid-stride loops,
//     64-bit indexing when any tensor has >= 2^31 elements.
//   * row: groups whose reductions/normalisations all reduce the same axes
//     (sum/mean/amax/amin/logsumexp/norm, softmax/log_softmax, layer_norm,
//     group_norm, e.g. RMSNorm written as x / sqrt(mean(x^2)+eps)) with
//     elementwise prologue/epilogue; variants warp-per-row vs block-per-row,
//     block size, two-pass vs online softmax, row cached in shared memory.
//     Channels_last / channels_last_3d tasks are lowered in memory order.
//   * gemm (issue 18): linear followed by an elementwise epilogue (scalars,
//     one row vector or one residual) -> extension-form candidates on
//     CUTLASS 2.x device::Gemm (nvcc; float32 through 3xTF32, off under
//     DICE_STRICT_FP32=1; f16/bf16 tensor ops) with the epilogue generated
//     into the output op; tile configurations from CUTLASS's sm80 lists.
//   * gemv (issue 19): a bare linear with at most 16 rows -> device-form
//     GEMV-style candidates (a warp per output columns, 16-byte weight
//     loads, optional split-K with a float workspace), offered before gemm.
//   * gemm_lt (issue 18): linear whose epilogue is cuBLASLt's own (bias,
//     an output-shaped add, relu, tanh gelu) -> extension-form candidates
//     that make one cublasLtMatmul call with the epilogue fused, one per rank
//     of cuBLASLt's heuristic list (host code only, linked against cuBLASLt;
//     $DICE_GEMM_LT=0 turns it off), offered after gemv and before gemm.
// Shapes are baked into the source as constants (a task key fixes them).
// Grids, rows in flight and shared-memory budgets are sized from the task's
// target (TargetInfo's device facts: SM count, threads per SM, L2 bytes,
// opt-in shared memory per block, cluster launch), so an H100 PCIe (114 SMs)
// and an H200 (132 SMs) get their own grids; the default TargetInfo gives
// the H100/H200 SXM ones.
// Computation is in float32 for every dtype; loads/stores convert.
// Thread-compatible; stateless apart from options.
#pragma once

#include <string>
#include <vector>

#include "dice/core/generator.h"

namespace dice::generator {

class TemplateGenerator : public KernelGenerator {
 public:
  TemplateGenerator() = default;
  std::string name() const override { return "templates"; }
  /// Errors: kUnsupported naming the op or the pattern (e.g. two reductions
  /// over different axes) when no family applies.
  Expected<std::vector<Candidate>> Generate(const Task& task, int max_candidates) override;
};

}  // namespace dice::generator
