// The DICE training objectives: see dice/training/losses.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/training/losses.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "dice/generator/sdar_model.h"

namespace dice::training {
namespace {

Status Invalid(const std::string& message) { return Status(StatusCode::kInvalidArgument, message); }

std::string Shape(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace

PackedLayout BlockDiffusionLayout(int64_t length, int64_t block_size, torch::Device device) {
  auto i64 = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto pos = torch::arange(length, i64);
  auto block = pos.div(block_size, "floor");
  // x0 half: the model's block-causal mask.
  auto clean = generator::BlockCausalMask(pos, pos, block_size);
  // x_t half: its own block among the noised tokens, earlier blocks among the clean ones.
  auto same_block = block.unsqueeze(1).eq(block.unsqueeze(0));
  auto earlier_block = block.unsqueeze(0).lt(block.unsqueeze(1));
  auto none = torch::zeros({length, length}, torch::TensorOptions().dtype(torch::kBool).device(device));
  auto top = torch::cat({same_block, earlier_block}, 1);
  auto bottom = torch::cat({none, clean}, 1);
  return {torch::cat({pos, pos}), torch::cat({top, bottom}, 0)};
}

NoisedBatch NoiseResponseBlocks(const torch::Tensor& tokens, const torch::Tensor& response, int64_t block_size,
                                int64_t mask_token_id, std::optional<at::Generator> generator, double eps) {
  const int64_t batch = tokens.size(0), len = tokens.size(1);
  const int64_t blocks = (len + block_size - 1) / block_size;
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(tokens.device());
  auto u_block = torch::rand({batch, blocks}, generator, f32);
  auto t_block = eps + (1.0 - eps) * u_block;
  auto t = t_block.repeat_interleave(block_size, 1).narrow(1, 0, len);
  auto u = torch::rand({batch, len}, generator, f32);
  auto masked = u.lt(t).logical_and(response);
  NoisedBatch out;
  out.noised = torch::where(masked, torch::full_like(tokens, mask_token_id), tokens);
  out.masked = masked;
  out.t = torch::where(response, t, torch::ones_like(t));
  return out;
}

Expected<torch::Tensor> BlockDiffusionLoss(const torch::Tensor& logits, const torch::Tensor& targets,
                                           const torch::Tensor& masked, const torch::Tensor& t,
                                           const torch::Tensor& response) {
  if (logits.dim() != 3 || targets.dim() != 2 || logits.size(0) != targets.size(0) ||
      logits.size(1) != targets.size(1) || !masked.sizes().equals(targets.sizes()) ||
      !t.sizes().equals(targets.sizes()) || !response.sizes().equals(targets.sizes())) {
    return Invalid("BlockDiffusionLoss: logits " + Shape(logits) + " must be [B, L, V] and targets " +
                   Shape(targets) + ", masked " + Shape(masked) + ", t " + Shape(t) + ", response " +
                   Shape(response) + " all [B, L]");
  }
  const int64_t vocab = logits.size(2);
  auto ce = torch::nn::functional::cross_entropy(
                logits.reshape({-1, vocab}).to(torch::kFloat32), targets.reshape({-1}).to(torch::kLong),
                torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
                .view(targets.sizes());
  auto weighted = torch::where(masked, ce / t.to(torch::kFloat32), torch::zeros_like(ce));
  auto n = response.sum().to(torch::kFloat32).clamp_min(1.0);
  return weighted.sum() / n;
}

std::optional<std::vector<double>> GroupAdvantages(const std::vector<double>& rewards) {
  if (rewards.empty()) return std::nullopt;
  const auto [lo, hi] = std::minmax_element(rewards.begin(), rewards.end());
  if (*lo == *hi) return std::nullopt;
  const double n = static_cast<double>(rewards.size());
  const double mean = std::accumulate(rewards.begin(), rewards.end(), 0.0) / n;
  double var = 0;
  for (double r : rewards) var += (r - mean) * (r - mean);
  const double sd = std::sqrt(var / n);
  std::vector<double> a;
  for (double r : rewards) a.push_back((r - mean) / (sd + 1e-6));
  return a;
}

namespace {

Status CheckTrace(const RolloutTrace& trace, int64_t block_size) {
  if (trace.prompt.empty()) return Invalid("PackTrace: the prompt is empty");
  if (trace.tokens.size() != trace.steps.size()) {
    return Invalid("PackTrace: " + std::to_string(trace.tokens.size()) + " tokens but " +
                   std::to_string(trace.steps.size()) + " steps");
  }
  const int64_t P = static_cast<int64_t>(trace.prompt.size());
  const int64_t N = P + static_cast<int64_t>(trace.tokens.size());
  if (N % block_size != 0) {
    return Invalid("PackTrace: prompt (" + std::to_string(P) + ") + tokens (" + std::to_string(N - P) +
                   ") is not a whole number of blocks of " + std::to_string(block_size));
  }
  for (size_t j = 0; j < trace.steps.size(); ++j) {
    if (trace.steps[j] < 0) {
      return Invalid("PackTrace: token " + std::to_string(j) + " has step " + std::to_string(trace.steps[j]));
    }
  }
  return Status::Ok();
}

// Copies of block b: one per denoising step it took (its largest step + 1).
int64_t CopiesOfBlock(const RolloutTrace& trace, int64_t block_size, int64_t b) {
  const int64_t P = static_cast<int64_t>(trace.prompt.size());
  int32_t max_step = -1;
  for (int64_t j = std::max(P, b * block_size); j < (b + 1) * block_size; ++j) {
    max_step = std::max(max_step, trace.steps[j - P]);
  }
  return max_step + 1;
}

// The clean sequence up to the end of block `last`, then the copies of
// blocks first..last. A copy sees only clean keys of earlier blocks and
// itself, so the clean tokens after `last` change none of its logits.
PackedTrace PackBlocks(const RolloutTrace& trace, int64_t block_size, int64_t mask_token_id, int64_t first,
                       int64_t last, torch::Device device) {
  const int64_t P = static_cast<int64_t>(trace.prompt.size());
  const int64_t clean_end = (last + 1) * block_size;
  std::vector<int64_t> ids, pos, owner;  // owner: -1 = clean, else copy index
  int64_t copies = 0;
  std::vector<int64_t> scored, targets;
  for (int64_t j = 0; j < clean_end; ++j) {
    ids.push_back(j < P ? trace.prompt[j] : trace.tokens[j - P]);
    pos.push_back(j);
    owner.push_back(-1);
  }
  for (int64_t b = first; b <= last; ++b) {
    const int64_t n_copies = CopiesOfBlock(trace, block_size, b);
    for (int32_t k = 0; k < n_copies; ++k) {
      const int64_t copy = copies++;
      for (int64_t j = b * block_size; j < (b + 1) * block_size; ++j) {
        const bool response = j >= P;
        const int32_t s = response ? trace.steps[j - P] : -1;
        if (response && s == k) {
          scored.push_back(static_cast<int64_t>(ids.size()));
          targets.push_back(trace.tokens[j - P]);
        }
        ids.push_back(!response || s < k ? ids[j] : mask_token_id);
        pos.push_back(j);
        owner.push_back(copy);
      }
    }
  }
  auto i64 = torch::TensorOptions().dtype(torch::kLong);
  PackedTrace out;
  auto p = torch::tensor(pos, i64);
  auto own = torch::tensor(owner, i64);
  auto block = p.div(block_size, "floor");
  auto is_clean_q = own.eq(-1).unsqueeze(1), is_clean_k = own.eq(-1).unsqueeze(0);
  auto causal = generator::BlockCausalMask(p, p, block_size);
  // clean -> clean: block-causal; copy -> clean keys of earlier blocks; copy -> itself.
  auto clean_clean = is_clean_q.logical_and(is_clean_k).logical_and(causal);
  auto copy_clean = is_clean_q.logical_not().logical_and(is_clean_k).logical_and(
      block.unsqueeze(0).lt(block.unsqueeze(1)));
  auto copy_self = is_clean_q.logical_not().logical_and(own.unsqueeze(1).eq(own.unsqueeze(0)));
  out.mask = clean_clean.logical_or(copy_clean).logical_or(copy_self).to(device);
  out.ids = torch::tensor(ids, i64).unsqueeze(0).to(device);
  out.positions = p.to(device);
  out.scored = torch::tensor(scored, i64).to(device);
  out.targets = torch::tensor(targets, i64).to(device);
  return out;
}

}  // namespace

Expected<PackedTrace> PackTrace(const RolloutTrace& trace, int64_t block_size, int64_t mask_token_id,
                                torch::Device device) {
  DICE_RETURN_IF_ERROR(CheckTrace(trace, block_size));
  const int64_t P = static_cast<int64_t>(trace.prompt.size());
  const int64_t N = P + static_cast<int64_t>(trace.tokens.size());
  return PackBlocks(trace, block_size, mask_token_id, P / block_size, N / block_size - 1, device);
}

Expected<std::vector<PackedTrace>> PackTraceChunks(const RolloutTrace& trace, int64_t block_size,
                                                   int64_t mask_token_id, int64_t max_packed_tokens,
                                                   torch::Device device) {
  DICE_RETURN_IF_ERROR(CheckTrace(trace, block_size));
  const int64_t P = static_cast<int64_t>(trace.prompt.size());
  const int64_t N = P + static_cast<int64_t>(trace.tokens.size());
  const int64_t first_block = P / block_size, end_block = N / block_size;
  if (max_packed_tokens <= 0) return std::vector<PackedTrace>{PackBlocks(trace, block_size, mask_token_id,
                                                                         first_block, end_block - 1, device)};
  std::vector<PackedTrace> chunks;
  int64_t first = first_block, copy_tokens = 0;
  for (int64_t b = first_block; b < end_block; ++b) {
    const int64_t add = CopiesOfBlock(trace, block_size, b) * block_size;
    // Close the chunk before b when b would push it past the cap; a chunk
    // always holds at least one block.
    if (b > first && (b + 1) * block_size + copy_tokens + add > max_packed_tokens) {
      chunks.push_back(PackBlocks(trace, block_size, mask_token_id, first, b - 1, device));
      first = b;
      copy_tokens = 0;
    }
    copy_tokens += add;
  }
  chunks.push_back(PackBlocks(trace, block_size, mask_token_id, first, end_block - 1, device));
  return chunks;
}

torch::Tensor ScoredLogProbs(const torch::Tensor& logits, const torch::Tensor& scored, const torch::Tensor& targets,
                             int64_t mask_token_id) {
  auto rows = logits.select(0, 0).index_select(0, scored).to(torch::kFloat32);  // [T', V]
  auto excluded = torch::zeros({rows.size(1)}, torch::TensorOptions().dtype(torch::kBool).device(rows.device()));
  if (mask_token_id >= 0 && mask_token_id < rows.size(1)) excluded[mask_token_id] = true;
  rows = rows.masked_fill(excluded, -std::numeric_limits<float>::infinity());
  return rows.log_softmax(-1).gather(1, targets.unsqueeze(1)).squeeze(1);
}

Expected<torch::Tensor> TraceRlLoss(const torch::Tensor& logp, const torch::Tensor& logp_old,
                                    const torch::Tensor& logp_ref, const torch::Tensor& advantage, double clip_eps,
                                    double beta) {
  if (logp.dim() != 1 || !logp_old.sizes().equals(logp.sizes()) || !logp_ref.sizes().equals(logp.sizes()) ||
      !advantage.sizes().equals(logp.sizes())) {
    return Invalid("TraceRlLoss: logp " + Shape(logp) + ", logp_old " + Shape(logp_old) + ", logp_ref " +
                   Shape(logp_ref) + ", advantage " + Shape(advantage) + " must all be the same [T]");
  }
  if (!(clip_eps > 0)) return Invalid("TraceRlLoss: clip epsilon must be > 0, got " + std::to_string(clip_eps));
  if (!(beta >= 0)) return Invalid("TraceRlLoss: KL beta must be >= 0, got " + std::to_string(beta));
  if (logp.size(0) == 0) return torch::zeros({}, logp.options().dtype(torch::kFloat32));
  auto lp = logp.to(torch::kFloat32);
  auto a = advantage.to(torch::kFloat32);
  auto ratio = torch::exp(lp - logp_old.to(torch::kFloat32));
  auto surr = torch::minimum(ratio * a, ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * a);
  auto d = logp_ref.to(torch::kFloat32) - lp;
  auto kl = torch::exp(d) - d - 1.0;
  return -(surr - beta * kl).mean();
}

}  // namespace dice::training
