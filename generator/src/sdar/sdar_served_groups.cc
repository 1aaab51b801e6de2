// The SDAR decoder's fusion groups served through the runtime's public
// serving API: see dice/generator/sdar_served_groups.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/generator/sdar_served_groups.h"

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

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

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string Us(double us) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f", us);
  return b;
}

// Medians in µs of `a` and `b` on the current stream of `device` (made
// current by the caller): kWarmups calls of each, then kReps pairs, the
// order alternating (a b, b a, ...) so neither always runs first. Each pair
// is queued behind a GPU sleep longer than its host-side enqueue, so the
// events time the GPU's work back to back, as a CUDA graph replays it.
// Throws c10::Error when a call or event fails.
std::pair<double, double> TimeInterleaved(const std::function<void()>& a, const std::function<void()>& b,
                                          torch::Device device) {
  constexpr int kWarmups = 5, kReps = 50;
  constexpr int64_t kQueueAheadCycles = int64_t{1} << 19;  // ~0.27 ms at the H100's 1.98 GHz
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device.index());
  for (int i = 0; i < kWarmups; ++i) a(), b();
  std::vector<at::cuda::CUDAEvent> ev;
  ev.reserve(4 * kReps);
  for (int i = 0; i < 4 * kReps; ++i) ev.emplace_back(cudaEventDefault);
  for (int i = 0; i < kReps; ++i) {
    at::cuda::sleep(kQueueAheadCycles);
    at::cuda::CUDAEvent* e = &ev[4 * i];
    const bool a_first = i % 2 == 0;
    for (int k = 0; k < 2; ++k) {
      const bool run_a = (k == 0) == a_first;
      e[run_a ? 0 : 2].record(stream);
      run_a ? a() : b();
      e[run_a ? 1 : 3].record(stream);
    }
  }
  stream.synchronize();
  std::vector<double> ta, tb;
  for (int i = 0; i < kReps; ++i) {
    ta.push_back(1000.0 * ev[4 * i].elapsed_time(ev[4 * i + 1]));
    tb.push_back(1000.0 * ev[4 * i + 2].elapsed_time(ev[4 * i + 3]));
  }
  return {Median(std::move(ta)), Median(std::move(tb))};
}

}  // namespace

ServedDecision DecideByTimes(SdarGroup group, int64_t rows, double served_us, double hand_us,
                             const std::string& what) {
  ServedDecision d;
  d.group = group;
  d.rows = rows;
  d.winner = true;
  d.served = served_us < hand_us;
  d.served_us = served_us;
  d.hand_us = hand_us;
  d.why = std::string(d.served ? "served" : "hand-written kernel kept") + " (served " + Us(served_us) +
          " µs vs hand " + Us(hand_us) + " µs" + (what.empty() ? "" : ", " + what) + ")";
  return d;
}

Expected<std::unique_ptr<SdarServedGroups>> SdarServedGroups::Create(const SdarConfig& config,
                                                                     torch::ScalarType dtype, torch::Device device,
                                                                     HandKernelLaunch hand) {
  auto dt = IrDtype(dtype);
  if (!dt.ok()) return dt.status();
  std::unique_ptr<SdarServedGroups> s(new SdarServedGroups());
  s->config_ = config;
  s->dtype_ = dtype;
  s->device_ = device;
  s->hand_ = std::move(hand);
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

Status SdarServedGroups::RunOnce(int64_t rows, bool winner[kNumSdarGroups],
                                 std::string why[kNumSdarGroups]) const {
  auto dt = IrDtype(dtype_);
  if (!dt.ok()) return dt.status();
  auto decls = DeclareSdarGroups(config_, *dt, rows);
  if (!decls.ok()) return decls.status();
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
    const int g = static_cast<int>(d.group);
    winner[g] = after.hits > hits_before;
    why[g] = after.fallback_reasons.empty() ? "no winner" : after.fallback_reasons.front().first;
  }
  return Status::Ok();
}

SdarTimingInputs SdarServedGroups::TimingInputs(SdarGroup group, int64_t rows) const {
  const SdarConfig& c = config_;
  const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads, hd = c.head_dim;
  auto opts = torch::TensorOptions().dtype(dtype_).device(device_);
  SdarTimingInputs in;
  in.group = group;
  in.rows = rows;
  switch (group) {
    case SdarGroup::kRmsNorm:
    case SdarGroup::kAddRmsNorm:
      in.x = torch::randn({1, rows, c.hidden_size}, opts);
      if (group == SdarGroup::kAddRmsNorm) in.delta = torch::randn({1, rows, c.hidden_size}, opts);
      in.w = torch::randn({c.hidden_size}, opts);
      break;
    case SdarGroup::kSiluMul: in.gate_up = torch::randn({1, rows, 2 * c.intermediate_size}, opts); break;
    default:
      in.qkv = torch::randn({1, rows, (heads + 2 * kv_heads) * hd}, opts);
      in.q_norm = torch::randn({hd}, opts);
      in.k_norm = torch::randn({hd}, opts);
      in.cos = torch::randn({rows, hd}, opts);
      in.sin = torch::randn({rows, hd}, opts);
      in.k_cache = torch::zeros({1, kv_heads, rows, hd}, opts);
      in.v_cache = torch::zeros({1, kv_heads, rows, hd}, opts);
      break;
  }
  return in;
}

ServedDecision SdarServedGroups::Compare(SdarGroup group, int64_t rows) const {
  c10::cuda::CUDAGuard guard(device_);
  const SdarTimingInputs in = TimingInputs(group, rows);
  const int64_t heads = config_.num_attention_heads, kv_heads = config_.num_key_value_heads, hd = config_.head_dim;
  std::function<void()> served;
  const bool qk = group == SdarGroup::kQNormRope || group == SdarGroup::kKNormRope;
  if (group == SdarGroup::kRmsNorm || group == SdarGroup::kAddRmsNorm) {
    served = [&] {
      torch::Tensor sum, norm;
      RunAddRmsNorm(in.x, in.delta, in.w, rows, &sum, &norm);
    };
  } else if (group == SdarGroup::kSiluMul) {
    served = [&] {
      torch::Tensor out;
      RunSiluMul(in.gate_up, rows, &out);
    };
  } else {
    // The served pair, then the K/V store the decoder makes after it
    // (sdar_layer_steps.h StoreKv at start 0); cos / sin are already the
    // per-row tables (the decoder builds them once per forward).
    const torch::Tensor cos_rows = in.cos.view({rows, 1, hd}), sin_rows = in.sin.view({rows, 1, hd});
    const torch::Tensor v = in.qkv.narrow(-1, (heads + kv_heads) * hd, kv_heads * hd).view({1, rows, kv_heads, hd});
    served = [&, cos_rows, sin_rows, v] {
      torch::Tensor q, k;
      RunQkNormRope(in.qkv, in.q_norm, in.k_norm, cos_rows, sin_rows, rows, &q, &k);
      in.k_cache.narrow(2, 0, rows).copy_(k.transpose(1, 2));
      in.v_cache.narrow(2, 0, rows).copy_(v.transpose(1, 2));
    };
  }
  const auto [served_us, hand_us] = TimeInterleaved(served, [&] { hand_(in); }, device_);
  return DecideByTimes(group, rows, served_us, hand_us, qk ? "q and k with the K/V store" : "");
}

Status SdarServedGroups::Prepare(int64_t rows) {
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (std::find(prepared_.begin(), prepared_.end(), rows) != prepared_.end()) return Status::Ok();
  }
  bool winner[kNumSdarGroups] = {};
  std::string why[kNumSdarGroups];
  DICE_RETURN_IF_ERROR(RunOnce(rows, winner, why));
  const bool timed = hand_ != nullptr && device_.is_cuda();
  std::vector<ServedDecision> made;  // SdarGroup order
  for (int g = 0; g < kNumSdarGroups; ++g) {
    const SdarGroup group = static_cast<SdarGroup>(g);
    const std::string where = std::string(SdarGroupName(group)) + " at " + std::to_string(rows) + " rows";
    // q and k are served together (QkNormRope) and timed as one pair.
    const bool qk = group == SdarGroup::kQNormRope || group == SdarGroup::kKNormRope;
    const SdarGroup partner = group == SdarGroup::kQNormRope ? SdarGroup::kKNormRope : SdarGroup::kQNormRope;
    ServedDecision d;
    if (!winner[g]) {
      d.why = "not served (" + why[g] + "); hand-written kernel used";
    } else if (!timed) {
      d.served = true;
      d.why = "served (not compared with the hand-written kernel)";
    } else if (qk && !winner[static_cast<int>(partner)]) {
      d.why = std::string("not served (") + SdarGroupName(partner) +
              " has no winner and the two are served together); hand-written kernel used";
    } else if (group == SdarGroup::kKNormRope) {
      d = made[static_cast<int>(SdarGroup::kQNormRope)];  // the pair's one timing
    } else {
      try {
        d = Compare(group, rows);
      } catch (const c10::Error& e) {
        return Status(StatusCode::kInternal,
                      "SdarServedGroups: timing " + where + " against the hand-written kernel: " +
                          e.what_without_backtrace());
      }
    }
    d.group = group;
    d.rows = rows;
    d.winner = winner[g];
    if (!d.served) std::fprintf(stderr, "dice sdar: %s: %s\n", where.c_str(), d.why.c_str());
    made.push_back(std::move(d));
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (std::find(prepared_.begin(), prepared_.end(), rows) != prepared_.end()) return Status::Ok();
  prepared_.push_back(rows);
  for (auto& d : made) {
    if (d.served) served_[static_cast<int>(d.group)].push_back(rows);
    decisions_.push_back(std::move(d));
  }
  return Status::Ok();
}

bool SdarServedGroups::Serves(SdarGroup group, int64_t rows) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  const auto& v = served_[static_cast<int>(group)];
  return std::find(v.begin(), v.end(), rows) != v.end();
}

std::vector<std::string> SdarServedGroups::notes() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& d : decisions_) {
    out.push_back(std::string(SdarGroupName(d.group)) + " at " + std::to_string(d.rows) + " rows: " + d.why);
  }
  return out;
}

std::vector<ServedDecision> SdarServedGroups::decisions() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return decisions_;
}

bool SdarServedGroups::Fits(const torch::Tensor& t, int64_t row_len, int64_t* rows) const {
  if (!t.defined() || t.dim() < 1 || t.size(-1) != row_len || t.scalar_type() != dtype_ || !t.is_cuda() ||
      !t.is_contiguous() || !Aligned(t)) {
    return false;
  }
  *rows = t.numel() / row_len;
  return true;
}

bool SdarServedGroups::AddRmsNorm(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& w,
                                  torch::Tensor* sum, torch::Tensor* norm) const {
  const SdarGroup group = delta.defined() ? SdarGroup::kAddRmsNorm : SdarGroup::kRmsNorm;
  int64_t rows = 0;
  if (!Fits(x, config_.hidden_size, &rows) || !Serves(group, rows) || !w.is_contiguous() || !Aligned(w)) return false;
  if (delta.defined() && (!delta.is_contiguous() || !Aligned(delta) || delta.sizes() != x.sizes() ||
                          delta.scalar_type() != dtype_)) {
    return false;
  }
  RunAddRmsNorm(x, delta, w, rows, sum, norm);
  return true;
}

void SdarServedGroups::RunAddRmsNorm(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& w,
                                     int64_t rows, torch::Tensor* sum, torch::Tensor* norm) const {
  const int64_t hidden = config_.hidden_size;
  const SdarGroup group = delta.defined() ? SdarGroup::kAddRmsNorm : SdarGroup::kRmsNorm;
  std::vector<torch::Tensor> inputs{x.view({rows, hidden})};
  if (delta.defined()) inputs.push_back(delta.view({rows, hidden}));
  inputs.push_back(w);
  auto outs = torch_ext::RunGroup(ir_text_[static_cast<int>(group)], inputs);
  TORCH_CHECK(outs.ok(), "dice sdar: served ", SdarGroupName(group), ": ", outs.status().ToString());
  if (delta.defined()) {
    *sum = (*outs)[0].view(x.sizes());
    *norm = (*outs)[1].view(x.sizes());
  } else {
    *norm = (*outs)[0].view(x.sizes());
  }
}

bool SdarServedGroups::SiluMul(const torch::Tensor& gate_up, torch::Tensor* out) const {
  int64_t rows = 0;
  if (!Fits(gate_up, 2 * config_.intermediate_size, &rows) || !Serves(SdarGroup::kSiluMul, rows)) return false;
  RunSiluMul(gate_up, rows, out);
  return true;
}

void SdarServedGroups::RunSiluMul(const torch::Tensor& gate_up, int64_t rows, torch::Tensor* out) const {
  const int64_t inter = config_.intermediate_size;
  auto outs = torch_ext::RunGroup(ir_text_[static_cast<int>(SdarGroup::kSiluMul)],
                                  {gate_up.view({rows, 2, inter}), sel_gate_, sel_up_});
  TORCH_CHECK(outs.ok(), "dice sdar: served silu_mul: ", outs.status().ToString());
  auto sizes = gate_up.sizes().vec();
  sizes.back() = inter;
  *out = (*outs)[0].view(sizes);
}

bool SdarServedGroups::QkNormRope(const torch::Tensor& qkv, const torch::Tensor& q_norm, const torch::Tensor& k_norm,
                                  const torch::Tensor& cos, const torch::Tensor& sin, torch::Tensor* q,
                                  torch::Tensor* k) const {
  const int64_t heads = config_.num_attention_heads, kv_heads = config_.num_key_value_heads, hd = config_.head_dim;
  int64_t rows = 0;
  if (!Fits(qkv, (heads + 2 * kv_heads) * hd, &rows) || qkv.dim() != 3 || !Serves(SdarGroup::kQNormRope, rows) ||
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
  RunQkNormRope(qkv, q_norm, k_norm, cos, sin, rows, q, k);
  return true;
}

void SdarServedGroups::RunQkNormRope(const torch::Tensor& qkv, const torch::Tensor& q_norm,
                                     const torch::Tensor& k_norm, const torch::Tensor& cos, const torch::Tensor& sin,
                                     int64_t rows, torch::Tensor* q, torch::Tensor* k) const {
  const int64_t heads = config_.num_attention_heads, kv_heads = config_.num_key_value_heads, hd = config_.head_dim;
  auto heads_of = qkv.view({rows, heads + 2 * kv_heads, hd});
  const std::string& text = ir_text_[static_cast<int>(SdarGroup::kQNormRope)];  // the same IR as kKNormRope
  auto qo = torch_ext::RunGroup(text, {heads_of.narrow(1, 0, heads).contiguous(), q_norm, cos, sin});
  TORCH_CHECK(qo.ok(), "dice sdar: served qk_norm_rope.q: ", qo.status().ToString());
  auto ko = torch_ext::RunGroup(text, {heads_of.narrow(1, heads, kv_heads).contiguous(), k_norm, cos, sin});
  TORCH_CHECK(ko.ok(), "dice sdar: served qk_norm_rope.k: ", ko.status().ToString());
  *q = (*qo)[0].view({qkv.size(0), qkv.size(1), heads, hd});
  *k = (*ko)[0].view({qkv.size(0), qkv.size(1), kv_heads, hd});
}

std::shared_ptr<SdarServedGroups> ServeSdarGroups(const SdarConfig& config, const SdarModelOptions& options,
                                                  HandKernelLaunch hand) {
  // DICE_SDAR_SERVE_GROUPS=1 turns the option on for every model built in
  // the process (benchmarks, the CLI), as DICE_SDAR_GEMV does for the GEMVs.
  if (!options.serve_groups && EnvInt("DICE_SDAR_SERVE_GROUPS", 0, 0, 1) == 0) return nullptr;
  auto refuse = [](const std::string& why) -> std::shared_ptr<SdarServedGroups> {
    std::fprintf(stderr, "dice sdar: served fusion groups off, hand-written kernels used: %s\n", why.c_str());
    return nullptr;
  };
  if (!options.device.is_cuda()) return refuse("not a CUDA device (" + options.device.str() + ")");
  if (hand == nullptr) return refuse("the fused elementwise kernels are off (SdarModel::fused_elementwise_note)");
  // DICE_SDAR_SERVE_FORCE=1: every winner served, not timed against the
  // hand-written kernels (tests of the served numerics, benchmarks).
  if (EnvInt("DICE_SDAR_SERVE_FORCE", 0, 0, 1) == 1) {
    std::fprintf(stderr, "dice sdar: DICE_SDAR_SERVE_FORCE=1: served groups not compared with the hand-written "
                         "kernels\n");
    hand = nullptr;
  }
  auto created = SdarServedGroups::Create(config, options.dtype, options.device, std::move(hand));
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
