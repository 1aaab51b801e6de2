// Graph and cache reuse across Decode calls: see
// dice/generator/decode_session.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/generator/decode_session.h"

#include <algorithm>
#include <string>
#include <utility>

namespace dice::generator {

namespace {

Status Invalid(const std::string& m) { return Status(StatusCode::kInvalidArgument, "DecodeSession: " + m); }

}  // namespace

DecodeSession::DecodeSession(const SdarModel& model) : model_(model) {}

DecodeSession::~DecodeSession() { graphs_.clear(); }  // graphs first: they point at the storage

int64_t DecodeSession::CapacityBucket(int64_t positions) const {
  const SdarConfig& c = model_.config();
  int64_t bucket = 1;
  while (bucket < std::max(positions, c.block_size)) bucket *= 2;
  return std::min(bucket, c.max_position_embeddings);
}

std::vector<const void*> DecodeSession::WeightAddresses() const {
  std::vector<const void*> out;
  for (const auto& [name, t] : model_.NamedWeights()) out.push_back(t.data_ptr());
  return out;
}

bool DecodeSession::Views(const KvCache& cache) const {
  return !k_.empty() && cache.k_.size() == k_.size() && cache.k_[0].data_ptr() == k_[0].data_ptr() &&
         cache.capacity_ == capacity_ && cache.batch_ <= max_batch_;
}

void DecodeSession::Clear() {
  graphs_.clear();
  k_.clear();
  v_.clear();
  max_batch_ = capacity_ = 0;
}

Expected<KvCache> DecodeSession::Cache(int64_t batch, int64_t positions) {
  const SdarConfig& c = model_.config();
  if (batch < 1) return Invalid("batch must be >= 1, got " + std::to_string(batch));
  if (positions < 1 || positions > c.max_position_embeddings) {
    return Invalid("positions must be in [1, " + std::to_string(c.max_position_embeddings) + "], got " +
                   std::to_string(positions));
  }
  std::vector<const void*> weights = WeightAddresses();
  if (weights != weights_) {
    if (!graphs_.empty()) ++counters_.invalidations;
    graphs_.clear();
    weights_ = std::move(weights);
  }
  const int64_t bucket = CapacityBucket(positions);
  if (batch > max_batch_ || bucket > capacity_) {
    if (!graphs_.empty()) ++counters_.invalidations;
    graphs_.clear();
    const int64_t new_batch = std::max(batch, max_batch_), new_capacity = std::max(bucket, capacity_);
    k_.clear();  // the old storage first: the new one may need its memory
    v_.clear();
    auto fresh = model_.NewCache(new_batch, new_capacity);
    if (!fresh.ok()) {
      max_batch_ = capacity_ = 0;
      return fresh.status();
    }
    k_ = std::move(fresh->k_);
    v_ = std::move(fresh->v_);
    max_batch_ = new_batch;
    capacity_ = new_capacity;
    ++counters_.storage_allocations;
  }
  KvCache cache;
  cache.batch_ = batch;
  cache.capacity_ = capacity_;
  for (size_t l = 0; l < k_.size(); ++l) {
    cache.k_.push_back(k_[l].narrow(0, 0, batch));  // contiguous: the first rows of the storage
    cache.v_.push_back(v_[l].narrow(0, 0, batch));
  }
  return cache;
}

Status DecodeSession::SelectBatch(KvCache* cache, const torch::Tensor& index) {
  if (cache == nullptr || !Views(*cache)) return Invalid("SelectBatch: the cache does not view this session's storage");
  if (index.dim() != 1) return Invalid("SelectBatch: index must be 1-D");
  const int64_t n = index.numel();
  try {
    torch::NoGradGuard no_grad;
    const auto host = index.to(torch::kCPU, torch::kLong).contiguous();
    const int64_t* idx = host.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      if (idx[i] < 0 || idx[i] >= cache->batch_ || (i > 0 && idx[i] <= idx[i - 1])) {
        return Invalid("SelectBatch: index must increase within [0, " + std::to_string(cache->batch_) + "), got " +
                       std::to_string(idx[i]) + " at " + std::to_string(i));
      }
    }
    const auto device_index = host.to(k_[0].device());
    for (auto [list, storage] : {std::make_pair(&cache->k_, &k_), std::make_pair(&cache->v_, &v_)}) {
      for (size_t l = 0; l < list->size(); ++l) {
        auto kept = (*list)[l].index_select(0, device_index);  // a copy: rows may move onto each other
        auto front = (*storage)[l].narrow(0, 0, n);
        front.copy_(kept);
        (*list)[l] = front;
      }
    }
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, std::string("DecodeSession::SelectBatch: ") + e.what_without_backtrace());
  }
  cache->batch_ = n;
  return Status::Ok();
}

Expected<SdarStepGraph*> DecodeSession::Graph(KvCache* cache, const SdarStepGraphOptions& forms) {
  if (cache == nullptr || !Views(*cache)) return Invalid("Graph: the cache does not view this session's storage");
  const int64_t block = model_.config().block_size;
  const bool merged = forms.merged_step && cache->length_ + 2 * block <= cache->capacity_;
  const Key key{cache->batch_, cache->capacity_, forms.logits_in_graph, forms.commit, merged};
  auto it = graphs_.find(key);
  if (it != graphs_.end()) {
    DICE_RETURN_IF_ERROR(it->second->Rebind(cache));
    ++counters_.graphs_reused;
    return it->second.get();
  }
  auto made = SdarStepGraph::Create(model_, cache, forms);
  if (!made.ok()) return made.status();
  ++counters_.graphs_made;
  SdarStepGraph* g = made->get();
  graphs_[key] = std::move(*made);
  return g;
}

}  // namespace dice::generator
