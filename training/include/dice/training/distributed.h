// dice/training/distributed.h — data parallelism for `dice train sft|rl`
// over torch.distributed's C++ c10d (issue 4 "Scale").
//
// The same command runs as 1 process or as N processes launched the way
// torchrun launches them: each process reads RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR and MASTER_PORT from its environment. Rank 0 hosts a
// c10d::TCPStore at MASTER_ADDR:MASTER_PORT; the others connect to it
// (rendezvous, bounded by a timeout). Collectives run over that store in a
// fixed rank order, so every rank computes bit-identical results (the
// all-reduced gradients, hence the parameters after the optimiser step, are
// equal on all ranks). CUDA ranks switch gradients and weights to
// c10d::ProcessGroupNCCL (UseNccl) where the build has nccl.h. On the CPU the
// store path is used: the LibTorch wheel ships ProcessGroupGloo.hpp without
// the gloo headers it includes, so ProcessGroupGloo cannot be built against.
//
// A rank that fails calls Abort(reason): the others' next collective fails
// at once with that reason. A rank that dies without a word is reported when
// a collective times out (collective_timeout), naming the missing ranks.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dice/core/status.h"

namespace dice::training {

/// Where this process sits in a data-parallel run, from the torchrun
/// environment variables.
struct DistributedEnv {
  int rank = 0;              ///< RANK (0 when WORLD_SIZE is unset)
  int world_size = 1;        ///< WORLD_SIZE (1 when unset)
  int local_rank = 0;        ///< LOCAL_RANK (default: RANK); picks cuda:LOCAL_RANK
  std::string master_addr;   ///< MASTER_ADDR (required when WORLD_SIZE > 1)
  int master_port = 29500;   ///< MASTER_PORT (torchrun's default 29500 when unset)
};

/// Reads the torchrun variables. WORLD_SIZE unset or 1 = a single process.
/// Errors (kInvalidArgument, naming the variable): a value that is not an
/// integer; WORLD_SIZE < 1; WORLD_SIZE > 1 without MASTER_ADDR; RANK missing
/// or outside [0, WORLD_SIZE); MASTER_PORT outside 1..65535.
Expected<DistributedEnv> ReadDistributedEnv();

/// The contiguous slice [begin, end) of `count` items that `rank` of
/// `world_size` takes: count / world_size items each, the first
/// count % world_size ranks one more. Ranks' slices are disjoint and cover
/// all items in order.
std::pair<int64_t, int64_t> ShardRange(int64_t count, int rank, int world_size);

/// FNV-1a (64-bit) over the bytes of `tensors` (moved to the CPU, made
/// contiguous) in order, as 16 hex digits: equal digests mean bit-identical
/// values (up to hash collisions). Used to show that all ranks end with the
/// same parameters.
std::string ParameterDigest(const std::vector<torch::Tensor>& tensors);

/// A data-parallel group: one per training run and process.
class DataParallel {
 public:
  /// Joins the group the environment describes (ReadDistributedEnv). With
  /// world size 1 nothing is opened and every collective is the identity.
  /// Otherwise rank 0 starts the TCPStore server and waits for all ranks;
  /// the others connect. Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True)
  /// the elastic agent already hosts that store, so every rank connects. `rendezvous_timeout` bounds that wait;
  /// `collective_timeout` bounds each collective's wait for the other ranks.
  /// Errors: those of ReadDistributedEnv; kTimeout when the rendezvous does
  /// not complete in time (the message names MASTER_ADDR:MASTER_PORT, the
  /// rank and the timeout); kIoError when the store cannot be started.
  static Expected<std::unique_ptr<DataParallel>> Join(std::chrono::seconds rendezvous_timeout,
                                                      std::chrono::seconds collective_timeout);
  /// Shuts NCCL down (or aborts it after Abort) and, on rank 0 when Finish
  /// was not called, waits (bounded) for the other ranks to finish first.
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  /// This process's rank, 0..world_size()-1 (RANK).
  int rank() const { return env_.rank; }
  /// Number of processes in the run (WORLD_SIZE; 1 = not distributed).
  int world_size() const { return env_.world_size; }
  /// Rank within this host (LOCAL_RANK): the CUDA ordinal a rank uses.
  int local_rank() const { return env_.local_rank; }
  /// Rank 0: the one that writes checkpoints, the CSV log and progress lines.
  bool is_root() const { return env_.rank == 0; }

  /// CUDA ranks: creates a c10d::ProcessGroupNCCL over the store (timeout =
  /// the collective timeout) for AllReduceMeanGradients and Broadcast on
  /// `device` (this rank's GPU; the same call on every rank). Returns false,
  /// leaving the store path in use, for world size 1, a CPU device or a
  /// build without nccl.h. Throws what c10d throws when NCCL cannot start.
  /// Untested on GPUs so far (no device time in the session that wrote it).
  bool UseNccl(const torch::Device& device);

  /// Replaces each parameter's gradient by the mean of that gradient over
  /// all ranks (all-reduce, sum in rank order, then / world size), so an
  /// optimiser step afterwards leaves the parameters equal on every rank.
  /// `params`: float tensors on any device, same order and shapes on all
  /// ranks; an undefined gradient counts as zeros (and is defined after).
  /// Errors: kCrashed when another rank aborted (its reason) or the store
  /// (rank 0) is gone; kTimeout when a rank did not take part within the
  /// collective timeout (naming the missing ranks: died or stuck);
  /// kInvalidArgument when the ranks' gradient sizes differ.
  Status AllReduceMeanGradients(const std::vector<torch::Tensor>& params);

  /// Element-wise sum of `values` over all ranks (same length on each), in
  /// rank order: every rank gets the same doubles. Errors: as above.
  Expected<std::vector<double>> AllReduceSum(const std::vector<double>& values);

  /// Copies rank 0's values into `tensors` on every rank (same order, shapes
  /// and dtypes on all ranks; any device). Errors: as above.
  Status Broadcast(const std::vector<torch::Tensor>& tensors);

  /// Tells the other ranks that this one stops, with `reason` (their next
  /// collective fails with it). Best effort; no-op for world size 1.
  void Abort(const std::string& reason);

  /// Waits (bounded by the collective timeout) until every rank has called
  /// Finish, so that rank 0, which hosts the store, exits last.
  /// Errors: kTimeout / kCrashed as for the collectives.
  Status Finish();

 private:
  struct Impl;
  explicit DataParallel(DistributedEnv env);
  Status Exchange(const std::vector<uint8_t>& mine, bool from_root_only, std::vector<std::vector<uint8_t>>* all);
  DistributedEnv env_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dice::training
