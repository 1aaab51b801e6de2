// dice/training/losses.h — the two training objectives of DICE (arXiv
// 2602.11715) on an SDAR block-diffusion model, and the packed layouts that
// feed them through SdarModel::ForwardPacked.
//
// 1. Block-diffusion masked-token loss (SFT; SDAR / BD3-LM style).
//    A sequence x0 = prompt + response (length L, blocks of block_size B).
//    The prompt is never masked. Each block that holds response tokens draws
//    its own noise level t_b = eps + (1 - eps) u, u ~ U(0, 1) (per block, as
//    SDAR trains; eps = 1e-3 keeps the 1/t weight finite), and each response
//    token in it is replaced by the mask token with probability t_b, giving
//    x_t. The model sees the packed sequence [x_t ; x0] (length 2L, both
//    halves at positions 0..L-1) with the mask
//        x_t query in block b -> x_t keys of block b, x0 keys of blocks < b
//        x0 query in block b  -> x0 keys of blocks <= b (block-causal)
//    so each noised block is denoised against the clean earlier blocks, as at
//    decoding time. The loss is
//        sum_{masked j} CE(logits_j, x0_j) / t_{b(j)}  /  #response tokens
//    summed over the batch before dividing (a token mean).
//
// 2. TraceRL trajectory loss (BiC-RL). A rollout is recorded as the tokens
//    of each decoded block and the denoising step at which each was revealed
//    (DecodeResult::trace_*). Each step k of block b is rebuilt: the block
//    with the tokens revealed at steps < k filled in and the others masked,
//    seen against the prompt and the clean earlier blocks; the tokens
//    revealed at step k are scored there. Per scored token, with log-probs
//    under the policy (logp), the rollout policy (logp_old) and a frozen
//    reference (logp_ref), and the rollout's advantage A:
//        ratio = exp(logp - logp_old)
//        surr  = min(ratio A, clip(ratio, 1 - clip_eps, 1 + clip_eps) A)
//        kl    = exp(logp_ref - logp) - (logp_ref - logp) - 1     (k3)
//        loss  = -mean over scored tokens of (surr - beta kl)
//    Advantages are group-normalised over the G rollouts of one task:
//    A_i = (r_i - mean r) / (std r + 1e-6) (population std); a group whose
//    rewards are all equal carries no signal and is dropped.
//
// The Python references (plain torch) are tests/training/losses_reference.py;
// tests/training/losses_test.cc checks these functions against its fixture.
// All functions are pure (no state); tensors may live on any one device.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "dice/core/status.h"

namespace dice::training {

/// The attention layout of one packed block-diffusion sequence [x_t ; x0]
/// of length 2L (see the header comment). `positions`: int64 [2L] =
/// 0..L-1, 0..L-1. `mask`: bool [2L, 2L], true = attend. Built from
/// dice::BlockCausalMask (the model's own definition). Device: `device`.
struct PackedLayout {
  torch::Tensor positions;
  torch::Tensor mask;
};
PackedLayout BlockDiffusionLayout(int64_t length, int64_t block_size, torch::Device device = torch::kCPU);

/// One noising draw for a batch (see the header comment).
struct NoisedBatch {
  torch::Tensor noised;  ///< int64 [B, L]: x_t (mask_token_id where masked)
  torch::Tensor masked;  ///< bool [B, L]: true where x_t holds the mask token
  torch::Tensor t;       ///< float32 [B, L]: noise level of each position's block (1 outside the response)
};

/// Draws per-block noise levels and masks for `tokens` (int64 [B, L]) where
/// `response` (bool [B, L]) marks the response (maskable) positions; prompt
/// and padding positions are never masked. Uses `generator` when given
/// (deterministic per seed). REQUIRES tokens and response of the same 2-D
/// shape, block_size >= 1, 0 < eps < 1.
NoisedBatch NoiseResponseBlocks(const torch::Tensor& tokens, const torch::Tensor& response, int64_t block_size,
                                int64_t mask_token_id, std::optional<at::Generator> generator = std::nullopt,
                                double eps = 1e-3);

/// The block-diffusion loss from logits of the noised half: `logits`
/// float [B, L, V], `targets` int64 [B, L] (x0), `masked` bool [B, L],
/// `t` float [B, L] (> 0 where masked), `response` bool [B, L]. Returns a
/// float32 scalar: sum over masked of CE / t, divided by the number of
/// response tokens (0 when there are none). Differentiable in `logits`.
/// Errors: kInvalidArgument when shapes disagree.
Expected<torch::Tensor> BlockDiffusionLoss(const torch::Tensor& logits, const torch::Tensor& targets,
                                           const torch::Tensor& masked, const torch::Tensor& t,
                                           const torch::Tensor& response);

/// Group-normalised advantages of one task's G rollouts (`rewards`, any
/// values). Returns std::nullopt when every reward is equal (the group is
/// dropped: no signal), else A_i = (r_i - mean) / (population std + 1e-6).
std::optional<std::vector<double>> GroupAdvantages(const std::vector<double>& rewards);

/// One recorded rollout: prompt ids, then the decoded block tokens and the
/// 0-based denoising step at which each was revealed (equal lengths; the
/// prompt plus the tokens fill whole blocks). From DecodeResult::trace_*.
struct RolloutTrace {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::vector<int32_t> steps;
};

/// A rollout's denoising states packed into one sequence for
/// SdarModel::ForwardPacked: the clean sequence prompt + tokens (length N,
/// block-causal), then for every block b with response tokens and every
/// step k it took, a copy of block b (B tokens at block b's positions)
/// where response tokens revealed at a step >= k are the mask token; a copy
/// attends to the clean keys of blocks < b and to itself only.
struct PackedTrace {
  torch::Tensor ids;        ///< int64 [1, M]
  torch::Tensor positions;  ///< int64 [M]
  torch::Tensor mask;       ///< bool [M, M]
  torch::Tensor scored;     ///< int64 [T']: indices into the packed sequence of the scored slots
  torch::Tensor targets;    ///< int64 [T']: the token revealed at each scored slot
};
/// Builds a PackedTrace. Errors: kInvalidArgument when tokens/steps lengths
/// differ, prompt + tokens is not a whole number of blocks, a step is < 0,
/// or the prompt is empty.
Expected<PackedTrace> PackTrace(const RolloutTrace& trace, int64_t block_size, int64_t mask_token_id,
                                torch::Device device = torch::kCPU);

/// The same trajectory split into packed sequences of at most
/// `max_packed_tokens` tokens each (<= 0: one sequence, equal to PackTrace),
/// so a long rollout's TraceRL forward fits in memory: chunk c holds the
/// clean sequence up to the end of its last block, then the copies of its
/// blocks. A copy sees only clean keys of earlier blocks and itself, so
/// every scored slot gets the logits it gets in PackTrace; the chunks'
/// scored slots, in order, are PackTrace's. A chunk holds at least one block,
/// so it exceeds the cap only when the clean prefix alone does. (Found on
/// the H200: a 2.4k-token prompt with a 5.7k-token answer packed to ~20k
/// tokens, and the attention of one forward ran out of 140 GB.) Errors: as
/// PackTrace.
Expected<std::vector<PackedTrace>> PackTraceChunks(const RolloutTrace& trace, int64_t block_size,
                                                   int64_t mask_token_id, int64_t max_packed_tokens,
                                                   torch::Device device = torch::kCPU);

/// Log-probabilities (float32 [T']) of `targets` at `scored` slots from
/// packed logits [1, M, V]; the mask token's logit is excluded (it is never
/// decoded). Differentiable in `logits`.
torch::Tensor ScoredLogProbs(const torch::Tensor& logits, const torch::Tensor& scored, const torch::Tensor& targets,
                             int64_t mask_token_id);

/// TraceRL's clipped objective with the k3 KL penalty, as a loss to minimise
/// (see the header comment). All inputs float [T] on one device; `advantage`
/// holds each token's rollout advantage. Returns a float32 scalar (0 when
/// T == 0), differentiable in `logp`. Errors: kInvalidArgument for
/// mismatched sizes, clip_eps <= 0 or beta < 0.
Expected<torch::Tensor> TraceRlLoss(const torch::Tensor& logp, const torch::Tensor& logp_old,
                                    const torch::Tensor& logp_ref, const torch::Tensor& advantage, double clip_eps,
                                    double beta);

}  // namespace dice::training
