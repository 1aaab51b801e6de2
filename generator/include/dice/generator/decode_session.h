// dice/generator/decode_session.h — KV cache storage and captured step
// graphs kept across Decode calls (issue 19 item 5: RL rollouts use the
// fast decoder without a CUDA graph capture per task).
//
// Decode with DecodeOptions::cuda_graphs captures an SdarStepGraph for its
// batch (and again whenever finished samples leave the batch); a capture
// costs a warm-up forward and the capture itself per form. `dice train rl`
// decodes every task of every step at the same batch (group_size) and
// similar prompt lengths, so one decode's graphs fit the next one. A
// DecodeSession keeps them:
//   - Storage: one K/V buffer per layer, [max batch, kv_heads, capacity,
//     head_dim] in the model's dtype on its device, where capacity is the
//     largest CapacityBucket(prompt + new tokens) asked so far (a power of
//     two, capped at the context) and max batch the largest batch. A
//     decode's KvCache views the first `batch` rows (same addresses for every
//     decode), so graphs made on it stay valid. A request that does not fit
//     grows the storage (both sizes to the maximum seen) and drops every
//     graph. Decoding over more cache slots than the prompt needs is exact:
//     the block-causal mask hides the slots after the block (the fixed-shape
//     form attends over the whole capacity anyway).
//   - Graphs: keyed by (batch, capacity, SdarStepGraphOptions, whether the
//     merged form fits at capture); dtype and device are the model's. A
//     second Decode at a batch seen before reuses that graph (Rebind: new
//     positions and zeroed slots, no capture); a new batch (the group size,
//     or a smaller one after samples finished) makes one and keeps it. When
//     samples finish, the kept rows are moved to the front of the storage in
//     place (SelectBatch) instead of into a new allocation.
//   - Weights: a graph reads the weights by address. Updating them in place
//     (optimizer steps, as `dice train rl` does; NamedWeights views share the
//     fused matrices' storage) keeps every graph valid: the next replay reads
//     the new values. Replacing a weight's storage does not: Cache() compares
//     the weights' data pointers with those at the last call and drops every
//     graph when one moved (counted in counters().invalidations).
//
// Ownership and threads: borrows the model (it must outlive the session);
// owns the storage and the graphs. Not thread-safe (one Decode at a time);
// not copyable or movable. Memory: the storage (max batch x capacity x
// layers x 2 x kv_heads x head_dim values) plus each graph's private pool
// (activations of one step at its batch) stay allocated until Clear() or
// destruction.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "dice/core/status.h"
#include "dice/generator/sdar_model.h"
#include "dice/generator/sdar_step_graph.h"

namespace dice::generator {

/// Graph and cache reuse across Decode calls (see the header comment).
class DecodeSession {
 public:
  /// What the session did so far (for logs and tests).
  struct Counters {
    int64_t graphs_made = 0;     ///< SdarStepGraph::Create calls (a CUDA capture each on a GPU)
    int64_t graphs_reused = 0;   ///< Graph() calls answered by a kept graph (Rebind, no capture)
    int64_t invalidations = 0;   ///< times kept graphs were dropped (weights moved or storage grew)
    int64_t storage_allocations = 0;  ///< K/V storage (re)allocations
  };

  /// Borrows `model` (REQUIRES: it outlives the session).
  explicit DecodeSession(const SdarModel& model);
  ~DecodeSession();
  DecodeSession(const DecodeSession&) = delete;
  DecodeSession& operator=(const DecodeSession&) = delete;

  /// The model the session was made for.
  const SdarModel& model() const { return model_; }

  /// The cache capacity used for a decode that needs `positions` positions
  /// (prompt + new tokens in whole blocks): the smallest power of two >=
  /// max(positions, block_size), capped at max_position_embeddings (>=
  /// positions whenever positions fits the context).
  int64_t CapacityBucket(int64_t positions) const;

  /// An empty KvCache (length 0) of `batch` rows viewing the session's
  /// storage, with capacity max(CapacityBucket(positions), the storage's).
  /// First drops every kept graph when a weight's storage moved since the
  /// last call; grows the storage when batch or the bucket exceed it.
  /// Errors: kInvalidArgument for batch < 1 or positions outside [1,
  /// max_position_embeddings]; kInternal when the allocation fails.
  Expected<KvCache> Cache(int64_t batch, int64_t positions);

  /// KvCache::SelectBatch for a cache from Cache(): the rows `index` (int64
  /// [n], increasing, values in [0, batch)) move to the front of the storage
  /// in place, so graphs of batch n made earlier fit the result. Errors:
  /// kInvalidArgument for a null cache, one not viewing this storage, or an
  /// index that is not 1-D, not increasing or outside the batch; kInternal
  /// when LibTorch fails.
  Status SelectBatch(KvCache* cache, const torch::Tensor& index);

  /// The step graph for `cache` (from Cache()) and `forms`: a kept graph of
  /// the same key rebound to the cache (counters().graphs_reused), else a new
  /// SdarStepGraph::Create (graphs_made) that the session keeps. The pointer
  /// stays valid until Clear(), an invalidation or the session's end; use it
  /// only with this cache until the next Graph() call. Errors: those of
  /// SdarStepGraph::Create and Rebind; kInvalidArgument for a cache that does
  /// not view this storage.
  Expected<SdarStepGraph*> Graph(KvCache* cache, const SdarStepGraphOptions& forms);

  const Counters& counters() const { return counters_; }
  /// Graphs kept now.
  int64_t graphs() const { return static_cast<int64_t>(graphs_.size()); }
  /// Drops every graph and the storage (memory back to the allocator).
  void Clear();

 private:
  // batch, capacity, logits_in_graph, commit, merged (captured form)
  using Key = std::tuple<int64_t, int64_t, bool, bool, bool>;
  // Data pointers of the model's weights (NamedWeights order).
  std::vector<const void*> WeightAddresses() const;
  bool Views(const KvCache& cache) const;

  const SdarModel& model_;
  std::vector<const void*> weights_;  // WeightAddresses() at the last Cache()
  std::vector<torch::Tensor> k_, v_;  // per layer [max_batch_, kv_heads, capacity_, head_dim]
  int64_t max_batch_ = 0, capacity_ = 0;
  std::map<Key, std::unique_ptr<SdarStepGraph>> graphs_;
  Counters counters_;
};

}  // namespace dice::generator
