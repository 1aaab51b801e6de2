// Fixed-shape step forward, captured as CUDA graphs: see
// dice/generator/sdar_step_graph.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/generator/sdar_step_graph.h"

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>

#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "dice/generator/sdar_fused_kernels.h"
#include "dice/generator/sdar_served_groups.h"

namespace dice::generator {

struct SdarStepGraph::Graphs {
  // Null: that form was not captured (it runs eagerly).
  std::unique_ptr<at::cuda::CUDAGraph> step, commit, merged;
};

namespace {

Status Internal(const std::string& what, const c10::Error& e) {
  return Status(StatusCode::kInternal, "SdarStepGraph: " + what + ": " + e.what_without_backtrace());
}

}  // namespace

bool PreferSplitKv(double sdpa_us, double split_kv_us) {
  return sdpa_us > 0 && split_kv_us > 0 && split_kv_us < 0.98 * sdpa_us;
}

SdarStepGraph::SdarStepGraph(const SdarModel& model, KvCache* cache) : model_(model), cache_(cache) {}

SdarStepGraph::~SdarStepGraph() = default;

Expected<std::unique_ptr<SdarStepGraph>> SdarStepGraph::Create(const SdarModel& model, KvCache* cache,
                                                               const SdarStepGraphOptions& options) {
  const SdarConfig& c = model.config();
  if (cache == nullptr) return Status(StatusCode::kInvalidArgument, "SdarStepGraph: no KV cache");
  if (static_cast<int64_t>(cache->k_.size()) != c.num_hidden_layers || cache->k_.empty()) {
    return Status(StatusCode::kInvalidArgument, "SdarStepGraph: KV cache was not made by this model (NewCache)");
  }
  if (cache->length_ + c.block_size > cache->capacity_) {
    return Status(StatusCode::kInvalidArgument, "SdarStepGraph: KV cache of " + std::to_string(cache->capacity_) +
                                                    " positions holds " + std::to_string(cache->length_) +
                                                    ": no room for another block of " +
                                                    std::to_string(c.block_size));
  }
  std::unique_ptr<SdarStepGraph> g(new SdarStepGraph(model, cache));
  g->batch_ = cache->batch_;
  g->block_ = c.block_size;
  g->logits_in_graph_ = options.logits_in_graph;
  const auto device = model.options().device;
  try {
    torch::NoGradGuard no_grad;
    const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(device);
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
    const int64_t capacity = cache->capacity_, start = cache->length_;
    // Slots after the prefix may hold uninitialised memory; the mask hides
    // them, but 0 x NaN in the attention product would not.
    for (auto* list : {&cache->k_, &cache->v_}) {
      for (auto& t : *list) t.narrow(2, start, capacity - start).zero_();
    }
    g->storage_ = cache->k_[0].data_ptr();
    g->ids_ = torch::full({g->batch_, g->block_}, c.mask_token_id, i64);
    g->merged_ids_ = torch::full({g->batch_, 2 * g->block_}, c.mask_token_id, i64);
    g->positions_ = torch::arange(start, start + g->block_, i64);
    g->key_positions_ = torch::arange(0, capacity, i64);
    // The eager forward's angles: float32 position x inv_freq, duplicated,
    // cos/sin, cast to the compute dtype.
    auto angles = torch::outer(torch::arange(0, capacity, f32), model.inv_freq_);
    angles = torch::cat({angles, angles}, -1);
    g->cos_table_ = angles.cos().to(model.options().dtype);
    g->sin_table_ = angles.sin().to(model.options().dtype);
    if (!device.is_cuda()) return g;
    // Served fusion groups (sdar_served_groups.h): looked up, or tuned as
    // DICE_MODE allows, at the step's and the merged form's rows before
    // anything is captured (a group not served keeps the hand-written kernel).
    if (model.served_ != nullptr) {
      for (int64_t r : {g->batch_ * g->block_, 2 * g->batch_ * g->block_}) {
        Status st = model.served_->Prepare(r);
        if (!st.ok()) std::fprintf(stderr, "dice sdar: %s\n", st.ToString().c_str());
      }
    }

    const bool merged = options.merged_step && start + 2 * g->block_ <= capacity;
    // Warm up on a side stream (cuBLAS/cuDNN handles and workspaces are made
    // per stream and may not be created during capture), then capture there.
    // "cuda" without an index means the current device.
    const c10::DeviceIndex index = device.has_index() ? device.index() : c10::cuda::current_device();
    torch::cuda::synchronize(index);
    c10::cuda::CUDAGuard device_guard(index);
    auto stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
    {
      c10::cuda::CUDAStreamGuard stream_guard(stream);
      auto step = [&] {
        auto h = g->Run(Form::kStep);
        return g->logits_in_graph_ ? model.LmHead(h) : h;
      };
      g->split_kv_ = model.fused_ != nullptr && model.fused_->shape().split_kv_attention;
      step();
      if (options.commit) g->Run(Form::kCommit);
      if (merged) g->Run(Form::kMerged);
      stream.synchronize();
      if (model.fused_ != nullptr && model.fused_->shape().split_kv_auto && g->batch_ <= kSplitKvMeasureMaxBatch) {
        // One step forward captured with each attention form, replayed
        // 10 times after one warm replay (the replays write scratch K/V
        // into the next block's slots only, as the warm-up did).
        auto time_step = [&](bool split_kv) {
          g->split_kv_ = split_kv;
          step();  // eager first: anything made lazily is made outside the capture
          stream.synchronize();
          at::cuda::CUDAGraph probe;
          probe.capture_begin();
          step();
          probe.capture_end();
          probe.replay();
          at::cuda::CUDAEvent begin(cudaEventDefault), end(cudaEventDefault);
          constexpr int kReps = 10;
          begin.record(stream);
          for (int i = 0; i < kReps; ++i) probe.replay();
          end.record(stream);
          end.synchronize();
          return 1000.0 * begin.elapsed_time(end) / kReps;
        };
        g->sdpa_us_ = time_step(false);
        g->split_kv_us_ = time_step(true);
        g->split_kv_ = PreferSplitKv(g->sdpa_us_, g->split_kv_us_);
        if (g->split_kv_) {  // the other forms once eagerly in the kept form, as above
          if (options.commit) g->Run(Form::kCommit);
          if (merged) g->Run(Form::kMerged);
        }
        stream.synchronize();
      }
      g->graphs_ = std::make_unique<Graphs>();
      g->graphs_->step = std::make_unique<at::cuda::CUDAGraph>();
      g->graphs_->step->capture_begin();
      (g->logits_in_graph_ ? g->logits_ : g->hidden_) = step();
      g->graphs_->step->capture_end();
      if (options.commit) {
        g->graphs_->commit = std::make_unique<at::cuda::CUDAGraph>();
        g->graphs_->commit->capture_begin();
        g->Run(Form::kCommit);
        g->graphs_->commit->capture_end();
      }
      if (merged) {
        g->graphs_->merged = std::make_unique<at::cuda::CUDAGraph>();
        g->graphs_->merged->capture_begin();
        g->merged_hidden_ = g->Run(Form::kMerged);
        g->graphs_->merged->capture_end();
      }
      stream.synchronize();
    }
    g->captured_ = true;
  } catch (const c10::Error& e) {
    return Internal("capture", e);
  }
  return g;
}

bool SdarStepGraph::merged_captured() const { return captured_ && graphs_ && graphs_->merged; }

Status SdarStepGraph::Rebind(KvCache* cache) {
  if (cache == nullptr) return Status(StatusCode::kInvalidArgument, "SdarStepGraph::Rebind: no KV cache");
  if (cache->k_.empty() || cache->k_[0].data_ptr() != storage_ || cache->batch_ != batch_ ||
      cache->capacity_ != capacity()) {
    return Status(StatusCode::kInvalidArgument, "SdarStepGraph::Rebind: the KV cache is not the storage, batch (" +
                                                    std::to_string(batch_) + ") and capacity (" +
                                                    std::to_string(capacity()) + ") the graph was made on");
  }
  if (cache->length_ + block_ > cache->capacity_) {
    return Status(StatusCode::kInvalidArgument, "SdarStepGraph::Rebind: no room for another block");
  }
  try {
    torch::NoGradGuard no_grad;
    const int64_t start = cache->length_;
    for (auto* list : {&cache->k_, &cache->v_}) {
      for (auto& t : *list) t.narrow(2, start, cache->capacity_ - start).zero_();
    }
    positions_.copy_(torch::arange(start, start + block_, torch::kLong));
  } catch (const c10::Error& e) {
    return Internal("rebind", e);
  }
  cache_ = cache;
  return Status::Ok();
}

torch::Tensor SdarStepGraph::Run(Form form) {
  const SdarConfig& c = model_.config();
  const bool merged = form == Form::kMerged;
  const torch::Tensor& ids = merged ? merged_ids_ : ids_;
  // kMerged: the finished block at positions_, the next one after it.
  const torch::Tensor positions = merged ? torch::cat({positions_, positions_ + block_}) : positions_;
  const int64_t len = ids.size(1);
  auto x = model_.embed_.index_select(0, ids.reshape({-1})).view({batch_, len, c.hidden_size});
  auto cos = cos_table_.index_select(0, positions), sin = sin_table_.index_select(0, positions);
  std::optional<torch::Tensor> mask = BlockCausalMask(positions, key_positions_, c.block_size);
  x = model_.RunLayers(x, cos, sin, mask, cache_, /*start=*/0, /*slots=*/positions, cache_->capacity_, split_kv_);
  if (form == Form::kCommit) return torch::Tensor();
  return merged ? x.narrow(1, block_, block_) : x;
}

Status SdarStepGraph::CheckCall(const torch::Tensor& ids, const torch::Tensor& rows, int64_t blocks) const {
  if (!ids.defined() || ids.dim() != 2 || ids.size(0) != batch_ || ids.size(1) != block_ ||
      ids.scalar_type() != torch::kLong || ids.device() != ids_.device()) {
    return Status(StatusCode::kInvalidArgument, "SdarStepGraph: ids must be int64 [" + std::to_string(batch_) +
                                                    ", " + std::to_string(block_) + "] on " +
                                                    ids_.device().str());
  }
  if (rows.defined() && (rows.dim() != 2 || rows.size(0) != batch_ || rows.size(1) < 1 ||
                         rows.size(1) > block_ || rows.scalar_type() != torch::kLong ||
                         rows.device() != ids_.device())) {
    return Status(StatusCode::kInvalidArgument, "SdarStepGraph: rows must be int64 [" + std::to_string(batch_) +
                                                    ", m] with 1 <= m <= " + std::to_string(block_) + " on " +
                                                    ids_.device().str());
  }
  if (cache_->batch_ != batch_ || cache_->k_.empty() || cache_->k_[0].data_ptr() != storage_) {
    return Status(StatusCode::kInvalidArgument,
                  "SdarStepGraph: the KV cache was reallocated (SelectBatch?) since the graph was made");
  }
  if (cache_->length_ + blocks * block_ > cache_->capacity_) {
    return Status(StatusCode::kInvalidArgument, "SdarStepGraph: the KV cache is full");
  }
  return Status::Ok();
}

Expected<torch::Tensor> SdarStepGraph::Step(const torch::Tensor& ids, const torch::Tensor& rows) {
  DICE_RETURN_IF_ERROR(CheckCall(ids, rows, /*blocks=*/1));
  try {
    torch::NoGradGuard no_grad;
    ids_.copy_(ids);
    if (captured_ && logits_in_graph_) {
      graphs_->step->replay();
      if (!rows.defined()) return logits_;
      return logits_.gather(1, rows.unsqueeze(-1).expand({batch_, rows.size(1), logits_.size(-1)}));
    }
    torch::Tensor hidden;
    if (captured_) {
      graphs_->step->replay();
      hidden = hidden_;
    } else {
      hidden = Run(Form::kStep);
    }
    return model_.LmHead(hidden, rows);
  } catch (const c10::Error& e) {
    return Internal("step", e);
  }
}

Status SdarStepGraph::Commit(const torch::Tensor& ids) {
  DICE_RETURN_IF_ERROR(CheckCall(ids, torch::Tensor(), /*blocks=*/1));
  try {
    torch::NoGradGuard no_grad;
    ids_.copy_(ids);
    if (captured_ && graphs_->commit) {
      graphs_->commit->replay();
    } else {
      Run(Form::kCommit);
    }
    positions_.add_(block_);
    cache_->length_ += block_;
  } catch (const c10::Error& e) {
    return Internal("commit", e);
  }
  return Status::Ok();
}

Expected<torch::Tensor> SdarStepGraph::MergedStep(const torch::Tensor& committed, const torch::Tensor& ids,
                                                  const torch::Tensor& rows) {
  DICE_RETURN_IF_ERROR(CheckCall(committed, torch::Tensor(), /*blocks=*/2));
  DICE_RETURN_IF_ERROR(CheckCall(ids, rows, /*blocks=*/2));
  try {
    torch::NoGradGuard no_grad;
    merged_ids_.narrow(1, 0, block_).copy_(committed);
    merged_ids_.narrow(1, block_, block_).copy_(ids);
    torch::Tensor hidden;
    if (captured_ && graphs_->merged) {
      graphs_->merged->replay();
      hidden = merged_hidden_;
    } else {
      hidden = Run(Form::kMerged);
    }
    positions_.add_(block_);
    cache_->length_ += block_;
    return model_.LmHead(hidden, rows);
  } catch (const c10::Error& e) {
    return Internal("merged step", e);
  }
}

}  // namespace dice::generator
