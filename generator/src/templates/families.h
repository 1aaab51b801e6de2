// families.h (private) — the schedule families of the template generator.
// Each takes a lowered group (lowering.h) and returns up to `max_candidates`
// device-form candidates (candidate.h calling convention), best guess first.
#pragma once

#include <vector>

#include "dice/core/candidate.h"
#include "dice/core/status.h"
#include "lowering.h"

namespace dice::tmpl {

/// Pure elementwise groups (no Reduce node). Variants: block {128,256,512} x
/// vector width {1, 16-byte}. Errors: kUnsupported when the group reduces.
Expected<std::vector<Candidate>> ElementwiseCandidates(const Lowered& lo, int max_candidates);

/// Groups whose reductions all reduce the same axes R. Variants: column
/// (thread per row), warp per row, block per row (register-cached row or
/// re-read), split row (partials in the workspace + finalize kernel), and on
/// `sm` >= 90 a row per thread-block cluster with an L2-sized grid; each with
/// fused statistics (online softmax, one-pass moments) where they apply.
/// `sm` is the target's compute capability (90 for sm_90).
Expected<std::vector<Candidate>> RowCandidates(const Lowered& lo, int max_candidates, int sm);

}  // namespace dice::tmpl
