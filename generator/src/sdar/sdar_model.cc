// SDAR/Qwen3 decoder in LibTorch: see dice/generator/sdar_model.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/generator/sdar_model.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <map>
#include <optional>
#include <utility>

#include "dice/core/env.h"
#include "dice/generator/sdar_fused_kernels.h"
#include "dice/generator/sdar_served_groups.h"
#include "sdar_layer_steps.h"

namespace dice::generator {
namespace {

Status TorchError(const std::string& what, const c10::Error& e) {
  return Status(StatusCode::kInternal, what + ": " + e.what_without_backtrace());
}

torch::ScalarType ToScalarType(WeightDtype dtype) {
  switch (dtype) {
    case WeightDtype::kF32: return torch::kFloat32;
    case WeightDtype::kF16: return torch::kFloat16;
    case WeightDtype::kBF16: return torch::kBFloat16;
  }
  return torch::kFloat32;
}

std::string ShapeText(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// SdarModelOptions::fuse_elementwise: the kernels, or null and the reason.
std::shared_ptr<const SdarFusedKernels> BuildFused(const SdarConfig& c, const SdarModelOptions& o,
                                                   std::string* note) {
  if (!o.fuse_elementwise) {
    *note = "fuse_elementwise is off";
    return nullptr;
  }
  if (!o.device.is_cuda()) {
    *note = "fused elementwise kernels run on CUDA devices only (" + o.device.str() + ")";
    return nullptr;
  }
  if (!o.fuse_projections) {
    *note = "fused elementwise kernels need fuse_projections";
    return nullptr;
  }
  SdarFusedShape shape;
  shape.hidden = c.hidden_size;
  shape.heads = c.num_attention_heads;
  shape.kv_heads = c.num_key_value_heads;
  shape.head_dim = c.head_dim;
  shape.intermediate = c.intermediate_size;
  shape.eps = c.rms_norm_eps;
  shape.dtype = o.dtype == torch::kBFloat16 ? FusedDtype::kBF16
                : o.dtype == torch::kFloat16 ? FusedDtype::kF16 : FusedDtype::kF32;
  // DICE_SDAR_GEMV=1: the step forward's GEMMs run the gemv family's stream
  // form. Off by default: on the H200 (session 14) SDAR-4B batch 1 decoded
  // 160.7 tokens/s with it against 216.3 with cuBLAS, same run.
  shape.skinny_gemv = EnvInt("DICE_SDAR_GEMV", 0, 0, 1) != 0;
  // DICE_SDAR_GEMV_DIRECT=1: those GEMMs in the direct form (x through L1, no barrier).
  shape.gemv_direct = EnvInt("DICE_SDAR_GEMV_DIRECT", 0, 0, 1) != 0;
  // DICE_SDAR_SPLIT_KV=1: the graph step form's attention always runs the
  // split-KV kernels; 2: SdarStepGraph measures both at small batches
  // (sdar_step_graph.h; the default once it has run on a GPU); unset or 0: SDPA.
  const int64_t split_kv = EnvInt("DICE_SDAR_SPLIT_KV", 0, 0, 2);
  shape.split_kv_attention = split_kv == 1;
  shape.split_kv_auto = split_kv == 2;
  // DICE_SDAR_QK_WARP=0: q/k norm + RoPE in the block-per-head form (A/B runs).
  shape.warp_qk = EnvInt("DICE_SDAR_QK_WARP", 1, 0, 1) != 0;
  const int ordinal = o.device.has_index() ? o.device.index() : c10::cuda::current_device();
  c10::cuda::CUDAGuard guard(ordinal);
  auto built = SdarFusedKernels::Build(shape, /*arch=*/"", ordinal);
  if (!built.ok()) {
    *note = "fused elementwise kernels off, unfused LibTorch path used: " + built.status().ToString();
    std::fprintf(stderr, "dice sdar: %s\n", note->c_str());
    return nullptr;
  }
  note->clear();
  return std::shared_ptr<const SdarFusedKernels>(std::move(*built));
}

using sdar_layers::CheckLaunch;
using sdar_layers::Ptr;

}  // namespace

Status KvCache::SelectBatch(const torch::Tensor& index) {
  if (index.dim() != 1) return Status(StatusCode::kInvalidArgument, "KvCache::SelectBatch: index must be 1-D");
  if (index.numel() > 0) {
    const auto cpu = index.to(torch::kCPU, torch::kLong);
    const int64_t lo = cpu.min().item<int64_t>(), hi = cpu.max().item<int64_t>();
    if (lo < 0 || hi >= batch_) {
      return Status(StatusCode::kInvalidArgument, "KvCache::SelectBatch: index " + std::to_string(lo < 0 ? lo : hi) +
                                                      " outside the batch of " + std::to_string(batch_));
    }
  }
  try {
    for (auto* list : {&k_, &v_}) {
      for (auto& t : *list) t = t.index_select(0, index.to(t.device(), torch::kLong));
    }
  } catch (const c10::Error& e) {
    return TorchError("KvCache::SelectBatch", e);
  }
  batch_ = index.numel();
  return Status::Ok();
}

Expected<SdarModel> SdarModel::Load(const std::string& dir, const SdarModelOptions& options) {
  auto ckpt = Checkpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  return Load(*ckpt, options);
}

Expected<SdarModel> SdarModel::Load(const Checkpoint& checkpoint, const SdarModelOptions& options) {
  if (options.dtype != torch::kFloat32 && options.dtype != torch::kBFloat16 && options.dtype != torch::kFloat16) {
    return Status(StatusCode::kInvalidArgument, std::string("SdarModel: compute dtype must be float32, bfloat16 or "
                                                            "float16, got ") + c10::toString(options.dtype));
  }
  if (options.device.is_cuda() && !torch::cuda::is_available()) {
    return Status(StatusCode::kNoDevice, "SdarModel: " + options.device.str() + " asked for but no CUDA device is "
                                         "present");
  }
  DICE_RETURN_IF_ERROR(checkpoint.Validate());
  torch::NoGradGuard no_grad;
  // Copies one checkpoint tensor out of the mapping (which may be only
  // 1-byte aligned) into an aligned host tensor, then onto the device.
  auto get = [&](const std::string& name) -> Expected<torch::Tensor> {
    auto view = checkpoint.Get(name);
    if (!view.ok()) return view.status();
    try {
      auto host = torch::empty(view->shape, torch::TensorOptions().dtype(ToScalarType(view->dtype)));
      if (view->nbytes) std::memcpy(host.data_ptr(), view->data, view->nbytes);
      return host.to(options.device, options.dtype);
    } catch (const c10::Error& e) {
      return TorchError("SdarModel: loading " + name + " from " + checkpoint.FileOf(name), e);
    }
  };
  return Build(checkpoint.config(), options, get);
}

Expected<SdarModel> SdarModel::Random(const SdarConfig& config, const SdarModelOptions& options, uint64_t seed) {
  if (options.dtype != torch::kFloat32 && options.dtype != torch::kBFloat16 && options.dtype != torch::kFloat16) {
    return Status(StatusCode::kInvalidArgument, std::string("SdarModel: compute dtype must be float32, bfloat16 or "
                                                            "float16, got ") + c10::toString(options.dtype));
  }
  if (options.device.is_cuda() && !torch::cuda::is_available()) {
    return Status(StatusCode::kNoDevice, "SdarModel: " + options.device.str() + " asked for but no CUDA device is "
                                         "present");
  }
  torch::NoGradGuard no_grad;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& t : config.ExpectedTensors()) shapes[t.name] = t.shape;
  // A private generator of the device's kind: the global one is left alone.
  at::Generator device_gen;
  try {
    const torch::Device dev = options.device.is_cuda() && options.device.index() < 0
                                  ? torch::Device(torch::kCUDA, 0) : options.device;
    device_gen = at::globalContext().defaultGenerator(dev).clone();
    device_gen.set_current_seed(seed);
  } catch (const c10::Error& e) {
    return TorchError("SdarModel::Random: random generator", e);
  }
  auto get = [&](const std::string& name) -> Expected<torch::Tensor> {
    auto it = shapes.find(name);
    if (it == shapes.end()) return Status(StatusCode::kInternal, "SdarModel::Random: no shape for " + name);
    try {
      auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(options.device);
      torch::Tensor t = torch::randn(it->second, device_gen, opts);
      // Norm weights near 1, projections and embeddings with std 0.02 (the
      // Qwen3 initializer_range).
      t = it->second.size() == 1 ? t.mul_(0.02).add_(1.0) : t.mul_(0.02);
      return t.to(options.dtype);
    } catch (const c10::Error& e) {
      return TorchError("SdarModel::Random: " + name, e);
    }
  };
  return Build(config, options, get);
}

Expected<SdarModel> SdarModel::Build(const SdarConfig& config, const SdarModelOptions& options,
                                     const std::function<Expected<torch::Tensor>(const std::string&)>& get) {
  SdarModel m;
  m.config_ = config;
  m.options_ = options;
  const SdarConfig& c = m.config_;
  torch::NoGradGuard no_grad;
#define DICE_LOAD(dst, name)                   \
  do {                                         \
    auto _t = get(name);                       \
    if (!_t.ok()) return _t.status();          \
    dst = std::move(*_t);                      \
  } while (0)
  DICE_LOAD(m.embed_, "model.embed_tokens.weight");
  DICE_LOAD(m.final_norm_, "model.norm.weight");
  if (c.tie_word_embeddings) {
    m.lm_head_ = m.embed_;
  } else {
    DICE_LOAD(m.lm_head_, "lm_head.weight");
  }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer l;
    DICE_LOAD(l.input_norm, p + "input_layernorm.weight");
    torch::Tensor q, k, v, gate, up;
    DICE_LOAD(q, p + "self_attn.q_proj.weight");
    DICE_LOAD(k, p + "self_attn.k_proj.weight");
    DICE_LOAD(v, p + "self_attn.v_proj.weight");
    DICE_LOAD(l.o_proj, p + "self_attn.o_proj.weight");
    DICE_LOAD(l.q_norm, p + "self_attn.q_norm.weight");
    DICE_LOAD(l.k_norm, p + "self_attn.k_norm.weight");
    DICE_LOAD(l.post_norm, p + "post_attention_layernorm.weight");
    DICE_LOAD(gate, p + "mlp.gate_proj.weight");
    DICE_LOAD(up, p + "mlp.up_proj.weight");
    DICE_LOAD(l.down_proj, p + "mlp.down_proj.weight");
    // One row-major matrix per fused GEMM; the named projections are its row
    // slices (contiguous views sharing its storage).
    auto fuse = [&](std::initializer_list<torch::Tensor*> parts, torch::Tensor* fused) -> Status {
      try {
        std::vector<torch::Tensor> rows;
        for (auto* t : parts) rows.push_back(*t);
        *fused = torch::cat(rows, 0);
        int64_t offset = 0;
        for (auto* t : parts) {
          const int64_t n = t->size(0);
          *t = fused->narrow(0, offset, n);
          offset += n;
        }
      } catch (const c10::Error& e) {
        return TorchError("SdarModel: fusing the projections of layer " + std::to_string(i), e);
      }
      return Status::Ok();
    };
    DICE_RETURN_IF_ERROR(fuse({&q, &k, &v}, &l.qkv_proj));
    DICE_RETURN_IF_ERROR(fuse({&gate, &up}, &l.gate_up_proj));
    l.q_proj = q, l.k_proj = k, l.v_proj = v, l.gate_proj = gate, l.up_proj = up;
    m.layers_.push_back(std::move(l));
  }
#undef DICE_LOAD
  try {
    // inv_freq = 1 / theta^(2i / head_dim), in float32 as Hugging Face does.
    auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(options.device);
    auto exponent = torch::arange(0, c.head_dim, 2, f32) / static_cast<double>(c.head_dim);
    m.inv_freq_ = 1.0 / torch::pow(c.rope_theta, exponent);
  } catch (const c10::Error& e) {
    return TorchError("SdarModel: RoPE table", e);
  }
  try {
    m.fused_ = BuildFused(c, options, &m.fused_note_);
  } catch (const c10::Error& e) {
    m.fused_note_ = std::string("fused elementwise kernels off: ") + e.what_without_backtrace();
    std::fprintf(stderr, "dice sdar: %s\n", m.fused_note_.c_str());
  }
  m.served_ = ServeSdarGroups(c, options, sdar_layers::HandKernelsOf(m.fused_));
  return m;
}

Expected<KvCache> SdarModel::NewCache(int64_t batch, int64_t capacity) const {
  if (batch < 1 || capacity < 1) {
    return Status(StatusCode::kInvalidArgument, "KV cache needs batch >= 1 and capacity >= 1, got batch " +
                                                    std::to_string(batch) + ", capacity " + std::to_string(capacity));
  }
  if (capacity > config_.max_position_embeddings) {
    return Status(StatusCode::kInvalidArgument,
                  "KV cache of " + std::to_string(capacity) + " positions exceeds the model's context of " +
                      std::to_string(config_.max_position_embeddings) + " (max_position_embeddings)");
  }
  KvCache cache;
  cache.batch_ = batch;
  cache.capacity_ = capacity;
  try {
    auto opts = torch::TensorOptions().dtype(options_.dtype).device(options_.device);
    for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
      cache.k_.push_back(torch::empty({batch, config_.num_key_value_heads, capacity, config_.head_dim}, opts));
      cache.v_.push_back(torch::empty({batch, config_.num_key_value_heads, capacity, config_.head_dim}, opts));
    }
  } catch (const c10::Error& e) {
    return TorchError("KV cache allocation (" + std::to_string(batch) + " x " + std::to_string(capacity) + ")", e);
  }
  return cache;
}

torch::Tensor SdarModel::RmsNorm(const torch::Tensor& x, const torch::Tensor& weight) const {
  auto xf = x.to(torch::kFloat32);
  auto var = xf.pow(2).mean(-1, /*keepdim=*/true);
  xf = xf * torch::rsqrt(var + config_.rms_norm_eps);
  return weight * xf.to(x.scalar_type());
}

Status SdarModel::CheckForward(const torch::Tensor& ids, const KvCache* cache, bool commit, bool check_ids,
                               bool check_context) const {
  const std::string where = "SdarModel::Forward: ";
  if (!ids.defined() || ids.dim() != 2 || c10::isFloatingType(ids.scalar_type()) ||
      c10::isComplexType(ids.scalar_type()) || ids.scalar_type() == torch::kBool) {
    return Status(StatusCode::kInvalidArgument,
                  where + "ids must be a 2-D integer tensor [batch, tokens], got " +
                      (ids.defined() ? std::string(c10::toString(ids.scalar_type())) + " " + ShapeText(ids)
                                     : std::string("an undefined tensor")));
  }
  const int64_t batch = ids.size(0), len = ids.size(1);
  if (batch == 0 || len == 0) return Status(StatusCode::kInvalidArgument, where + "ids " + ShapeText(ids) + " is empty");
  if (commit && cache == nullptr) return Status(StatusCode::kInvalidArgument, where + "commit needs a KV cache");
  if (commit && len % config_.block_size != 0) {
    return Status(StatusCode::kInvalidArgument, where + "commit of " + std::to_string(len) +
                                                    " tokens: committed blocks must be whole (block_size " +
                                                    std::to_string(config_.block_size) + ")");
  }
  if (cache != nullptr) {
    if (cache->batch_ != batch) {
      return Status(StatusCode::kInvalidArgument, where + "ids batch " + std::to_string(batch) +
                                                      " differs from the KV cache batch " +
                                                      std::to_string(cache->batch_));
    }
    if (cache->length_ + len > cache->capacity_) {
      return Status(StatusCode::kInvalidArgument,
                    where + std::to_string(cache->length_) + " cached + " + std::to_string(len) +
                        " new positions exceed the KV cache capacity of " + std::to_string(cache->capacity_));
    }
    if (static_cast<int64_t>(cache->k_.size()) != config_.num_hidden_layers) {
      return Status(StatusCode::kInvalidArgument, where + "KV cache was not made by this model (NewCache)");
    }
  } else if (check_context && len > config_.max_position_embeddings) {
    return Status(StatusCode::kInvalidArgument, where + std::to_string(len) + " tokens exceed the context of " +
                                                    std::to_string(config_.max_position_embeddings));
  }
  if (check_ids) {
    try {
      const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
      if (lo < 0 || hi >= config_.vocab_size) {
        return Status(StatusCode::kInvalidArgument, where + "token id " + std::to_string(lo < 0 ? lo : hi) +
                                                        " outside the vocabulary [0, " +
                                                        std::to_string(config_.vocab_size) + ")");
      }
    } catch (const c10::Error& e) {
      return TorchError("SdarModel::Forward: reading ids", e);
    }
  }
  return Status::Ok();
}

Expected<torch::Tensor> SdarModel::Forward(const torch::Tensor& ids, KvCache* cache, bool commit,
                                           bool compute_logits) const {
  DICE_RETURN_IF_ERROR(CheckForward(ids, cache, commit, /*check_ids=*/true));
  try {
    torch::NoGradGuard no_grad;
    return ForwardImpl(ids, cache, commit ? ids.size(1) : 0, compute_logits);
  } catch (const c10::Error& e) {
    return TorchError("SdarModel::Forward", e);
  }
}

torch::Tensor BlockCausalMask(const torch::Tensor& q_positions, const torch::Tensor& k_positions,
                              int64_t block_size) {
  auto q_block = q_positions.to(torch::kLong).div(block_size, "floor");
  auto k_block = k_positions.to(torch::kLong).div(block_size, "floor");
  return k_block.unsqueeze(0).le(q_block.unsqueeze(1));  // [q, k], true = attend
}

Expected<torch::Tensor> SdarModel::ForwardPacked(const torch::Tensor& ids, const torch::Tensor& positions,
                                                 const torch::Tensor& mask) const {
  DICE_RETURN_IF_ERROR(CheckForward(ids, nullptr, /*commit=*/false, /*check_ids=*/true, /*check_context=*/false));
  const int64_t len = ids.size(1);
  if (!positions.defined() || positions.dim() != 1 || positions.size(0) != len ||
      positions.scalar_type() != torch::kLong) {
    return Status(StatusCode::kInvalidArgument, "SdarModel::ForwardPacked: positions must be int64 [" +
                                                    std::to_string(len) + "], got " +
                                                    (positions.defined() ? ShapeText(positions) : "undefined"));
  }
  if (!mask.defined() || mask.dim() != 2 || mask.size(0) != len || mask.size(1) != len ||
      mask.scalar_type() != torch::kBool) {
    return Status(StatusCode::kInvalidArgument, "SdarModel::ForwardPacked: mask must be bool [" +
                                                    std::to_string(len) + ", " + std::to_string(len) + "], got " +
                                                    (mask.defined() ? ShapeText(mask) : "undefined"));
  }
  try {
    const int64_t lo = positions.min().item<int64_t>(), hi = positions.max().item<int64_t>();
    if (lo < 0 || hi >= config_.max_position_embeddings) {
      return Status(StatusCode::kInvalidArgument, "SdarModel::ForwardPacked: position " +
                                                      std::to_string(lo < 0 ? lo : hi) + " outside the context [0, " +
                                                      std::to_string(config_.max_position_embeddings) + ")");
    }
    return ForwardImpl(ids, nullptr, /*commit_len=*/0, /*compute_logits=*/true, /*logit_rows=*/{}, positions, mask);
  } catch (const c10::Error& e) {
    return TorchError("SdarModel::ForwardPacked", e);
  }
}

std::vector<std::pair<std::string, torch::Tensor>> SdarModel::NamedWeights() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  out.emplace_back("model.embed_tokens.weight", embed_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const Layer& l = layers_[i];
    out.emplace_back(p + "input_layernorm.weight", l.input_norm);
    out.emplace_back(p + "self_attn.q_proj.weight", l.q_proj);
    out.emplace_back(p + "self_attn.k_proj.weight", l.k_proj);
    out.emplace_back(p + "self_attn.v_proj.weight", l.v_proj);
    out.emplace_back(p + "self_attn.o_proj.weight", l.o_proj);
    out.emplace_back(p + "self_attn.q_norm.weight", l.q_norm);
    out.emplace_back(p + "self_attn.k_norm.weight", l.k_norm);
    out.emplace_back(p + "post_attention_layernorm.weight", l.post_norm);
    out.emplace_back(p + "mlp.gate_proj.weight", l.gate_proj);
    out.emplace_back(p + "mlp.up_proj.weight", l.up_proj);
    out.emplace_back(p + "mlp.down_proj.weight", l.down_proj);
  }
  out.emplace_back("model.norm.weight", final_norm_);
  if (!config_.tie_word_embeddings) out.emplace_back("lm_head.weight", lm_head_);
  return out;
}

torch::Tensor SdarModel::ForwardImpl(const torch::Tensor& ids_in, KvCache* cache, int64_t commit_len,
                                     bool compute_logits, const torch::Tensor& logit_rows,
                                     const torch::Tensor& positions, const torch::Tensor& mask_in) const {
  const SdarConfig& c = config_;
  const int64_t batch = ids_in.size(0), len = ids_in.size(1);
  const int64_t start = cache ? cache->length_ : 0;
  const auto device = options_.device;
  auto ids = ids_in.to(device, torch::kLong);
  auto x = embed_.index_select(0, ids.reshape({-1})).view({batch, len, c.hidden_size});

  // RoPE for positions start .. start+len-1 (angles in float32, then cast).
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  auto pos = positions.defined() ? positions.to(device, torch::kFloat32) : torch::arange(start, start + len, f32);
  auto angles = torch::outer(pos, inv_freq_);
  angles = torch::cat({angles, angles}, -1);
  auto cos = angles.cos().to(options_.dtype), sin = angles.sin().to(options_.dtype);

  // Block-causal mask over [new queries, prefix + new keys]; none when all new
  // tokens share one block (they then see every key).
  std::optional<torch::Tensor> mask;
  const int64_t bs = c.block_size;
  if (mask_in.defined()) {
    mask = mask_in.to(device);  // ForwardPacked: the caller's layout
  } else if (start / bs != (start + len - 1) / bs) {
    auto i64 = torch::TensorOptions().dtype(torch::kLong).device(device);
    mask = BlockCausalMask(torch::arange(start, start + len, i64), torch::arange(0, start + len, i64), bs);
  }

  x = RunLayers(x, cos, sin, mask, cache, start, /*slots=*/torch::Tensor(), start + len);
  if (commit_len > 0) cache->length_ += commit_len;
  if (!compute_logits) return torch::Tensor();
  return LmHead(x, logit_rows);
}

torch::Tensor SdarModel::RunLayers(torch::Tensor x, const torch::Tensor& cos, const torch::Tensor& sin,
                                   const std::optional<torch::Tensor>& mask, KvCache* cache, int64_t start,
                                   const torch::Tensor& slots, int64_t key_len, bool split_kv) const {
  const SdarConfig& c = config_;
  const int64_t batch = x.size(0), len = x.size(1);
  const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads, hd = c.head_dim;
  // Fused GEMMs only without autograd: with it the gradients must reach the
  // per-projection leaves the optimiser holds (sdar_model.h).
  const bool fused = options_.fuse_projections && !torch::GradMode::is_enabled();
  // The fused elementwise kernels (sdar_fused_kernels.h) on the current
  // stream (captured when a CUDA graph records); the device made current so
  // their driver launches find its context.
  const bool fk = fused && fused_ != nullptr && x.is_cuda();
  std::optional<c10::cuda::CUDAGuard> guard;
  void* stream = nullptr;
  torch::Tensor cos_c, sin_c;
  if (fk) {
    guard.emplace(x.device());
    stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
    x = x.contiguous();
    cos_c = cos.contiguous(), sin_c = sin.contiguous();
    TORCH_CHECK(cos_c.size(0) == len && cos_c.size(1) == hd, "SdarModel: RoPE table is not [L, head_dim]");
  }
  const int64_t rows = batch * len;
  // The skinny GEMMs (SdarFusedKernels::Gemv) for a step forward of at most
  // 16 rows, the fused add + RMSNorm and gate/up activation (fk only).
  const bool skinny = fk && fused_->has_gemv() && rows <= 16;
  const sdar_layers::FusedLayerCalls calls{fused_.get(), served_.get(), x, stream, batch, len, rows, skinny};
  // The graph (slots) form's attention on the split-KV kernels
  // (SdarFusedKernels::DecodeAttention) when the caller asks (`split_kv`) and they take the shape:
  // the mask [len, key_len] bool, contiguous, once for every layer.
  torch::Tensor split_mask;
  if (fk && split_kv && slots.defined() && cache != nullptr && mask.has_value() &&
      mask->dim() == 2 && mask->size(0) == len && mask->size(1) == key_len && len * (heads / kv_heads) <= 64 &&
      hd <= 256) {
    split_mask = mask->to(torch::kBool).contiguous();
  }
  // fk and qk_norm_rope served at these rows: the RoPE tables per token row
  // [rows, 1, head_dim] (sdar_served_groups.h QkNormRope); K/V then go to
  // the cache by the copies below instead of the hand-written kernel.
  torch::Tensor cos_rows, sin_rows;
  if (fk && served_ != nullptr && served_->Serves(SdarGroup::kQNormRope, rows)) {
    cos_rows = cos_c.unsqueeze(0).expand({batch, len, hd}).reshape({rows, 1, hd}).contiguous();
    sin_rows = sin_c.unsqueeze(0).expand({batch, len, hd}).reshape({rows, 1, hd}).contiguous();
  }
  // The graph form's GQA-folded SDPA mask, made once for every layer.
  const torch::Tensor folded_mask = sdar_layers::FoldedMask(mask, slots.defined(), heads, kv_heads);
  // fk: the last MLP output not yet added to x (added by the next layer's
  // fused add + RMSNorm, or after the loop).
  torch::Tensor pending;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    torch::Tensor a;
    if (fk) {
      torch::Tensor sum;
      calls.AddNorm(pending, l.input_norm, &sum, &a);
      if (pending.defined()) x = sum, pending = torch::Tensor();
    } else {
      a = RmsNorm(x, l.input_norm);
    }
    torch::Tensor q, k, v;
    torch::Tensor q_rows;  // fk: q as [batch, len, heads, head_dim], contiguous
    // fk with a cache the kernel can address: QkNormRope stores the new keys
    // and values into it itself (no copy_ / index_copy_ launches below).
    bool kv_written = false, qk_served = false;
    if (fk) {
      auto qkv = calls.Gemv(SdarGemv::kQkv, a, l.qkv_proj);
      if (!qkv.defined()) qkv = torch::linear(a, l.qkv_proj).contiguous();
      torch::Tensor qs, ks;
      qk_served = cos_rows.defined() && served_->QkNormRope(qkv, l.q_norm, l.k_norm, cos_rows, sin_rows, &qs, &ks);
      // SDPA takes q as [batch, heads, len, head_dim]: the kernel writes that
      // layout, so the GQA fold below is a view, not a strided copy. The
      // split-KV kernels (and the served group) take [batch, len, heads, hd].
      const bool q_heads_major = !qk_served && !split_mask.defined();
      auto qo = qk_served        ? qs
                : q_heads_major ? torch::empty({batch, heads, len, hd}, x.options())
                                : torch::empty({batch, len, heads, hd}, x.options());
      KvCacheWrite kvw;
      const bool direct = cache != nullptr && sdar_layers::FusedCacheWritable(cache->k_[i], cache->v_[i], kv_heads,
                                                                              cache->capacity_, hd, x, slots, len);
      if (qk_served) {
        k = ks.transpose(1, 2);
        v = qkv.narrow(-1, (heads + kv_heads) * hd, kv_heads * hd).view({batch, len, kv_heads, hd}).transpose(1, 2);
      } else if (direct) {
        kvw.k_cache = cache->k_[i].data_ptr();
        kvw.v_cache = cache->v_[i].data_ptr();
        kvw.slots = slots.defined() ? slots.data_ptr<int64_t>() : nullptr;
        kvw.start = start;
        kvw.capacity = cache->capacity_;
        CheckLaunch(fused_->QkNormRope(Ptr(qkv), Ptr(l.q_norm), Ptr(l.k_norm), Ptr(cos_c), Ptr(sin_c), qo.data_ptr(),
                                       nullptr, rows, len, stream, &kvw, q_heads_major));
        kv_written = true;
      } else {
        auto ko = torch::empty({batch, len, kv_heads, hd}, x.options());
        CheckLaunch(fused_->QkNormRope(Ptr(qkv), Ptr(l.q_norm), Ptr(l.k_norm), Ptr(cos_c), Ptr(sin_c), qo.data_ptr(),
                                       ko.data_ptr(), rows, len, stream, /*kv=*/nullptr, q_heads_major));
        k = ko.transpose(1, 2);
        v = qkv.narrow(-1, (heads + kv_heads) * hd, kv_heads * hd).view({batch, len, kv_heads, hd}).transpose(1, 2);
      }
      q = q_heads_major ? qo : qo.transpose(1, 2);
      q_rows = qo;  // read only by the split-KV path, where it is [batch, len, heads, hd]
    } else {
      torch::Tensor qp, kp, vp;  // [B, L, n * head_dim] each
      sdar_layers::ProjectQkv(a, l.qkv_proj, l.q_proj, l.k_proj, l.v_proj, fused, heads, kv_heads, hd, &qp, &kp, &vp);
      q = RmsNorm(qp.view({batch, len, heads, hd}), l.q_norm).transpose(1, 2);
      k = RmsNorm(kp.view({batch, len, kv_heads, hd}), l.k_norm).transpose(1, 2);
      v = vp.view({batch, len, kv_heads, hd}).transpose(1, 2);
      q = q * cos + sdar_layers::RotateHalf(q) * sin;
      k = k * cos + sdar_layers::RotateHalf(k) * sin;
    }
    torch::Tensor keys = k, values = v;
    if (cache != nullptr) {
      sdar_layers::StoreKv(cache->k_[i], cache->v_[i], k, v, slots, start, len, kv_written);
      keys = cache->k_[i].narrow(2, 0, key_len);
      values = cache->v_[i].narrow(2, 0, key_len);
    }
    torch::Tensor o;
    if (split_mask.defined() && (kv_written || qk_served)) {  // the cache holds this step's K/V
      // Already [batch, len, heads * head_dim], the layout o_proj reads.
      o = torch::empty({batch, len, heads * hd}, x.options());
      auto ws = torch::empty({fused_->AttentionWorkspaceFloats(batch, len, key_len)},
                             x.options().dtype(torch::kFloat32));
      CheckLaunch(fused_->DecodeAttention(Ptr(q_rows), cache->k_[i].data_ptr(), cache->v_[i].data_ptr(),
                                          split_mask.data_ptr(), o.data_ptr(), ws.data_ptr(), batch, len, key_len,
                                          cache->capacity_, stream));
    } else {
      o = sdar_layers::SdpaAttention(q, keys, values, mask, slots.defined(), batch, len, heads, kv_heads, hd,
                                     folded_mask);
    }
    if (o.dim() == 4) o = o.transpose(1, 2).reshape({batch, len, heads * hd});
    if (fk) {
      auto attn = calls.Gemv(SdarGemv::kO, o, l.o_proj);
      if (!attn.defined()) attn = torch::linear(o, l.o_proj).contiguous();
      torch::Tensor sum, m;
      calls.AddNorm(attn, l.post_norm, &sum, &m);
      x = sum;
      auto act = calls.GateUpActivation(m, l.gate_up_proj, c.intermediate_size);
      pending = calls.Gemv(SdarGemv::kDown, act, l.down_proj);
      if (!pending.defined()) pending = torch::linear(act, l.down_proj);
      continue;
    }
    x = x + torch::linear(o, l.o_proj);
    auto m = RmsNorm(x, l.post_norm);
    auto act = sdar_layers::EagerMlpActivation(m, l.gate_up_proj, l.gate_proj, l.up_proj, fused, c.intermediate_size);
    x = x + torch::linear(act, l.down_proj);
  }
  if (pending.defined()) x = x + pending;
  return x;
}

torch::Tensor SdarModel::LmHead(const torch::Tensor& x, const torch::Tensor& rows) const {
  if (!rows.defined()) return torch::linear(RmsNorm(x, final_norm_), lm_head_).to(torch::kFloat32);
  // Gather first: RMSNorm is per row, so norm-then-gather equals gather-then-norm.
  auto picked = x.gather(1, rows.unsqueeze(-1).expand({rows.size(0), rows.size(1), x.size(-1)}));
  return torch::linear(RmsNorm(picked, final_norm_), lm_head_).to(torch::kFloat32);
}

}  // namespace dice::generator
