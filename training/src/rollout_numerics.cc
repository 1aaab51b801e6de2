// Decoder vs trainer log-probabilities: see dice/training/rollout_numerics.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/training/rollout_numerics.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace dice::training {

namespace {

Status Invalid(const std::string& m) { return Status(StatusCode::kInvalidArgument, m); }

}  // namespace

void LogProbGap::Merge(const LogProbGap& other) {
  tokens += other.tokens;
  max_abs = std::max(max_abs, other.max_abs);
  sum_abs += other.sum_abs;
}

Expected<std::vector<int64_t>> ScoredTraceIndices(const RolloutTrace& trace, int64_t block_size) {
  const int64_t P = static_cast<int64_t>(trace.prompt.size());
  const int64_t N = P + static_cast<int64_t>(trace.tokens.size());
  if (P == 0) return Invalid("ScoredTraceIndices: the prompt is empty");
  if (block_size < 1 || trace.tokens.size() != trace.steps.size() || N % block_size != 0) {
    return Invalid("ScoredTraceIndices: tokens (" + std::to_string(trace.tokens.size()) + ") and steps (" +
                   std::to_string(trace.steps.size()) + ") must have one length and prompt + tokens fill whole "
                   "blocks of " + std::to_string(block_size));
  }
  std::vector<int64_t> out;
  out.reserve(trace.tokens.size());
  for (int64_t b = P / block_size; b < N / block_size; ++b) {
    const int64_t lo = std::max(P, b * block_size), hi = (b + 1) * block_size;
    int32_t max_step = -1;
    for (int64_t j = lo; j < hi; ++j) {
      if (trace.steps[j - P] < 0) return Invalid("ScoredTraceIndices: token " + std::to_string(j - P) + " has step < 0");
      max_step = std::max(max_step, trace.steps[j - P]);
    }
    for (int32_t k = 0; k <= max_step; ++k) {
      for (int64_t j = lo; j < hi; ++j) {
        if (trace.steps[j - P] == k) out.push_back(j - P);
      }
    }
  }
  return out;
}

Status AddLogProbGap(const std::vector<float>& decoder_logp, const std::vector<int64_t>& trace_indices,
                     const torch::Tensor& trainer_logp, LogProbGap* gap) {
  if (!trainer_logp.defined() || trainer_logp.dim() != 1) return Invalid("AddLogProbGap: trainer logp must be 1-D");
  const int64_t T = trainer_logp.numel();
  if (static_cast<int64_t>(trace_indices.size()) != T) {
    return Invalid("AddLogProbGap: " + std::to_string(trace_indices.size()) + " trace indices for " +
                   std::to_string(T) + " trainer log-probabilities");
  }
  const auto host = trainer_logp.detach().to(torch::kCPU, torch::kDouble).contiguous();
  const double* lp = host.data_ptr<double>();
  LogProbGap add;
  for (int64_t i = 0; i < T; ++i) {
    const int64_t j = trace_indices[i];
    if (j < 0 || j >= static_cast<int64_t>(decoder_logp.size())) {
      return Invalid("AddLogProbGap: trace index " + std::to_string(j) + " outside the decoder's " +
                     std::to_string(decoder_logp.size()) + " log-probabilities");
    }
    const double d = std::fabs(static_cast<double>(decoder_logp[j]) - lp[i]);
    if (!std::isfinite(d)) {
      return Invalid("AddLogProbGap: non-finite difference at trace token " + std::to_string(j) + " (decoder " +
                     std::to_string(decoder_logp[j]) + ", trainer " + std::to_string(lp[i]) + ")");
    }
    add.max_abs = std::max(add.max_abs, d);
    add.sum_abs += d;
    ++add.tokens;
  }
  gap->Merge(add);
  return Status::Ok();
}

}  // namespace dice::training
