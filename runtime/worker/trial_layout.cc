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

namespace {

// Dims innermost first of channels_last (rank 4) and channels_last_3d (rank 5).
constexpr int kChannelsLast2d[] = {1, 3, 2, 0};
constexpr int kChannelsLast3d[] = {1, 4, 3, 2, 0};

// Dense in the order `inner_first` (all dims), size-1 dims ignored.
bool DenseIn(const ir::TensorSpec& s, const int* inner_first) {
  int64_t expected = 1;
  for (size_t k = 0; k < s.shape.size(); ++k) {
    const int d = inner_first[k];
    if (s.shape[d] == 1) continue;
    if (s.strides[d] != expected) return false;
    expected *= s.shape[d];
  }
  return true;
}

// The channels_last order `spec` is in (not also contiguous), or null.
const int* ChannelsLastOrder(const ir::TensorSpec& spec) {
  if (spec.strides.size() != spec.shape.size() || spec.numel() == 0 || spec.is_contiguous()) return nullptr;
  if (spec.shape.size() == 4 && DenseIn(spec, kChannelsLast2d)) return kChannelsLast2d;
  if (spec.shape.size() == 5 && DenseIn(spec, kChannelsLast3d)) return kChannelsLast3d;
  return nullptr;
}

}  // namespace

std::vector<ir::TensorSpec> OutputsFollowingInputs(const std::vector<ir::TensorSpec>& inputs,
                                                   std::vector<ir::TensorSpec> outputs) {
  for (auto& out : outputs) {
    for (const auto& in : inputs) {
      if (in.shape != out.shape) continue;
      if (const int* order = ChannelsLastOrder(in)) {
        int64_t stride = 1;
        for (size_t k = 0; k < out.shape.size(); ++k) {
          out.strides[order[k]] = stride;
          stride *= out.shape[order[k]];  // numel > 0 here
        }
      }
      break;  // the first input of the output's shape decides
    }
  }
  return outputs;
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
