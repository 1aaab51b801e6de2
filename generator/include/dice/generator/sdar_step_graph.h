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
// its arithmetic is tested without a GPU); on CUDA the step forward (with
// LM head) and the commit forward (without) are each warmed up once on a
// side stream, then captured into their own at::cuda::CUDAGraph.
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

/// The fixed-shape step/commit forward of one (batch, block) shape over one
/// KvCache, replayed as CUDA graphs on a GPU (see the header comment).
/// Non-copyable, non-movable; owned through std::unique_ptr.
class SdarStepGraph {
 public:
  /// Makes the fixed-shape step forward for `cache->batch()` rows of one
  /// block (model block_size tokens) at positions cache->length() ..
  /// cache->length() + block_size - 1. On CUDA it warms up and captures
  /// (REQUIRES: no other work is being captured on this device); the
  /// warm-up forwards write scratch keys/values into the slots of the next
  /// block only. Zero-fills the cache slots [length, capacity).
  /// Errors: kInvalidArgument when cache is null, was not made by this model,
  /// or has no room for another block (length + block_size > capacity);
  /// kInternal when LibTorch or the capture fails (message kept).
  static Expected<std::unique_ptr<SdarStepGraph>> Create(const SdarModel& model, KvCache* cache);

  ~SdarStepGraph();
  SdarStepGraph(const SdarStepGraph&) = delete;
  SdarStepGraph& operator=(const SdarStepGraph&) = delete;

  /// One denoising step: scores `ids` (int64 [batch, block_size] on the
  /// model's device) at the current block's positions against the cached
  /// prefix, writes their keys/values as scratch (length unchanged) and
  /// returns float32 logits [batch, block_size, vocab_size]. The returned
  /// tensor is the graph's static output buffer: its contents are valid
  /// until the next Step (the caller may modify it in place). No host/device
  /// synchronisation. Errors: kInvalidArgument for ids of another shape,
  /// dtype or device, kInvalidArgument when the cache was reallocated or
  /// is full; kInternal when LibTorch fails.
  Expected<torch::Tensor> Step(const torch::Tensor& ids);

  /// Commits `ids` (as Step) as the block at the current positions: its
  /// keys/values become part of the prefix (cache length += block_size) and
  /// the positions advance by one block on the device. No logits, no
  /// synchronisation. Errors: as Step.
  Status Commit(const torch::Tensor& ids);

  /// Rows the graph was made for.
  int64_t batch() const { return batch_; }
  /// True when the forwards are captured CUDA graphs (false on a CPU: the
  /// same fixed-shape forward then runs eagerly).
  bool captured() const { return captured_; }

 private:
  struct Graphs;  // the at::cuda::CUDAGraph pair (sdar_step_graph.cc)
  SdarStepGraph(const SdarModel& model, KvCache* cache);
  // The fixed-shape forward over ids_ at positions_: what is captured.
  torch::Tensor Run(bool compute_logits);
  Status CheckCall(const torch::Tensor& ids) const;

  const SdarModel& model_;
  KvCache* cache_;
  int64_t batch_ = 0, block_ = 0;
  const void* storage_ = nullptr;  // cache K of layer 0 when made: detects reallocation
  torch::Tensor ids_;              // int64 [batch, block]: static input
  torch::Tensor positions_;        // int64 [block]: the block's positions, on the device
  torch::Tensor cos_table_, sin_table_;  // [capacity, head_dim], model dtype
  torch::Tensor key_positions_;    // int64 [capacity]: 0 .. capacity-1
  torch::Tensor logits_;           // float32 [batch, block, vocab]: Step's static output
  bool captured_ = false;
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace dice::generator
