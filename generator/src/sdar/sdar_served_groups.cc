// The SDAR decoder's fusion groups served through the runtime's public
// serving API: see dice/generator/sdar_served_groups.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/generator/sdar_served_groups.h"

#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <optional>
#include <utility>

#include "dice/core/env.h"
#include "dice/torch_ext/group_stats.h"
#include "dice/torch_ext/run_group.h"

namespace dice::generator {
namespace {

Expected<ir::DType> IrDtype(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return ir::DType::kFloat32;
    case torch::kBFloat16: return ir::DType::kBFloat16;
    case torch::kFloat16: return ir::DType::kFloat16;
    default: break;
  }
  return Status(StatusCode::kInvalidArgument,
                std::string("SdarServedGroups: dtype ") + c10::toString(t) + " is not float32, bfloat16 or float16");
}

// The group's statistics (hits, the most frequent fallback reason) by id.
torch_ext::GroupStats StatsOf(int id) {
  for (auto& s : torch_ext::GetGroupStats()) {
    if (s.id == id) return s;
  }
  return {};
}

bool Aligned(const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

}  // namespace

Expected<std::unique_ptr<SdarServedGroups>> SdarServedGroups::Create(const SdarConfig& config,
                                                                     torch::ScalarType dtype, torch::Device device) {
  auto dt = IrDtype(dtype);
  if (!dt.ok()) return dt.status();
  std::unique_ptr<SdarServedGroups> s(new SdarServedGroups());
  s->config_ = config;
  s->dtype_ = dtype;
  s->device_ = device;
  for (int i = 0; i < kNumSdarGroups; ++i) {
    s->ir_text_[i] = ir::Canonical(SdarGroupGraph(static_cast<SdarGroup>(i), *dt, config.rms_norm_eps));
  }
  try {
    auto opts = torch::TensorOptions().dtype(dtype).device(device);
    s->sel_gate_ = torch::tensor({1.0, 0.0}).view({1, 2, 1}).to(opts);
    s->sel_up_ = torch::tensor({0.0, 1.0}).view({1, 2, 1}).to(opts);
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, std::string("SdarServedGroups: selectors: ") + e.what_without_backtrace());
  }
  return s;
}

Status SdarServedGroups::Prepare(int64_t rows) {
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (std::find(prepared_.begin(), prepared_.end(), rows) != prepared_.end()) return Status::Ok();
  }
  auto dt = IrDtype(dtype_);
  if (!dt.ok()) return dt.status();
  auto decls = DeclareSdarGroups(config_, *dt, rows);
  if (!decls.ok()) return decls.status();
  std::vector<std::pair<SdarGroup, std::string>> lines;  // (group, note)
  std::vector<SdarGroup> served;
  for (const SdarGroupDecl& d : *decls) {
    const std::string where = d.name + " at " + std::to_string(rows) + " rows";
    auto id = torch_ext::RegisterIrGroup(d.ir_text, {"sdar." + d.name});
    if (!id.ok()) return Status(StatusCode::kInternal, "SdarServedGroups: " + where + ": " + id.status().message());
    std::vector<torch::Tensor> inputs;
    try {
      std::optional<c10::cuda::CUDAGuard> guard;
      if (device_.is_cuda()) guard.emplace(device_);
      auto opts = torch::TensorOptions().dtype(dtype_).device(device_);
      if (d.group == SdarGroup::kSiluMul) {
        inputs = {torch::randn(d.inputs[0].shape, opts), sel_gate_, sel_up_};
      } else {
        for (const auto& spec : d.inputs) inputs.push_back(torch::randn(spec.shape, opts));
      }
    } catch (const c10::Error& e) {
      return Status(StatusCode::kInternal, "SdarServedGroups: " + where + ": " + e.what_without_backtrace());
    }
    const int64_t hits_before = StatsOf(*id).hits;
    auto outs = torch_ext::RunGroup(d.ir_text, inputs);
    if (!outs.ok()) return Status(StatusCode::kInternal, "SdarServedGroups: " + where + ": " + outs.status().message());
    const torch_ext::GroupStats after = StatsOf(*id);
    if (after.hits > hits_before) {
      served.push_back(d.group);
      lines.emplace_back(d.group, where + ": served");
    } else {
      const std::string why = after.fallback_reasons.empty() ? "no winner" : after.fallback_reasons.front().first;
      lines.emplace_back(d.group, where + ": not served (" + why + "); hand-written kernel used");
      std::fprintf(stderr, "dice sdar: %s\n", lines.back().second.c_str());
    }
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (std::find(prepared_.begin(), prepared_.end(), rows) != prepared_.end()) return Status::Ok();
  prepared_.push_back(rows);
  for (SdarGroup g : served) served_[static_cast<int>(g)].push_back(rows);
  for (auto& l : lines) notes_.push_back(std::move(l.second));
  return Status::Ok();
}

bool SdarServedGroups::Serves(SdarGroup group, int64_t rows) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  const auto& v = served_[static_cast<int>(group)];
  return std::find(v.begin(), v.end(), rows) != v.end();
}

std::vector<std::string> SdarServedGroups::notes() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return notes_;
}

bool SdarServedGroups::Eligible(SdarGroup group, const torch::Tensor& t, int64_t row_len, int64_t* rows) const {
  if (!t.defined() || t.dim() < 1 || t.size(-1) != row_len || t.scalar_type() != dtype_ || !t.is_cuda() ||
      !t.is_contiguous() || !Aligned(t)) {
    return false;
  }
  *rows = t.numel() / row_len;
  return Serves(group, *rows);
}

bool SdarServedGroups::AddRmsNorm(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& w,
                                  torch::Tensor* sum, torch::Tensor* norm) const {
  const int64_t hidden = config_.hidden_size;
  const SdarGroup group = delta.defined() ? SdarGroup::kAddRmsNorm : SdarGroup::kRmsNorm;
  int64_t rows = 0;
  if (!Eligible(group, x, hidden, &rows) || !w.is_contiguous() || !Aligned(w)) return false;
  std::vector<torch::Tensor> inputs{x.view({rows, hidden})};
  if (delta.defined()) {
    if (!delta.is_contiguous() || !Aligned(delta) || delta.sizes() != x.sizes() || delta.scalar_type() != dtype_) {
      return false;
    }
    inputs.push_back(delta.view({rows, hidden}));
  }
  inputs.push_back(w);
  auto outs = torch_ext::RunGroup(ir_text_[static_cast<int>(group)], inputs);
  TORCH_CHECK(outs.ok(), "dice sdar: served ", SdarGroupName(group), ": ", outs.status().ToString());
  if (delta.defined()) {
    *sum = (*outs)[0].view(x.sizes());
    *norm = (*outs)[1].view(x.sizes());
  } else {
    *norm = (*outs)[0].view(x.sizes());
  }
  return true;
}

bool SdarServedGroups::SiluMul(const torch::Tensor& gate_up, torch::Tensor* out) const {
  const int64_t inter = config_.intermediate_size;
  int64_t rows = 0;
  if (!Eligible(SdarGroup::kSiluMul, gate_up, 2 * inter, &rows)) return false;
  auto outs = torch_ext::RunGroup(ir_text_[static_cast<int>(SdarGroup::kSiluMul)],
                                  {gate_up.view({rows, 2, inter}), sel_gate_, sel_up_});
  TORCH_CHECK(outs.ok(), "dice sdar: served silu_mul: ", outs.status().ToString());
  auto sizes = gate_up.sizes().vec();
  sizes.back() = inter;
  *out = (*outs)[0].view(sizes);
  return true;
}

bool SdarServedGroups::QkNormRope(const torch::Tensor& qkv, const torch::Tensor& q_norm, const torch::Tensor& k_norm,
                                  const torch::Tensor& cos, const torch::Tensor& sin, torch::Tensor* q,
                                  torch::Tensor* k) const {
  const int64_t heads = config_.num_attention_heads, kv_heads = config_.num_key_value_heads, hd = config_.head_dim;
  int64_t rows = 0;
  if (!Eligible(SdarGroup::kQNormRope, qkv, (heads + 2 * kv_heads) * hd, &rows) || qkv.dim() != 3 ||
      !Serves(SdarGroup::kKNormRope, rows)) {
    return false;
  }
  for (const torch::Tensor* t : {&cos, &sin}) {
    if (!t->defined() || t->sizes() != torch::IntArrayRef({rows, 1, hd}) || t->scalar_type() != dtype_ ||
        t->device() != qkv.device() || !t->is_contiguous() || !Aligned(*t)) {
      return false;
    }
  }
  for (const torch::Tensor* w : {&q_norm, &k_norm}) {
    if (!w->defined() || w->numel() != hd || w->scalar_type() != dtype_ || !w->is_contiguous() || !Aligned(*w)) {
      return false;
    }
  }
  auto heads_of = qkv.view({rows, heads + 2 * kv_heads, hd});
  const std::string& text = ir_text_[static_cast<int>(SdarGroup::kQNormRope)];  // the same IR as kKNormRope
  auto qo = torch_ext::RunGroup(text, {heads_of.narrow(1, 0, heads).contiguous(), q_norm, cos, sin});
  TORCH_CHECK(qo.ok(), "dice sdar: served qk_norm_rope.q: ", qo.status().ToString());
  auto ko = torch_ext::RunGroup(text, {heads_of.narrow(1, heads, kv_heads).contiguous(), k_norm, cos, sin});
  TORCH_CHECK(ko.ok(), "dice sdar: served qk_norm_rope.k: ", ko.status().ToString());
  *q = (*qo)[0].view({qkv.size(0), qkv.size(1), heads, hd});
  *k = (*ko)[0].view({qkv.size(0), qkv.size(1), kv_heads, hd});
  return true;
}

std::shared_ptr<SdarServedGroups> ServeSdarGroups(const SdarConfig& config, const SdarModelOptions& options,
                                                  bool fused_on) {
  // DICE_SDAR_SERVE_GROUPS=1 turns the option on for every model built in
  // the process (benchmarks, the CLI), as DICE_SDAR_GEMV does for the GEMVs.
  if (!options.serve_groups && EnvInt("DICE_SDAR_SERVE_GROUPS", 0, 0, 1) == 0) return nullptr;
  auto refuse = [](const std::string& why) -> std::shared_ptr<SdarServedGroups> {
    std::fprintf(stderr, "dice sdar: served fusion groups off, hand-written kernels used: %s\n", why.c_str());
    return nullptr;
  };
  if (!options.device.is_cuda()) return refuse("not a CUDA device (" + options.device.str() + ")");
  if (!fused_on) return refuse("the fused elementwise kernels are off (SdarModel::fused_elementwise_note)");
  auto created = SdarServedGroups::Create(config, options.dtype, options.device);
  if (!created.ok()) return refuse(created.status().ToString());
  std::shared_ptr<SdarServedGroups> served(std::move(*created));
  std::vector<int64_t> rows = options.serve_rows;
  if (rows.empty()) rows.push_back(config.block_size);
  for (int64_t r : rows) {
    try {
      Status st = served->Prepare(r);
      if (!st.ok()) return refuse(st.ToString());
    } catch (const std::exception& e) {
      return refuse(e.what());
    }
  }
  return served;
}

}  // namespace dice::generator
