// Private: the "attention" capture pass (issue 18 item 3). On a frozen,
// inlined TorchScript forward graph it finds attention written out op by op,
//   s = matmul(q, transpose(k, -2, -1))
//   s = s * c  |  s / c                       (optional; c a float scalar, or
//                                              the constant one-element tensor
//                                              torch.jit.trace makes of one)
//   s = masked_fill(s, m, -inf)  |  s + a     (optional; m bool, a a float tensor)
//   p = softmax(s, -1)                         (dtype None)
//   p = dropout(p, _, False)                   (optional; eval mode)
//   y = matmul(p, v)
// and replaces it with one aten::scaled_dot_product_attention(q, k, v,
// attn_mask, 0.0, False, scale=c | 1/c | 1.0), whose backends (flash,
// memory-efficient, cuDNN) never write the score matrix to memory. The
// rewrite is exact up to rounding (SDPA computes softmax(q kᵀ·scale + mask) v):
// the bool mask becomes logical_not(m) (SDPA keeps True), the scale must
// come before the mask, q, k and v must have the same known rank (3 or 4)
// and floating dtype, and every intermediate (the scores, the softmax) must
// have no other use. One difference: a row masked entirely gives NaN unfused
// and zeros in SDPA's math backend (PyTorch >= 2.5).
// A causal mask, `tril[..., :T, :T] == 0` of a constant tril(ones(n, n))
// buffer, or an added `bias[..., :T, :T]` of a constant
// full((n, n), -inf).triu(1) (or the constant either slice folds to),
// observed with L == S == T,
// becomes no mask and is_causal = (q.size(-2) == k.size(-2)): the same
// values whenever T follows the query length, and a form every fused SDPA
// kernel takes (flash and cuDNN take no bool mask). Should the key length
// differ from the query length at run time, T = 1 was the only shape eager
// accepted (a [1, 1] mask of False), and is_causal is false there too.
// What it leaves alone: nodes in sub-blocks, in-place forms, a mask fill
// other than -inf (e.g. -1e9: SDPA's bool mask means -inf), a scale applied
// after an additive mask, a non-constant Tensor scale; each such match is reported in
// `skipped` with the reason.
//
// The choice (RunAttentionStep) is measured like the memory format's: the
// forward is timed both ways on CUDA example inputs (round-robin, CUDA
// events) and SDPA is kept only when >= 2% faster.
// Thread-compatible: mutates the graph it is given.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "dice/core/status.h"
#include "dice/torch_ext/optimize.h"
#include "sdpa_backend.h"

namespace torch::jit {
struct Graph;
}  // namespace torch::jit

namespace dice::torch_ext {

/// What RewriteAttentionToSdpa did to a graph.
struct AttentionPassResult {
  int rewritten = 0;                 ///< attention chains replaced by scaled_dot_product_attention
  int masked = 0;                    ///< of those, with a mask (bool or additive)
  int causal = 0;                    ///< of the masked, causal masks written as is_causal (bool or additive)
  std::vector<std::string> skipped;  ///< one line per chain left unfused, with the reason
};

/// Rewrites every matching attention chain of `graph`'s top-level block (see
/// the file comment). Ranks and dtypes come from the values' TensorTypes
/// (complete after ObserveTypes); a chain with an unknown rank or dtype is
/// skipped. The SDPA value takes the type of the matmul it replaces. A graph
/// without a match is left unchanged. Throws c10::Error / std::exception on
/// a PyTorch error (the caller applies it to a copy first).
AttentionPassResult RewriteAttentionToSdpa(const std::shared_ptr<torch::jit::Graph>& graph);

/// The measured rule of AttentionMode::kAuto: SDPA is kept only when its
/// median is at least 2% below the unfused one (sdpa_us <= 0.98 ×
/// unfused_us). A time that is not positive (not measured) keeps the
/// unfused graph. Pure; µs.
bool KeepsSdpa(double unfused_us, double sdpa_us);

/// What RunAttentionStep chose (copied into OptimizeReport).
struct AttentionOutcome {
  std::string choice = "unfused";  ///< "unfused" or "sdpa"
  std::string reason;              ///< one line: measured times, forced, not measured, no match
  double unfused_us = 0;           ///< median µs of the forward as is; 0 = not timed
  double sdpa_us = 0;              ///< median µs with the chains rewritten; 0 = not timed
  AttentionPassResult pass;        ///< what the pass did (or would do, when not kept)
  SdpaBackendOutcome backend;      ///< the SDPA backend step (auto mode with CUDA inputs)
};

/// The attention step of optimize(): kUnfused leaves the graph; kSdpa
/// rewrites every chain unmeasured (PyTorch's dispatcher picks the kernel);
/// kAuto, when `inputs` (self first) hold a CUDA tensor, rewrites the chains
/// on a copy, picks the copy's SDPA backend (ChooseSdpaBackend), checks the
/// copy against the unfused forward when the outputs are float32
/// (CheckForwardAgainstReference; in float16/bfloat16 the unfused chain
/// rounds the scores before the softmax, so it is the less exact one and
/// is no reference: docs/DECISIONS.md), and keeps it only when it times
/// >= 2% faster (TimeGraphsRoundRobin: 3 warmup runs, median of 10);
/// otherwise it leaves the graph, saying why. A graph without a chain but
/// with the model's own scaled_dot_product_attention calls gets the backend
/// step alone (kAuto). The graph changes only after the pass has succeeded
/// on a copy.
/// Errors: a timing run's error (kInvalidArgument); the graph is unchanged.
Expected<AttentionOutcome> RunAttentionStep(const std::shared_ptr<torch::jit::Graph>& graph, AttentionMode requested,
                                            const std::vector<c10::IValue>& inputs);

}  // namespace dice::torch_ext
