// dice/training/rollout_numerics.h — how far the decoder's log-probabilities
// of a rollout's tokens are from the ones TraceRL's trainer recomputes
// (issue 19 item 5: rollouts use the fast decoder, CUDA graphs, fused
// kernels and the merged commit, while the TraceRL ratio keeps using the
// trainer's own logp_old from SdarModel::ForwardPacked).
//
// The decoder (DecodeOptions::record_logprobs) records, beside each trace
// token, log p(token) under the untempered distribution of the denoising
// step that revealed it; the trainer scores the same token in the same
// context (losses.h PackTrace: the copy of its block at that step), so the
// two differ only by numerics (kernels, shapes, dtype rounding). Both are
// natural logs (nats). The gap is reported per RL step in the log and the
// CSV (logp_gap_mean, logp_gap_max); training/README.md says what to expect.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "dice/core/status.h"
#include "dice/training/losses.h"

namespace dice::training {

/// |logp_decoder - logp_trainer| over the tokens compared so far (nats).
struct LogProbGap {
  int64_t tokens = 0;   ///< tokens compared
  double max_abs = 0;   ///< largest |difference|
  double sum_abs = 0;   ///< sum of |difference|
  /// sum_abs / tokens (0 when none).
  double mean_abs() const { return tokens > 0 ? sum_abs / static_cast<double>(tokens) : 0.0; }
  /// Adds another gap's tokens (max of the maxima, sum of the sums).
  void Merge(const LogProbGap& other);
};

/// Indices into trace.tokens of PackTrace's scored slots, in PackTrace's
/// (and PackTraceChunks' concatenated) order: per block of the trace, per
/// denoising step k = 0 .. the block's largest step, the block's tokens
/// revealed at step k in ascending position. REQUIRES: the trace is one
/// PackTrace accepts (tokens and steps of one length, prompt + tokens whole
/// blocks, steps >= 0); otherwise kInvalidArgument as PackTrace's.
Expected<std::vector<int64_t>> ScoredTraceIndices(const RolloutTrace& trace, int64_t block_size);

/// Adds |decoder_logp[trace_indices[i]] - trainer_logp[i]| for i in [0, T)
/// to *gap, T = trainer_logp.numel() (float tensor [T], any device; read
/// back once). `decoder_logp` is DecodeResult::trace_logprobs of the
/// rollout (one per trace token). Errors: kInvalidArgument when
/// trainer_logp is not 1-D, trace_indices.size() != T, or an index is
/// outside decoder_logp; a non-finite difference is an error too (it would
/// hide every other token's gap).
Status AddLogProbGap(const std::vector<float>& decoder_logp, const std::vector<int64_t>& trace_indices,
                     const torch::Tensor& trainer_logp, LogProbGap* gap);

}  // namespace dice::training
