// dice/generator/diffusion_decoder.h — block-diffusion decoding with an
// SdarModel (SDAR's generation procedure, as DICE uses it for rollouts).
//
// The algorithm (DESIGN.md "Decoding (SDAR)"):
//   1. The prompt's whole blocks are prefilled into the KV cache with the
//      block-causal mask (one forward, committed). A prompt whose length is
//      not a multiple of block_size leaves a partial block: it is the first
//      decoded block, its prompt tokens fixed and never masked.
//   2. Each new block starts with every free position set to the mask token
//      (config mask_token_id). Per denoising step the model scores the block
//      against the cached prefix (no mask: the block sees the prefix and all
//      of itself); the mask token's own logit is set to -inf; a token and its
//      probability are drawn per position (greedy when temperature == 0,
//      ties to the lowest id; else temperature, then top-k, then top-p
//      filtering, then sampling); the confidence of a position is the
//      probability of its drawn token. Still-masked positions are ranked by
//      confidence (descending; ties to the lower position) and the first k
//      revealed, where with n = masked positions at the block's start and S =
//      denoising_steps, step s (0-based) has the schedule
//        k_s = max(1, n / S + (s < n % S ? 1 : 0))       (SDAR's schedule)
//      - static low-confidence remasking: k = k_s;
//      - dynamic low-confidence remasking: k = max(k_s, #confidence >
//        confidence_threshold);
//      both capped by the positions still masked. The k_s sum to n over
//      min(S, n) steps, so a block is complete after at most min(S, n) steps
//      (static: exactly min(S, n); static with S = block_size reveals one
//      token a step).
//   3. A complete block is committed: its keys and values are written into
//      the cache. With DecodeOptions::merge_commit (default) this rides on
//      the next block's first denoising step: that forward runs over
//      [complete block ; next block] under the block-causal mask, so the
//      complete block's rows attend to exactly the keys a separate commit
//      forward would give them (the prefix and their own block) and the
//      next block's rows see the prefix, the complete block and themselves
//      (the same keys as after a separate commit). A block then costs
//      its denoising steps only (4 forwards at 4 steps, not 5); the last
//      block is never committed (nothing reads it). merge_commit = false is
//      the separate commit forward of earlier versions. Greedy tokens are
//      the same either way (to floating-point rounding of the attention
//      and GEMM kernels, which see other shapes; tested equal in f32).
//      With DecodeOptions::masked_logits_only (default) the LM head runs
//      only on the positions still masked at a step (the ones remasking
//      ranks; static: the same count in every row; dynamic: the largest
//      count over the batch, shorter rows padded with revealed positions
//      that are never chosen). Greedy tokens are unchanged; a sampled decode
//      (temperature > 0) draws fewer random numbers a step, so its tokens
//      differ from masked_logits_only = false for the same seed (the same
//      distribution).
//   4. A sample stops after a block that contains an EOS id (its output ends
//      before the first EOS) or once max_new_tokens tokens are generated
//      (output cut to max_new_tokens); finished samples leave the batch.
// n samples of one prompt decode together as a batch of n rows.
//
// Host/device synchronisation (matters on a GPU): one read-back per block
// (its tokens and reveal steps together, for the EOS check and the trace)
// and, for dynamic remasking only, one per denoising step after the first
// (how many masks remain); static steps queue without waiting (the static schedule's k is
// known on the host). With DecodeOptions::profile, Decode also synchronises
// at every phase boundary to time it (slower; for measurement only).
//
// CUDA graphs (DecodeOptions::cuda_graphs; `dice generate` and `dice tune`
// turn it on for a CUDA model): after the
// prefill, the per-step block forward and the commit forward (or the merged
// commit + first step) run through an
// SdarStepGraph (sdar_step_graph.h): captured once per batch size (again
// when finished samples leave the batch) and replayed, in the fixed-shape
// form (whole-cache attention under the block-causal mask). Tokens equal
// the eager path's up to floating-point rounding of the attention kernel.
//
// Determinism: for a given model (device, dtype), prompt and options
// (including seed) the tokens are the same on every run; the random stream
// is a private torch::Generator seeded with `seed` on the model's device.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dice/generator/sdar_model.h"
#include "dice/core/status.h"

namespace dice::generator {

class DecodeSession;  // decode_session.h

/// Low-confidence remasking schedule (see the header comment).
enum class Remasking { kStatic, kDynamic };

/// "static" / "dynamic".
const char* RemaskingName(Remasking r);
/// Parses "static" / "dynamic". Errors: kInvalidArgument naming the text.
Expected<Remasking> ParseRemasking(const std::string& text);

/// Reported after each block (for progress display).
struct DecodeProgress {
  int64_t blocks = 0;            ///< blocks finished so far
  int64_t generated_tokens = 0;  ///< tokens generated per sample so far (the longest sample)
  int64_t active_samples = 0;    ///< samples still decoding
  int64_t denoising_steps = 0;   ///< forwards over uncommitted blocks so far
  double elapsed_s = 0;          ///< wall time since Decode started, seconds
};

/// Where one Decode's wall time went, when DecodeOptions::profile is set
/// (each phase ends with a device synchronisation, so the times are what the
/// device and host together took; seconds). Phases in decoding order.
struct DecodeProfile {
  double setup_s = 0;          ///< KV cache allocation, prompt upload
  double prefill_s = 0;        ///< the prompt's whole blocks (one forward)
  double graph_capture_s = 0;  ///< SdarStepGraph warm-up + capture (cuda_graphs only; every capture)
  double step_forward_s = 0;   ///< denoising-step forwards (model + LM head)
  double sampling_s = 0;       ///< mask-logit fill, draw (softmax/argmax/sampling), ranking and reveal
  double readback_s = 0;       ///< block tokens to the host, EOS check, trace, progress callback
  double batch_select_s = 0;   ///< dropping finished samples from the cache and block
  double commit_s = 0;         ///< separate commit forwards (merge_commit: none; merged ones are step forwards)
  int64_t step_forwards = 0;   ///< denoising-step forwards timed (merged commit + step ones included)
  int64_t commits = 0;         ///< separate commit forwards timed
  int64_t captures = 0;        ///< graph captures (with a DecodeSession: new graphs only)
  int64_t graph_reuses = 0;    ///< graphs a DecodeSession kept from an earlier decode (no capture)
};

/// Decoding knobs. Defaults are DICE's rollout setting (block of the config,
/// 4 denoising steps, dynamic remasking with threshold 0.9), greedy.
struct DecodeOptions {
  int64_t max_new_tokens = 256;    ///< >= 1
  int64_t denoising_steps = 4;     ///< S per block, >= 1
  Remasking remasking = Remasking::kDynamic;
  double confidence_threshold = 0.9;  ///< dynamic only, in [0, 1]
  double temperature = 0.0;        ///< 0 = greedy; > 0 samples
  int64_t top_k = 0;               ///< 0 = off; else keep the k largest logits
  double top_p = 1.0;              ///< (0, 1]; 1 = off; nucleus filtering
  int64_t num_samples = 1;         ///< n rows decoded as one batch, >= 1
  uint64_t seed = 0;               ///< seeds the sampling generator
  /// Ids that end a sample: SDAR's {151643 <|endoftext|>, 151645 <|im_end|>}
  /// by default; empty = decode until max_new_tokens.
  std::vector<int64_t> eos_ids = {151643, 151645};
  /// Called after every block when set (same thread).
  std::function<void(const DecodeProgress&)> on_block;
  /// Run the step and commit forwards through an SdarStepGraph: CUDA graphs
  /// on a CUDA model; on a CPU model the same fixed-shape forward runs
  /// eagerly (for tests). Verified on the H200 (SdarGpuTest.CudaGraph*);
  /// 2.1-5.9x the eager decode's tokens/s there (3.3-8.9x a plain PyTorch loop) (docs/PERF.md).
  bool cuda_graphs = false;
  /// Time the phases of decoding into DecodeResult::profile (synchronises
  /// the device at every phase boundary: slower, for measurement).
  bool profile = false;
  /// Commit each complete block in the next block's first denoising step
  /// (one forward over both blocks) instead of a forward of its own (header
  /// step 3; issue 19 item 3). false: the separate commit forward.
  bool merge_commit = true;
  /// Run the LM head only on the positions still masked at each denoising
  /// step (header step 3). false: on the whole block. Greedy tokens are the
  /// same; sampled tokens differ for one seed (fewer draws a step).
  bool masked_logits_only = true;
  /// Record, per generated token, its log-probability under the model's
  /// untempered distribution at the step it was revealed (log-softmax of
  /// the float32 logits with the mask token excluded; no temperature, top-k
  /// or top-p) into DecodeResult::trace_logprobs: what TraceRL's trainer
  /// recomputes as logp_old (losses.h ScoredLogProbs), so `dice train rl`
  /// can measure how far the decoder's numerics are from the trainer's.
  /// Costs a logsumexp over the step's logits and one more read-back a block.
  bool record_logprobs = false;
};

/// What one Decode produced.
struct DecodeResult {
  /// Per sample: the generated token ids (prompt excluded, EOS excluded),
  /// at most max_new_tokens each.
  std::vector<std::vector<int32_t>> tokens;
  /// Per sample: true when an EOS id ended it.
  std::vector<bool> stopped_at_eos;
  /// Per sample: the decoding trace TraceRL needs (dice::training). Every
  /// token of every block the sample decoded, in order, NOT cut at EOS or
  /// max_new_tokens (the prompt tokens of a first partial block excluded),
  /// and beside it the 0-based denoising step of its block at which it was
  /// revealed. trace_tokens[i].size() == trace_steps[i].size() ==
  /// (blocks decoded) * block_size - (prompt length % block_size);
  /// tokens[i] is a prefix of trace_tokens[i].
  std::vector<std::vector<int32_t>> trace_tokens;
  std::vector<std::vector<int32_t>> trace_steps;
  /// Per sample, with DecodeOptions::record_logprobs (else empty): beside
  /// each trace token, its natural-log probability (float32, <= 0) under the
  /// untempered distribution of the step that revealed it.
  std::vector<std::vector<float>> trace_logprobs;
  /// Denoising steps each block took, in order (the largest over the batch).
  std::vector<int64_t> steps_per_block;
  int64_t denoising_steps = 0;  ///< sum of steps_per_block
  int64_t forward_passes = 0;   ///< prefill + denoising steps + separate commits
  /// Forwards that only committed a block (merge_commit = false: one per
  /// block that another block follows; merge_commit: 0).
  int64_t commit_forwards = 0;
  /// Blocks committed inside the next block's first denoising step
  /// (merge_commit; those forwards count as denoising steps).
  int64_t merged_commits = 0;
  double seconds = 0;           ///< wall time of Decode
  /// Wall time from Decode's start to the end of the prompt's prefill
  /// (setup + the prefill forward; on CUDA the device is synchronised once
  /// there), seconds. seconds - prefill_seconds is the decoding proper,
  /// the time issue 19's tokens/s goals are derived from.
  double prefill_seconds = 0;
  /// The CUDA-graph step forward's attention: "sdpa" or "split-kv"
  /// (SdarStepGraph::split_kv_attention), "" without a captured graph.
  /// With both measured (sdar_step_graph.h), their step times in µs.
  std::string step_attention;
  double sdpa_step_us = 0, split_kv_step_us = 0;
  /// Per-phase times; all zero unless DecodeOptions::profile was set.
  DecodeProfile profile;
};

/// Decodes `prompt` (token ids; at least one, each in [0, vocab_size) and
/// not the mask token) with `model`, `options.num_samples` samples batched.
/// The KV cache holds prompt + max_new_tokens rounded up to whole blocks.
/// Errors (kInvalidArgument, naming the field or token): an empty prompt, a
/// token outside the vocabulary or equal to mask_token_id, an option out of
/// range, prompt + max_new_tokens (rounded up to a block) longer than the
/// context (max_position_embeddings); kInternal when LibTorch fails.
Expected<DecodeResult> Decode(const SdarModel& model, const std::vector<int32_t>& prompt,
                              const DecodeOptions& options);

/// Decode with CUDA graphs and KV cache storage kept across calls in
/// `session` (decode_session.h) when options.cuda_graphs is set: a batch
/// seen before replays the graph captured then (no capture); the cache
/// spans session->CapacityBucket(prompt + new tokens) positions or more
/// (exact: the block-causal mask hides the slots after the block). Tokens
/// are those of Decode with cuda_graphs (the same fixed-shape forward; to
/// floating-point rounding of attention over more masked slots). Without
/// cuda_graphs, or with a null session, this is Decode. Errors: those of
/// Decode and of the session; kInvalidArgument when the session was made
/// for another model.
Expected<DecodeResult> Decode(const SdarModel& model, const std::vector<int32_t>& prompt,
                              const DecodeOptions& options, DecodeSession* session);

}  // namespace dice::generator
