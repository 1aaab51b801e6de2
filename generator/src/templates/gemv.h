// gemv.h (private) — the skinny-GEMM template family (issue 19 item 2).
#pragma once

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

}  // namespace dice::generator::tmpl
