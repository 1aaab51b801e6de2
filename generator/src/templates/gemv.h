// gemv.h (private) — the skinny-GEMM template family (issue 19 item 2).
#pragma once

#include <string>
#include <vector>

#include "dice/core/candidate.h"
#include "dice/core/status.h"
#include "dice/core/task.h"

namespace dice::generator::tmpl {

/// Most rows (M = product of x's leading dims) the family takes: decode
/// steps (a diffusion block of 4 tokens, batch <= 4) stream the weight.
inline constexpr int64_t kGemvMaxRows = 16;

/// Device-form candidates for a group out = epilogue(linear(x, w[, b])) over
/// its inputs declared in that order, where the epilogue (optional) is
/// elementwise ops over linear's value and scalars only, a DAG (y *
/// sigmoid(y)), applied in float where each output is stored, each value
/// computed once: x [..., K] with M <= kGemvMaxRows
/// rows, w [N, K], b [N], one dtype (f32 / f16 / bf16), all contiguous; out
/// [..., N] of that dtype. Each warp owns R output columns, walks K in
/// 16-byte loads (1-element loads when K * element size is not a multiple of
/// 16 bytes) and accumulates in float; variants R x warps-per-block x split-K
/// (split > 1: float atomics into a workspace of M * N * 4 bytes plus a
/// finishing kernel for bias and cast). Origins
/// "template:gemv/r<R>/w<warps>/s<split>/v<elements per load>". Returns at
/// most `max_candidates`, column-parallel first; split-K only when the
/// columns give fewer than two blocks per SM (target.sm_count).
/// Errors: kUnsupported naming why (more than the one linear, an op that is
/// no elementwise epilogue or reads another tensor, too many rows,
/// non-contiguous, inputs out of order, an empty GEMM).
Expected<std::vector<Candidate>> SkinnyGemmCandidates(const Task& task, int max_candidates, const TargetInfo& target);

/// One streaming skinny GEMM (the family's "stream" form; issue 19 item 2):
/// out [m, n] = x [m, k] @ w^T (+ b) with w [n, k] row-major, or, with
/// silu_mul, out [m, n] = silu(x @ g^T) * (x @ u^T) where w [2n, k] holds
/// the gate rows g then the up rows u (the merged gate/up weight). One dtype
/// (f32 / f16 / bf16) for x, w, b and out; float accumulation; every pointer
/// 16-byte aligned and k * element size a multiple of 16 bytes.
struct StreamGemvSpec {
  int64_t m = 0;  ///< rows compiled for (1..kGemvMaxRows); the decoder form
                  ///< takes any rows <= m at launch
  int64_t n = 0, k = 0;
  ir::DType dtype = ir::DType::kBFloat16;
  bool bias = false;      ///< b [n] added before the epilogue
  bool silu_mul = false;  ///< the gate/up epilogue (no bias)
  // Launch geometry; 0 / false: the family's choice (for probes and tuning).
  int cols_per_warp = 0;  ///< output columns a warp owns, 1..4 (silu_mul: gate + up rows each)
  int warps = 0;          ///< warps a block, 1..8
  int unroll = 0;         ///< 16-byte weight loads per column in flight, 1..16
  /// The direct form: x read through L1 where it is used, no shared-memory
  /// staging and no barrier; blocks loop over column groups (grid_blocks).
  bool x_direct = false;
  int grid_blocks = 0;  ///< direct form: at most this many blocks (0: one per column group)
};

/// Why `spec` does not fit the stream form, or Ok. Errors: kUnsupported
/// (rows outside 1..kGemvMaxRows, an empty GEMM, k * element size not a
/// multiple of 16 bytes, silu_mul with a bias, a geometry field out of its
/// range, grid_blocks without x_direct).
Status CheckStreamGemv(const StreamGemvSpec& spec);

/// The part of a stream-form source shared by all its instances (NVRTC,
/// -std=c++17): the element type T, conversions, `dice_epilogue` (the
/// identity when identity_epilogue, else the text `epilogue` defining
/// `float dice_epilogue(float)`) and the kernel template. One prelude per
/// source; any number of StreamGemvInstance after it (same dtype).
std::string StreamGemvPrelude(ir::DType dtype, bool identity_epilogue, const std::string& epilogue = "");

/// An extern "C" kernel `name` for `spec`: parameters (x, w[, b], out[,
/// int rows]); rows_argument false: the spec's m rows exactly. The block
/// stages x in tiles of at most 32 KB of shared memory (x_direct: reads it
/// through L1, no barrier, grid-stride over column groups), each warp owns 1-4
/// output columns and keeps 2-8 16-byte weight loads per column in flight;
/// the SILU store rounds gate and up to the dtype, silu(gate) to the dtype,
/// then the product, as the unfused LibTorch path stores them.
/// Precondition: CheckStreamGemv(spec) is Ok.
std::string StreamGemvInstance(const StreamGemvSpec& spec, const std::string& name, bool rows_argument);

/// Grid and block of StreamGemvInstance(spec, name, ...) (no dynamic shared
/// memory, no workspace): one block per column group, at most grid_blocks
/// of them in the direct form.
KernelLaunch StreamGemvLaunch(const StreamGemvSpec& spec, const std::string& name);

/// "template:gemv/stream/r<cols>/w<warps>/s1/u<loads in flight>/t<x tile>/v<elements per load>[/silu_mul]";
/// the direct form "template:gemv/direct/r<cols>/w<warps>/u<loads>/g<grid cap, 0 = none>/v<elements>[/silu_mul]".
std::string StreamGemvOrigin(const StreamGemvSpec& spec);

}  // namespace dice::generator::tmpl
