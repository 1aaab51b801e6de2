// trial_layout.cc — trial layout facts (trial_layout.h).
#include "trial_layout.h"

#include <algorithm>
#include <cmath>

namespace dice::runtime::worker_impl {

std::vector<bool> PositiveDomainInputs(const ir::Graph& g) {
  const size_t n_in = g.inputs.size();
  std::vector<std::vector<bool>> deps(static_cast<size_t>(g.num_values()), std::vector<bool>(n_in, false));
  for (size_t i = 0; i < n_in; ++i) deps[i][i] = true;
  std::vector<bool> positive(n_in, false);
  for (size_t k = 0; k < g.ops.size(); ++k) {
    const ir::Op& op = g.ops[k];
    auto& self = deps[static_cast<size_t>(g.op_value(k))];
    for (int32_t a : op.args) {
      for (size_t i = 0; i < n_in; ++i) self[i] = self[i] || deps[static_cast<size_t>(a)][i];
    }
    bool restricted = op.kind == ir::OpKind::kLog || op.kind == ir::OpKind::kSqrt ||
                      op.kind == ir::OpKind::kRsqrt || op.kind == ir::OpKind::kPow;
    if (op.kind == ir::OpKind::kPowScalar && !op.scalars.empty()) {
      restricted = std::floor(op.scalars[0]) != op.scalars[0];
    }
    if (restricted && !op.args.empty()) {
      const auto& d = deps[static_cast<size_t>(op.args[0])];
      for (size_t i = 0; i < n_in; ++i) positive[i] = positive[i] || d[i];
    }
  }
  return positive;
}

int64_t StorageNumel(const ir::TensorSpec& s) {
  int64_t n = 1;
  for (size_t i = 0; i < s.shape.size(); ++i) {
    if (s.shape[i] == 0) return 0;
    n += (s.shape[i] - 1) * s.strides[i];
  }
  return n;
}

int64_t AlignmentOffset(const ir::TensorSpec& s) {
  const int64_t es = ir::DTypeSize(s.dtype);
  return (s.alignment < 16 && s.alignment >= es) ? s.alignment / es : 0;
}

TrialResidency PlanResidency(const std::vector<ir::TensorSpec>& inputs, const std::vector<ir::TensorSpec>& outputs,
                             int n_trials, int64_t max_resident_bytes) {
  n_trials = std::max(n_trials, 1);
  int64_t trial_bytes = 0;
  for (const auto& spec : inputs) trial_bytes += spec.nbytes();
  for (const auto& spec : outputs) trial_bytes += 2 * spec.nbytes();  // reference + slack
  TrialResidency r;
  r.resident = trial_bytes * n_trials > max_resident_bytes ? 1 : n_trials;
  if (r.resident < n_trials) {
    r.lazy_first = r.resident;
    r.lazy_last = n_trials;
  }
  return r;
}

}  // namespace dice::runtime::worker_impl
