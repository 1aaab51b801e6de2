// dice/generator/sdar_step_graph.h — the per-step block forward of block
// diffusion decoding in a fixed shape, captured once as a CUDA graph and
// replayed every denoising step and commit (issue 3: "CUDA graphs for the
// per-step forward if they pay").
//
// Why: a denoising step of SDAR scores one block of block_size tokens
// against the cached prefix. At batch 1 that is ~40 small kernels a layer
// (36 layers for SDAR-4B), and launching them from the host costs far more
// than the GPU needs to read the weights (H200, 4B, bf16: ~28 ms of host
// launch work against a ~2 ms memory roofline). A CUDA graph launches the
// whole forward with one host call.
//
// Why a different (but equivalent) form of the forward: a graph replays
// fixed addresses and shapes, while the eager forward (SdarModel::Forward)
// attends to cache positions [0, length + block) — a shape that grows every
// block — and writes the block's keys/values at a host-known offset. Here:
//   - the block's positions live in a device buffer `positions` (int64
//     [block_size], advanced on the device after each commit, never read
//     back);
//   - the new keys/values are written with index_copy_ at those positions;
//   - attention reads the whole preallocated cache [0, capacity) under
//     SDAR's block-causal mask BlockCausalMask(positions, 0..capacity-1),
//     which hides every slot after the block (slots not yet written are
//     zero-filled when the graph is made, so the masked-out values are
//     finite);
//   - RoPE cos/sin come from a table over [0, capacity) indexed by
//     `positions` (the same float32 angle products as the eager path);
//   - with grouped-query attention the g query heads of each KV head are
//     folded into the query length ([B, kv_heads, g*L, head_dim]) so the
//     masked SDPA kernels run without GQA support and never copy the KV
//     cache g times (exact: query rows are independent).
// Mathematically this is the eager forward; on a GPU the attention kernel
// differs (masked vs unmasked SDPA), so logits agree to rounding (tested
// within 1e-4 in float32), not bit for bit.
//
// On a CPU the same fixed-shape forward runs eagerly without capture (so
// its arithmetic is tested without a GPU); on CUDA each form that
// SdarStepGraphOptions asks for is warmed up once on a side stream, then
// captured into its own at::cuda::CUDAGraph. The forms:
//   - step: one block at `positions`, keys/values as scratch; with its LM
//     head over the whole block (logits_in_graph) or ending at the final
//     hidden states, the LM head then running after the replay on the rows
//     the caller asks for (the still-masked ones: issue 19 item 3);
//   - commit: the block's keys/values become the prefix, no LM head;
//   - merged step: [finished block ; next block] at `positions` and the
//     block after, in one forward of 2 x block_size rows: the finished
//     block is committed and the next block scored (its first denoising
//     step). Under the block-causal mask the finished block's rows attend
//     to the same keys as in a separate commit, so the cache holds the same
//     keys/values and the next block the same logits (to rounding); a block
//     then costs its denoising steps only (issue 19 item 3: 4 forwards a
//     block instead of 5 at 4 steps).
// A form that was not captured still works: it runs the same fixed-shape
// code eagerly (correct; launched op by op).
//
// Ownership and threads: an SdarStepGraph borrows the model and the KvCache
// it was made for; both must outlive it. The cache's storage must not be
// reallocated while the graph lives (KvCache::SelectBatch does reallocate:
// make a new graph for the new batch; Step/Commit detect the change and
// refuse). Not thread-safe; not copyable or movable (graphs hold addresses).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "dice/generator/sdar_model.h"
#include "dice/core/status.h"

namespace dice::generator {

/// Which forms SdarStepGraph::Create captures as CUDA graphs (ignored on a
/// CPU, where nothing is captured). A form not captured runs eagerly.
/// The defaults are the decoder's separate-commit path (before issue 19).
struct SdarStepGraphOptions {
  /// The step graph ends with the LM head over the whole block (Step
  /// without `rows` returns its static output). false: it ends at the final
  /// hidden states and the LM head runs after each replay on the rows asked
  /// for (DecodeOptions::masked_logits_only).
  bool logits_in_graph = true;
  /// Capture Commit's forward (DecodeOptions::merge_commit == false).
  bool commit = true;
  /// Capture MergedStep's forward (DecodeOptions::merge_commit); skipped
  /// when the cache has no room for two more blocks (it could never run).
  bool merged_step = false;
};

/// Graphs of at most this many rows measure their attention forms (SDPA vs
/// the split-KV kernels) when DICE_SDAR_SPLIT_KV=2: on the H200
/// (session 14) split-KV decoded +12% faster at batch 1 and 0.38x as fast at
/// batch 16, so larger batches keep SDPA without the measurement's cost.
constexpr int64_t kSplitKvMeasureMaxBatch = 8;

/// Whether the step graph keeps the split-KV attention, given one step
/// forward's replay time with SDPA and with split-KV (µs, > 0): only when
/// it is at least 2% faster, so timing noise keeps the default (SDPA).
bool PreferSplitKv(double sdpa_us, double split_kv_us);

/// The fixed-shape step/commit forward of one (batch, block) shape over one
/// KvCache, replayed as CUDA graphs on a GPU (see the header comment).
///
/// Attention form: with the fused kernels on and DICE_SDAR_SPLIT_KV=2,
/// Create captures the step forward twice (SDPA and the split-KV kernels,
/// sdar_fused_kernels.h DecodeAttention) for batches up to
/// kSplitKvMeasureMaxBatch, times 10 replays of each (CUDA events) and
/// captures every form with the faster (PreferSplitKv); both give the same
/// logits to rounding (SdarGpuTest). DICE_SDAR_SPLIT_KV=1 forces split-KV;
/// unset or 0: SDPA, nothing measured (the measurement becomes the default
/// once its GPU test has run).
/// Non-copyable, non-movable; owned through std::unique_ptr.
class SdarStepGraph {
 public:
  /// Makes the fixed-shape step forward for `cache->batch()` rows of one
  /// block (model block_size tokens) at positions cache->length() ..
  /// cache->length() + block_size - 1. On CUDA it warms up and captures the
  /// forms `options` names (REQUIRES: no other work is being captured on
  /// this device); the warm-up forwards write scratch keys/values into the
  /// slots of the next one or two blocks only. Zero-fills the cache slots
  /// [length, capacity).
  /// Errors: kInvalidArgument when cache is null, was not made by this model,
  /// or has no room for another block (length + block_size > capacity);
  /// kInternal when LibTorch or the capture fails (message kept).
  static Expected<std::unique_ptr<SdarStepGraph>> Create(const SdarModel& model, KvCache* cache,
                                                         const SdarStepGraphOptions& options = {});

  ~SdarStepGraph();
  SdarStepGraph(const SdarStepGraph&) = delete;
  SdarStepGraph& operator=(const SdarStepGraph&) = delete;

  /// One denoising step: scores `ids` (int64 [batch, block_size] on the
  /// model's device) at the current block's positions against the cached
  /// prefix, writes their keys/values as scratch (length unchanged) and
  /// returns float32 logits [batch, block_size, vocab_size], or with `rows`
  /// (int64 [batch, m] on the device, values in [0, block_size)) only those
  /// rows' logits [batch, m, vocab_size] (row j = block position
  /// rows[b][j]). Without `rows` and with logits_in_graph the returned
  /// tensor is the graph's static output buffer: its contents are valid
  /// until the next Step (the caller may modify it in place). No host/device
  /// synchronisation. Errors: kInvalidArgument for ids or rows of another
  /// shape, dtype or device, kInvalidArgument when the cache was
  /// reallocated or is full; kInternal when LibTorch fails.
  Expected<torch::Tensor> Step(const torch::Tensor& ids, const torch::Tensor& rows = {});

  /// Commits `ids` (as Step) as the block at the current positions: its
  /// keys/values become part of the prefix (cache length += block_size) and
  /// the positions advance by one block on the device. No logits, no
  /// synchronisation. Errors: as Step.
  Status Commit(const torch::Tensor& ids);

  /// Commit(committed) and Step(ids, rows) of the block after it in one
  /// forward over 2 x block_size tokens (see the header comment): the
  /// cache length grows by block_size, the positions advance by one block,
  /// and the result is Step's for `ids` (logits at `rows` of the new block,
  /// or all of its rows; a fresh tensor). Errors: as Step, and
  /// kInvalidArgument when the cache has no room for the two blocks.
  Expected<torch::Tensor> MergedStep(const torch::Tensor& committed, const torch::Tensor& ids,
                                     const torch::Tensor& rows = {});

  /// Points the graph at `cache` for a new decode (DecodeSession keeps
  /// graphs across Decode calls): `cache` must view the same storage the
  /// graph was made on (the same K/V tensors' memory, batch and capacity;
  /// its committed length may differ, e.g. another prompt's prefill). The
  /// block positions restart at cache->length() (a device copy) and the
  /// slots [length, capacity) are zero-filled, as in Create; nothing is
  /// captured again. Errors: kInvalidArgument when cache is null, views
  /// other storage, another batch or capacity, or has no room for a block;
  /// kInternal when LibTorch fails.
  Status Rebind(KvCache* cache);

  /// Rows the graph was made for.
  int64_t batch() const { return batch_; }
  /// Cache positions the graph attends over (the KvCache capacity).
  int64_t capacity() const { return key_positions_.defined() ? key_positions_.size(0) : 0; }
  /// True when MergedStep replays a captured graph (false: it runs eagerly,
  /// e.g. on a CPU or when the cache had no room for two blocks at Create).
  bool merged_captured() const;
  /// True when the forwards are captured CUDA graphs (false on a CPU: the
  /// same fixed-shape forward then runs eagerly).
  bool captured() const { return captured_; }
  /// True when the captured forms attend with the split-KV kernels (the
  /// measured choice, or DICE_SDAR_SPLIT_KV=1); false: SDPA.
  bool split_kv_attention() const { return split_kv_; }
  /// One step forward's replay time with each form when Create measured
  /// them (µs); 0 when it did not.
  double sdpa_step_us() const { return sdpa_us_; }
  double split_kv_step_us() const { return split_kv_us_; }

 private:
  struct Graphs;  // the captured at::cuda::CUDAGraphs (sdar_step_graph.cc)
  enum class Form { kStep, kCommit, kMerged };
  SdarStepGraph(const SdarModel& model, KvCache* cache);
  // The fixed-shape forward of `form` (what is captured): kStep over ids_ at
  // positions_, kCommit the same without output, kMerged over merged_ids_
  // at positions_ and the block after. Returns the final hidden states
  // [batch, block, hidden] of the block being scored (kMerged: the second),
  // undefined for kCommit.
  torch::Tensor Run(Form form);
  // Checks ids (and rows when defined) and that `blocks` more blocks fit.
  Status CheckCall(const torch::Tensor& ids, const torch::Tensor& rows, int64_t blocks) const;

  const SdarModel& model_;
  KvCache* cache_;
  int64_t batch_ = 0, block_ = 0;
  const void* storage_ = nullptr;  // cache K of layer 0 when made: detects reallocation
  torch::Tensor ids_;              // int64 [batch, block]: static input
  torch::Tensor merged_ids_;       // int64 [batch, 2 * block]: MergedStep's static input
  torch::Tensor positions_;        // int64 [block]: the block's positions, on the device
  torch::Tensor cos_table_, sin_table_;  // [capacity, head_dim], model dtype
  torch::Tensor key_positions_;    // int64 [capacity]: 0 .. capacity-1
  torch::Tensor logits_;           // float32 [batch, block, vocab]: the step graph's output (logits_in_graph)
  torch::Tensor hidden_;           // [batch, block, hidden]: the step graph's output (otherwise)
  torch::Tensor merged_hidden_;    // [batch, block, hidden]: the merged graph's output
  bool captured_ = false;
  bool split_kv_ = false;          // Run's attention form (see split_kv_attention())
  double sdpa_us_ = 0, split_kv_us_ = 0;
  bool logits_in_graph_ = true;    // SdarStepGraphOptions::logits_in_graph
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace dice::generator
