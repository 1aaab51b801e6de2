// The steps of SdarModel::RunLayers (sdar_model.cc), private to dice_sdar:
// the eager path's q/k/v projections, MLP activation and attention, the KV
// cache store, and the fused elementwise kernel calls of one forward (fk).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "dice/core/status.h"
#include "dice/generator/sdar_fused_kernels.h"
#include "dice/generator/sdar_served_groups.h"

namespace dice::generator::sdar_layers {

// Throws (as LibTorch does) when a fused launch fails: RunLayers' callers
// turn c10::Error into kInternal.
void CheckLaunch(const Status& s);

const void* Ptr(const torch::Tensor& t);

// Whether QkNormRope can store layer i's new keys/values into `cache`
// itself: both tensors contiguous [batch, kv_heads, capacity, head_dim] of
// x's dtype on x's device, and the slots (graph form) a contiguous int64
// [len] tensor there. Otherwise RunLayers copies them as the unfused path does.
bool FusedCacheWritable(const torch::Tensor& kc, const torch::Tensor& vc, int64_t kv_heads, int64_t capacity,
                        int64_t head_dim, const torch::Tensor& x, const torch::Tensor& slots, int64_t len);

torch::Tensor RotateHalf(const torch::Tensor& x);

// The eager path's projections of the normed input a, [B, L, n * head_dim]
// each: one GEMM (fused) sliced by columns, else q_proj, k_proj, v_proj.
void ProjectQkv(const torch::Tensor& a, const torch::Tensor& qkv_proj, const torch::Tensor& q_proj,
                const torch::Tensor& k_proj, const torch::Tensor& v_proj, bool fused, int64_t heads, int64_t kv_heads,
                int64_t hd, torch::Tensor* qp, torch::Tensor* kp, torch::Tensor* vp);

// Stores one layer's new keys/values k, v [B, kv_heads, L, head_dim] into its
// cache tensors kc, vc: nothing when QkNormRope stored them (kv_written), at
// the device index `slots` (graph form) when defined, else at start .. start+L-1.
void StoreKv(torch::Tensor& kc, torch::Tensor& vc, const torch::Tensor& k, const torch::Tensor& v,
             const torch::Tensor& slots, int64_t start, int64_t len, bool kv_written);

// Attention by LibTorch's SDPA: o [B, heads, L, head_dim] of q against keys
// and values [B, kv_heads, key_len, head_dim]. The graph form (graph_form:
// slots defined) with GQA and a mask folds the query heads of one KV head
// into the query length; it then reads `folded_mask` (FoldedMask, made
// once per forward) when defined, else repeats the mask itself.
torch::Tensor SdpaAttention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                            const std::optional<torch::Tensor>& mask, bool graph_form, int64_t batch, int64_t len,
                            int64_t heads, int64_t kv_heads, int64_t hd,
                            const torch::Tensor& folded_mask = torch::Tensor());

// The mask [L, key_len] repeated once per query head of a KV head ([g L,
// key_len]), as SdpaAttention's folded graph form reads it; undefined when
// that form does not apply (no mask, no GQA, not the graph form).
torch::Tensor FoldedMask(const std::optional<torch::Tensor>& mask, bool graph_form, int64_t heads, int64_t kv_heads);

// The eager path's MLP activation silu(gate) * up of the normed m: one
// gate/up GEMM (fused) sliced at `inter`, else gate_proj and up_proj.
torch::Tensor EagerMlpActivation(const torch::Tensor& m, const torch::Tensor& gate_up_proj,
                                 const torch::Tensor& gate_proj, const torch::Tensor& up_proj, bool fused,
                                 int64_t inter);

// The fused elementwise kernels (sdar_fused_kernels.h) and served groups
// (sdar_served_groups.h) as one RunLayers call launches them on `stream`;
// `x` is that call's running hidden state, read when each is called.
struct FusedLayerCalls {
  const SdarFusedKernels* fused;
  const SdarServedGroups* served;  // null: the hand-written kernels only
  const torch::Tensor& x;
  void* stream;
  int64_t batch, len, rows;
  // The skinny GEMMs serve this forward (a step forward of at most 16 rows).
  bool skinny;

  // The skinny GEMMs (SdarFusedKernels::Gemv): out [batch, len, N] of in
  // [batch, len, K] and w [N', K] (kGateUp: N = N' / 2, silu(gate) * up);
  // undefined when they cannot serve it (the caller then runs torch::linear).
  torch::Tensor Gemv(SdarGemv which, const torch::Tensor& in, const torch::Tensor& w) const;
  // *norm = w * RMSNorm(x + d) and *sum = x + d (d undefined: RMSNorm(x)),
  // by the served group (sdar_served_groups.h) when the runtime serves it at
  // these rows, else by the hand-written kernel.
  void AddNorm(const torch::Tensor& d, const torch::Tensor& w, torch::Tensor* sum, torch::Tensor* norm) const;
  // silu(gate) * up [batch, len, inter] of the normed m: the skinny gate/up
  // GEMM writes it itself; else torch::linear, then the served group or the
  // hand-written kernel.
  torch::Tensor GateUpActivation(const torch::Tensor& m, const torch::Tensor& gate_up_proj, int64_t inter) const;
};

// The hand-written kernels as the decoder launches them when a group is not
// served, for SdarServedGroups' comparison (sdar_served_groups.h
// HandKernelLaunch): the norms through FusedLayerCalls::AddNorm without a
// served table, silu_mul as GateUpActivation's fallback, q/k as RunLayers'
// direct form (one launch that also stores K/V into the cache). Null when
// `fused` is (the kernels did not load). The launcher keeps `fused` alive.
HandKernelLaunch HandKernelsOf(std::shared_ptr<const SdarFusedKernels> fused);

}  // namespace dice::generator::sdar_layers
