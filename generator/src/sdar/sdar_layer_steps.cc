// The steps of SdarModel::RunLayers (sdar_layer_steps.h): eager projections,
// MLP activation and SDPA attention, the KV cache store, and the fused
// elementwise kernel calls. No spdlog/fmt here: LibTorch bundles its own fmt.
#include "sdar_layer_steps.h"

#include <c10/cuda/CUDAStream.h>

#include <cmath>

namespace dice::generator::sdar_layers {

void CheckLaunch(const Status& s) { TORCH_CHECK(s.ok(), s.ToString()); }

const void* Ptr(const torch::Tensor& t) { return t.data_ptr(); }

bool FusedCacheWritable(const torch::Tensor& kc, const torch::Tensor& vc, int64_t kv_heads, int64_t capacity,
                        int64_t head_dim, const torch::Tensor& x, const torch::Tensor& slots, int64_t len) {
  for (const auto* t : {&kc, &vc}) {
    if (!t->is_contiguous() || t->dim() != 4 || t->size(0) != x.size(0) || t->size(1) != kv_heads ||
        t->size(2) != capacity || t->size(3) != head_dim || t->scalar_type() != x.scalar_type() ||
        t->device() != x.device()) {
      return false;
    }
  }
  if (!slots.defined()) return true;
  return slots.dim() == 1 && slots.size(0) == len && slots.scalar_type() == torch::kLong && slots.is_contiguous() &&
         slots.device() == x.device();
}

torch::Tensor RotateHalf(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

void ProjectQkv(const torch::Tensor& a, const torch::Tensor& qkv_proj, const torch::Tensor& q_proj,
                const torch::Tensor& k_proj, const torch::Tensor& v_proj, bool fused, int64_t heads, int64_t kv_heads,
                int64_t hd, torch::Tensor* qp, torch::Tensor* kp, torch::Tensor* vp) {
  if (fused) {
    // One GEMM; its column slices split the last dim only, so view works.
    auto qkv = torch::linear(a, qkv_proj);
    *qp = qkv.narrow(-1, 0, heads * hd);
    *kp = qkv.narrow(-1, heads * hd, kv_heads * hd);
    *vp = qkv.narrow(-1, (heads + kv_heads) * hd, kv_heads * hd);
  } else {
    *qp = torch::linear(a, q_proj), *kp = torch::linear(a, k_proj), *vp = torch::linear(a, v_proj);
  }
}

void StoreKv(torch::Tensor& kc, torch::Tensor& vc, const torch::Tensor& k, const torch::Tensor& v,
             const torch::Tensor& slots, int64_t start, int64_t len, bool kv_written) {
  // New keys/values go into the slots after the committed prefix: scratch
  // for a denoising step, the prefix itself once committed. The static
  // (graph) form names the slots by a device index tensor instead.
  if (kv_written) {
    // QkNormRope stored them.
  } else if (slots.defined()) {
    kc.index_copy_(2, slots, k);
    vc.index_copy_(2, slots, v);
  } else {
    kc.narrow(2, start, len).copy_(k);
    vc.narrow(2, start, len).copy_(v);
  }
}

torch::Tensor SdpaAttention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                            const std::optional<torch::Tensor>& mask, bool graph_form, int64_t batch, int64_t len,
                            int64_t heads, int64_t kv_heads, int64_t hd, const torch::Tensor& folded_mask) {
  torch::Tensor o;
  if (graph_form && heads != kv_heads && mask.has_value()) {
    // The fixed-shape (graph) form always has a mask, and SDPA's masked
    // kernels may not take GQA (falling back to one that materialises
    // every KV head g times). Query heads h*g .. h*g+g-1 share KV head h,
    // so fold them into the query length: [B, kv, g*L, hd] against the
    // KV heads as they are, the mask repeated per folded head (a mask row
    // depends on the query position only). Exact: rows are independent.
    const int64_t g = heads / kv_heads;
    auto folded = q.reshape({batch, kv_heads, g * len, hd});
    const torch::Tensor m = folded_mask.defined() ? folded_mask : mask->repeat({g, 1});
    o = at::scaled_dot_product_attention(folded, keys, values, m, 0.0, /*is_causal=*/false,
                                         /*scale=*/1.0 / std::sqrt(static_cast<double>(hd)));
    o = o.reshape({batch, heads, len, hd});
  } else {
    o = at::scaled_dot_product_attention(q, keys, values, mask, 0.0, /*is_causal=*/false,
                                         /*scale=*/1.0 / std::sqrt(static_cast<double>(hd)),
                                         /*enable_gqa=*/heads != kv_heads);
  }
  return o;
}

torch::Tensor FoldedMask(const std::optional<torch::Tensor>& mask, bool graph_form, int64_t heads, int64_t kv_heads) {
  if (!graph_form || heads == kv_heads || !mask.has_value()) return torch::Tensor();
  return mask->repeat({heads / kv_heads, 1});
}

torch::Tensor EagerMlpActivation(const torch::Tensor& m, const torch::Tensor& gate_up_proj,
                                 const torch::Tensor& gate_proj, const torch::Tensor& up_proj, bool fused,
                                 int64_t inter) {
  torch::Tensor act;
  if (fused) {
    auto gu = torch::linear(m, gate_up_proj);
    act = torch::silu(gu.narrow(-1, 0, inter)) * gu.narrow(-1, inter, inter);
  } else {
    act = torch::silu(torch::linear(m, gate_proj)) * torch::linear(m, up_proj);
  }
  return act;
}

torch::Tensor FusedLayerCalls::Gemv(SdarGemv which, const torch::Tensor& in, const torch::Tensor& w) const {
  if (!skinny || !w.is_contiguous()) return torch::Tensor();
  const int64_t n = which == SdarGemv::kGateUp ? w.size(0) / 2 : w.size(0);
  auto src = in.contiguous();
  auto out = torch::empty({batch, len, n}, x.options());
  if (!fused->Gemv(which, Ptr(src), Ptr(w), out.data_ptr(), rows, stream).ok()) return torch::Tensor();
  return out;
}

void FusedLayerCalls::AddNorm(const torch::Tensor& d, const torch::Tensor& w, torch::Tensor* sum,
                              torch::Tensor* norm) const {
  if (served != nullptr && served->AddRmsNorm(x, d, w, sum, norm)) return;
  *norm = torch::empty_like(x);
  if (d.defined()) *sum = torch::empty_like(x);
  CheckLaunch(fused->AddRmsNorm(Ptr(x), d.defined() ? Ptr(d) : nullptr, Ptr(w),
                                d.defined() ? sum->data_ptr() : nullptr, norm->data_ptr(), rows, stream));
}

torch::Tensor FusedLayerCalls::GateUpActivation(const torch::Tensor& m, const torch::Tensor& gate_up_proj,
                                                int64_t inter) const {
  auto act = Gemv(SdarGemv::kGateUp, m, gate_up_proj);
  if (!act.defined()) {
    auto gu = torch::linear(m, gate_up_proj).contiguous();
    if (served == nullptr || !served->SiluMul(gu, &act)) {
      act = torch::empty({batch, len, inter}, x.options());
      CheckLaunch(fused->SiluMul(Ptr(gu), act.data_ptr(), rows, stream));
    }
  }
  return act;
}

HandKernelLaunch HandKernelsOf(std::shared_ptr<const SdarFusedKernels> fused) {
  if (fused == nullptr) return nullptr;
  return [fused](const SdarTimingInputs& in) {
    const torch::Tensor& any = in.x.defined() ? in.x : in.gate_up.defined() ? in.gate_up : in.qkv;
    void* stream = c10::cuda::getCurrentCUDAStream(any.device().index()).stream();
    const SdarFusedShape& s = fused->shape();
    const int64_t rows = in.rows;
    switch (in.group) {
      case SdarGroup::kRmsNorm:
      case SdarGroup::kAddRmsNorm: {
        const FusedLayerCalls calls{fused.get(), /*served=*/nullptr, in.x, stream, 1, rows, rows, /*skinny=*/false};
        torch::Tensor sum, norm;
        calls.AddNorm(in.delta, in.w, &sum, &norm);
        break;
      }
      case SdarGroup::kSiluMul: {
        auto act = torch::empty({1, rows, s.intermediate}, in.gate_up.options());
        CheckLaunch(fused->SiluMul(Ptr(in.gate_up), act.data_ptr(), rows, stream));
        break;
      }
      default: {
        auto qo = torch::empty({1, rows, s.heads, s.head_dim}, in.qkv.options());
        KvCacheWrite kvw;
        kvw.k_cache = in.k_cache.data_ptr();
        kvw.v_cache = in.v_cache.data_ptr();
        kvw.capacity = in.k_cache.size(2);
        CheckLaunch(fused->QkNormRope(Ptr(in.qkv), Ptr(in.q_norm), Ptr(in.k_norm), Ptr(in.cos), Ptr(in.sin),
                                      qo.data_ptr(), nullptr, rows, rows, stream, &kvw));
        break;
      }
    }
  };
}

}  // namespace dice::generator::sdar_layers
