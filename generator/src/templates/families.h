// families.h (private) — the schedule families of the template generator.
// Each takes a lowered group (lowering.h) and returns up to `max_candidates`
// device-form candidates (candidate.h calling convention), best guess first;
// the gemm and conv families take the task itself and return extension-form ones.
#pragma once

#include <string>
#include <vector>

#include "dice/core/candidate.h"
#include "dice/core/status.h"
#include "dice/core/task.h"
#include "lowering.h"

namespace dice::generator::tmpl {

struct TransposeOrders;  // layout.h

/// Pure elementwise groups (no Reduce node). Variants: block {128,256,512} x
/// vector width {1, 16-byte}; the grid-stride grid is capped at 4 waves of
/// the target's SMs (target.sm_count, max_threads_per_sm). A mixed-order
/// group (layout.h: TransposePlan finds two orders) gets the tiled-transpose
/// variants (TransposeCandidates) first, then the strided ones, at most
/// `max_candidates` in all. Errors: kUnsupported when the group reduces.
Expected<std::vector<Candidate>> ElementwiseCandidates(const Lowered& lo, int max_candidates,
                                                       const TargetInfo& target);

/// The tiled-transpose variants of the elementwise family (transpose.cc) for
/// a mixed-order group, `p` = TransposePlan(lo) (layout.h): origins
/// "template:elementwise/transpose_t32" and ".../transpose_t64", tile edge TW
/// = 32 / 64, block (TW, 256 / TW), one static __shared__ float tile
/// [TW][TW + 1] per distinct I-order input (4.1 KB / 16.3 KB each); each CTA
/// transposes TW x TW tiles of the (a_in, a_out) plane, grid-stride, the grid
/// capped at 4 waves of the target's SMs. f32 / f16 / bf16 tensors (math in
/// float), 32-bit or 64-bit indices (NeedsWideIndex). Returns up to
/// `max_candidates` (t32 first); none when more than 4 distinct inputs need a
/// tile, and no t64 when its tiles exceed 48 KB (more than 2 inputs).
/// When TransposeVectorWidths(lo, p) finds a side that can be vectorised
/// (in or out > 1), up to three vectorised variants follow: origins
/// ".../transpose_t32v<VI>x<VO>", ".../transpose_t64v<VI>x<VO>" (256 threads)
/// and ".../transpose_t64v<VI>x<VO>_b128" (128 threads), 1-D blocks, the same
/// tiles and tile caps; VI = min(in, TW * TW / threads) elements per tiled-load
/// access along a_in, VO = min(out, TW * TW / threads) per output access
/// along a_out (1 = that side scalar; e.g. t32v4x2 loads float4 and stores
/// float2). Direct loads and broadcast outputs that pass the same alignment
/// test at VO are moved VO wide too, the others one element at a time.
/// REQUIRES: `p` was computed from `lo` (num_reduces == 0).
std::vector<Candidate> TransposeCandidates(const Lowered& lo, const TransposeOrders& p, int max_candidates,
                                           const TargetInfo& target);

/// Vector widths (elements per access) of the vectorised tiled transposes.
struct TransposeVecWidths {
  int in = 1;   ///< along a_in, for every tiled load of the load phase
  int out = 1;  ///< along a_out, for every full-size output of the store phase
};

/// The widest width in {8, 4, 2} (1 = scalar) at which every tensor of a
/// side of the tiled transpose `p` = TransposePlan(lo) can be accessed that
/// many consecutive elements at a time at every run a tile visits, provably
/// from the baked facts: the access is at most 16 bytes and the tensor's data
/// pointer is aligned to it (TensorSpec / OutputRef alignment, bytes); the
/// tensor spans the side's innermost axis (a_in for the tiled loads, a_out
/// for the full-size outputs) with stride 1; F along that axis is a multiple
/// of the width; and every other stride (axes with F > 1) is a multiple of
/// it. So f32 reaches 4 (16 bytes), f16 / bf16 8; an odd extent or a 4-byte
/// aligned pointer gives 1. Pure; thread-safe.
TransposeVecWidths TransposeVectorWidths(const Lowered& lo, const TransposeOrders& p);

/// Groups whose reductions all reduce the same axes R. Variants: column
/// (thread per row), warp per row, block per row (register-cached row or
/// re-read), split row (partials in the workspace + finalize kernel), and on
/// sm_90+ targets with cluster launch a row per thread-block cluster with an
/// L2-sized grid; each with fused statistics (online softmax, one-pass
/// moments) where they apply. Grids, split chunks, rows in flight and the
/// shared-memory row cache are sized from the target's device facts (SM
/// count, threads per SM, L2 bytes, opt-in shared memory per block).
Expected<std::vector<Candidate>> RowCandidates(const Lowered& lo, int max_candidates, const TargetInfo& target);

/// Whether `graph` has a contraction op (ir::OpCategory::kContraction:
/// kLinear, kConv2d): such groups go to GemmCandidates / ConvCandidates,
/// never to Lower.
bool HasContraction(const ir::Graph& graph);

/// The gemm family (issue 18 item 1): a group whose first non-constant op is
/// linear over group inputs — x [..., K] (rank >= 1), weight [N, K][, bias
/// [N]], one dtype (f32 / f16 / bf16), contiguous — followed by unary/binary
/// elementwise ops on the running values, weak scalar constants and at most
/// one extra group input, either a per-column vector ([N], [1, N], ...) or an
/// output-shaped tensor [..., N]; the last op's value is the only output, of
/// linear's shape and dtype. Returns up to `max_candidates` extension-form
/// candidates (extension_compiler.h: CUDA C++ with a host
/// `torch::Tensor dice_forward(torch::Tensor in0, ...)`, one argument per task
/// input), each one tile configuration of CUTLASS 2.x's
/// cutlass::gemm::device::Gemm (sm80 tensor-op kernels, run on sm_90; headers
/// from extension_compiler.h's CutlassIncludeDir()) with a generated epilogue
/// output op computing the chain in float per element:
///   - f32: 3xTF32 (cutlass::arch::OpMultiplyAddFastF32, instruction 16x8x8),
///     origin "template:gemm/3xtf32/<MxNxK tile>/s<stages>",
///     reduced_precision = false (float32 accuracy; the verifier decides);
///     none when $DICE_STRICT_FP32=1;
///   - f16 / bf16: OpMultiplyAdd, instruction 16x8x16, float accumulation,
///     origin "template:gemm/tc/<tile>/s<stages>".
/// Operand access widths follow K and N divisibility and pointer alignment
/// (16 bytes at most, 1 element when K or N is not a multiple of 4 for f32).
/// The source bakes in no shape: dice_forward reads M, N, K from x and weight
/// at run time and checks x's rank, K/N consistency of weight, bias and the
/// extra tensor, and that K and N are multiples of the access widths the
/// configuration was built for (TORCH_CHECK otherwise). Tasks that differ only
/// in M/N/K within one alignment class get byte-identical sources, so the
/// runtime's build cache (extension_compiler.h, CompileExtensionCached)
/// compiles each configuration once.
/// Ordered by the share of the target's tile slots (waves x sm_count) that
/// compute output elements, then by tile size. With $DICE_GEMM_SM90=1 the
/// Hopper kernels (gemm_plan.h GemmSm90Candidates: CUTLASS 3.x, TMA +
/// wgmma, "template:gemm/sm90-tc/...") come first for bf16 / f16 groups on
/// sm_90 whose rows are 16-byte multiples.
/// Errors: kUnsupported with the reason (op after linear not elementwise,
/// two extra tensors, an extra tensor neither per-column nor output-shaped,
/// bias and extra tensor not combinable, mixed dtypes, non-contiguous input,
/// odd K/N for 16-bit types, an empty GEMM, DICE_STRICT_FP32=1 for f32).
Expected<std::vector<Candidate>> GemmCandidates(const Task& task, int max_candidates);

/// Whether a GEMM group that the cuBLASLt family takes also gets CUTLASS
/// candidates (TemplateGenerator::Generate): always for a float32 output
/// (3xTF32 CUTLASS beats cuBLAS there), for bf16/f16 only with
/// $DICE_GEMM_CUTLASS_16BIT=1. Measured (docs/DECISIONS.md, session 29, H100):
/// the CUTLASS 2.x bf16 kernels ran GPT-2's QKV projection at 92.5 µs against
/// cuBLAS's 50.2 µs, and their nvcc builds were most of the first call's
/// 48 s, while cuBLASLt fuses the epilogue into cuBLAS's own kernels.
bool CutlassAfterLt(const Task& task);

/// Candidates per cuBLASLt group: ranks 0 .. kGemmLtRanks - 1 of the library's
/// heuristic list (GemmLtCandidates).
inline constexpr int kGemmLtRanks = 3;

/// The cuBLASLt family (issue 18 item 1; generator/src/templates/gemm_lt.cc): a
/// group act(linear(x, weight[, bias]) [+ E]) whose epilogue is one of
/// cuBLASLt's own — bias [N] (linear's, or a per-column add when linear has
/// none), an output-shaped tensor E added before the activation (C with beta
/// = 1), then relu or the tanh GELU (CUBLASLT_EPILOGUE_{BIAS, RELU, GELU}
/// and their _BIAS forms) — one dtype (f32 / f16 / bf16), contiguous inputs.
/// Returns up to min(max_candidates, kGemmLtRanks) extension-form candidates,
/// host C++ only (<cublasLt.h> and the ATen/c10 subset of the CUTLASS
/// families), linked against cuBLASLt through the source line
/// "// dice-nvcc-link: cublasLt" (extension_compiler.h
/// ExtensionLinkLibraries): candidate r runs one cublasLtMatmul with the
/// r-th algorithm of cuBLASLt's heuristic list for the shape and the
/// operands' alignments (32 MiB workspace at most, CUBLAS_COMPUTE_32F, float
/// scaling), origin "template:gemm_lt/<epilogue>/a<r>" (epilogue e.g.
/// "bias_gelu", "residual_bias_relu"), reduced_precision = false. Sources
/// bake in no shape (M, N, K are read at run time; the plan is kept per
/// device, shape and alignment for the process's life). At run time a shape
/// with fewer than r + 1 algorithms, or a cuBLASLt error, throws with the
/// library's status string (the worker records it as the candidate's
/// failure). Errors: kUnsupported with the reason (an op that is not one of
/// those epilogues, erf GELU, an op after the activation, a bare linear,
/// mixed dtypes, a non-contiguous input, an empty GEMM, $DICE_GEMM_LT=0).
Expected<std::vector<Candidate>> GemmLtCandidates(const Task& task, int max_candidates);

/// Whether `graph` has a conv2d op (ir::OpKind::kConv2d): such groups go to
/// ConvCandidates.
bool HasConv(const ir::Graph& graph);

/// The conv family (issue 18 item 2; generator/src/templates/conv.cc): a
/// group whose first non-constant op is conv2d over group inputs — x [N, C,
/// H, W], weight [K, C, R, S][, bias [K]], groups == 1, R and S <= 32, one
/// dtype (f32 / f16 / bf16), x and weight contiguous or channels_last, every
/// tensor under 2 GiB — followed by unary/binary elementwise ops on the
/// running values, weak scalar constants and at most one extra group input,
/// either per-channel ([K, 1, 1], [1, K, 1, 1]) or output-shaped [N, K, P, Q];
/// the last op's value is the only output, of conv2d's shape and dtype.
/// Returns up to `max_candidates` extension-form candidates, each one tile
/// configuration of CUTLASS 2.x's implicit-GEMM fprop
/// (cutlass::conv::kernel::DefaultConv2dFprop, IteratorAlgorithm::kOptimized,
/// NHWC activations, KRSC filters, sm80 tensor ops run on sm_90) with the gemm
/// family's generated epilogue output op (cutlass_epilogue.h):
///   - f32: TF32 (OpMultiplyAdd on float operands, instruction 16x8x8),
///     origin "template:conv/tf32/<MxNxK tile>/s<stages>", reduced_precision
///     = true (cuDNN's precision under PyTorch's default
///     torch.backends.cudnn.allow_tf32); with $DICE_STRICT_FP32=1 3xTF32
///     (OpMultiplyAddFastF32), origin "template:conv/3xtf32/...",
///     reduced_precision = false;
///   - f16 / bf16: OpMultiplyAdd, instruction 16x8x16, float accumulation,
///     origin "template:conv/tc/<tile>/s<stages>".
/// Access widths follow C (x, weight) and K (source, output) divisibility
/// and alignment: 16 bytes at most, down to 1 element for f32, 2 for 16-bit.
/// dice_forward takes NCHW tensors as the group gets them, converts x and
/// weight to channels_last inside (nothing cached across calls) and returns a
/// channels_last-strided NCHW output (run_group and the verifier accept any
/// strides). Sources bake in the stride/padding/dilation, not the sizes.
/// Ordered by how much of one wave of the target's SMs each tile's grid fills.
/// With $DICE_CONV_SM90=1 on an sm_90 target, CUTLASS 3.x sm90 candidates
/// (conv_sm90.cc: TMA im2col + wgmma, built for sm_90a; origin
/// "template:conv/sm90-tf32/<tile>[/c<cluster>]" or ".../sm90-tc/...") come
/// first, when C and K allow 16-byte accesses and the math is not 3xTF32.
/// Errors: kUnsupported with the reason (groups != 1, op after conv2d not
/// elementwise, two extra tensors, an extra tensor neither per-channel nor
/// output-shaped, bias and extra not combinable, mixed dtypes, a strided
/// input, odd C/K for 16-bit types, R or S > 32, an empty conv, a 2 GiB tensor).
Expected<std::vector<Candidate>> ConvCandidates(const Task& task, int max_candidates);

/// The compute capability in `arch` as a number: "sm_90" / "sm_90a" -> 90;
/// 0 when unparsable (which disables arch-specific variants).
int ArchNumber(const std::string& arch);

}  // namespace dice::generator::tmpl
