// trial_layout.h — how the verification trials of one task are laid out
// (private to runtime/worker/; torch-free, so it is testable and cheap to
// build). verifier.cc builds the trial tensors from these facts: which inputs
// must stay in an op's domain, how many elements a strided input's storage
// spans, the offset that gives a data pointer the spec's alignment, and how
// many random trials stay resident on the device. Plain functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "dice/core/ir.h"

namespace dice::runtime::worker_impl {

/// One flag per graph input: true when its values reach the argument of an
/// op with a restricted domain (log, sqrt, rsqrt: x > 0; pow, and pow_scalar
/// with a non-integer power: base > 0). Such inputs are drawn as
/// |randn * scale| + 0.1 so a trial is not all NaN.
std::vector<bool> PositiveDomainInputs(const ir::Graph& graph);

/// Elements the strided layout of `spec` spans: 1 + sum((shape[i]-1)*strides[i]),
/// 0 for an empty tensor.
int64_t StorageNumel(const ir::TensorSpec& spec);

/// Offset in elements that gives the data pointer the spec's alignment when
/// it is below 16 bytes (device allocations are 256-byte aligned); 0 otherwise.
int64_t AlignmentOffset(const ir::TensorSpec& spec);

/// Which random trials stay on the device.
struct TrialResidency {
  int resident = 1;                   ///< random trials [0, resident) are built once and kept
  int lazy_first = 0, lazy_last = 0;  ///< random trials [first, last) are rebuilt from their seeds when needed
};

/// Above `max_resident_bytes` of trial data (inputs plus reference outputs
/// and their slack, over all `n_trials` trials), only trial 0 stays resident
/// (timing and the baseline use it) and the others are rebuilt one at a time:
/// a 6 GB-per-tensor task would otherwise hold ~70 GB. `n_trials` < 1 counts as 1.
TrialResidency PlanResidency(const std::vector<ir::TensorSpec>& inputs, const std::vector<ir::TensorSpec>& outputs,
                             int n_trials, int64_t max_resident_bytes);

}  // namespace dice::runtime::worker_impl
