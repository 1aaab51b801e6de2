// families.h (private) — the schedule families of the template generator.
// Each takes a lowered group (lowering.h) and returns up to `max_candidates`
// device-form candidates (candidate.h calling convention), best guess first.
#pragma once

#include <string>
#include <vector>

#include "dice/core/candidate.h"
#include "dice/core/status.h"
#include "dice/core/task.h"
#include "lowering.h"

namespace dice::generator::tmpl {

/// Pure elementwise groups (no Reduce node). Variants: block {128,256,512} x
/// vector width {1, 16-byte}; the grid-stride grid is capped at 4 waves of
/// the target's SMs (target.sm_count, max_threads_per_sm). Errors:
/// kUnsupported when the group reduces.
Expected<std::vector<Candidate>> ElementwiseCandidates(const Lowered& lo, int max_candidates,
                                                       const TargetInfo& target);

/// Groups whose reductions all reduce the same axes R. Variants: column
/// (thread per row), warp per row, block per row (register-cached row or
/// re-read), split row (partials in the workspace + finalize kernel), and on
/// sm_90+ targets with cluster launch a row per thread-block cluster with an
/// L2-sized grid; each with fused statistics (online softmax, one-pass
/// moments) where they apply. Grids, split chunks, rows in flight and the
/// shared-memory row cache are sized from the target's device facts (SM
/// count, threads per SM, L2 bytes, opt-in shared memory per block).
Expected<std::vector<Candidate>> RowCandidates(const Lowered& lo, int max_candidates, const TargetInfo& target);

/// The compute capability in `arch` as a number: "sm_90" / "sm_90a" -> 90;
/// 0 when unparsable (which disables arch-specific variants).
int ArchNumber(const std::string& arch);

}  // namespace dice::generator::tmpl
