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

namespace torch::jit {
struct Graph;
}  // namespace torch::jit

namespace dice::torch_ext {

/// What RewriteAttentionToSdpa did to a graph.
struct AttentionPassResult {
  int rewritten = 0;                 ///< attention chains replaced by scaled_dot_product_attention
  int masked = 0;                    ///< of those, with a mask (bool or additive)
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
};

/// The attention step of optimize(): kUnfused leaves the graph; kSdpa
/// rewrites every chain unmeasured; kAuto rewrites them only when `inputs`
/// (self first) hold a CUDA tensor and the rewritten forward times >= 2%
/// faster (TimeGraphsRoundRobin: 3 warmup runs, median of 10), and otherwise
/// leaves the graph, saying why. The graph changes only after the pass has
/// succeeded on a copy.
/// Errors: a timing run's error (kInvalidArgument); the graph is unchanged.
Expected<AttentionOutcome> RunAttentionStep(const std::shared_ptr<torch::jit::Graph>& graph, AttentionMode requested,
                                            const std::vector<c10::IValue>& inputs);

}  // namespace dice::torch_ext
