// Block-diffusion decoding: see dice/generator/diffusion_decoder.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/generator/diffusion_decoder.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <tuple>
#include <utility>

#include "dice/generator/sdar_step_graph.h"

namespace dice {

// Forward without the token-range check, which would synchronise the device
// at every step: Decode checked the prompt, and every other id it feeds is
// an argmax/sample over the vocabulary.
struct SdarDecodeAccess {
  static Expected<torch::Tensor> Forward(const SdarModel& model, const torch::Tensor& ids, KvCache* cache,
                                         bool commit, bool compute_logits) {
    DICE_RETURN_IF_ERROR(model.CheckForward(ids, cache, commit, /*check_ids=*/false));
    try {
      torch::NoGradGuard no_grad;
      return model.ForwardImpl(ids, cache, commit, compute_logits);
    } catch (const c10::Error& e) {
      return Status(StatusCode::kInternal, std::string("SdarModel::Forward: ") + e.what_without_backtrace());
    }
  }
};

namespace {

Status Invalid(const std::string& message) { return Status(StatusCode::kInvalidArgument, "Decode: " + message); }

at::Generator MakeGenerator(const torch::Device& device, uint64_t seed) {
  at::Generator gen = device.is_cuda() ? at::detail::getCUDAHooks().getNewGenerator(device.index())
                                       : at::make_generator<at::CPUGeneratorImpl>(seed);
  gen.set_current_seed(seed);
  return gen;
}

// Draws one token per position from float32 logits [B, L, V]: returns the
// tokens (int64 [B, L]) and their probabilities (float32 [B, L]) under the
// filtered distribution that was sampled (the confidence).
std::pair<torch::Tensor, torch::Tensor> Draw(torch::Tensor logits, const DecodeOptions& o, at::Generator& gen) {
  const int64_t vocab = logits.size(-1);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (o.temperature > 0) logits = logits / o.temperature;
  if (o.top_k > 0 && o.top_k < vocab) {
    auto kth = std::get<0>(logits.topk(o.top_k, -1)).narrow(-1, o.top_k - 1, 1);
    logits = logits.masked_fill(logits < kth, neg_inf);
  }
  if (o.top_p < 1.0) {
    torch::Tensor sorted, order;
    std::tie(sorted, order) = logits.sort(/*stable=*/true, /*dim=*/-1, /*descending=*/true);
    auto cum = sorted.softmax(-1).cumsum(-1);
    // Remove a token once the mass before it already exceeds top_p; the most
    // likely token always stays.
    auto remove = cum > o.top_p;
    remove = torch::cat({torch::zeros_like(remove.narrow(-1, 0, 1)), remove.narrow(-1, 0, vocab - 1)}, -1);
    logits = logits.masked_fill(torch::zeros_like(remove).scatter(-1, order, remove), neg_inf);
  }
  auto probs = logits.softmax(-1);
  torch::Tensor tokens;
  if (o.temperature > 0) {
    tokens = torch::multinomial(probs.reshape({-1, vocab}), 1, /*replacement=*/false, gen)
                 .view({logits.size(0), logits.size(1)});
  } else {
    tokens = logits.argmax(-1);  // first maximum: ties go to the lowest id
  }
  auto conf = probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1);
  return {tokens, conf};
}

}  // namespace

const char* RemaskingName(Remasking r) { return r == Remasking::kStatic ? "static" : "dynamic"; }

Expected<Remasking> ParseRemasking(const std::string& text) {
  if (text == "static") return Remasking::kStatic;
  if (text == "dynamic") return Remasking::kDynamic;
  return Status(StatusCode::kInvalidArgument, "remasking '" + text + "' is neither 'static' nor 'dynamic'");
}

Expected<DecodeResult> Decode(const SdarModel& model, const std::vector<int32_t>& prompt,
                              const DecodeOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const SdarConfig& c = model.config();
  if (prompt.empty()) return Invalid("the prompt is empty");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= c.vocab_size) {
      return Invalid("prompt token " + std::to_string(i) + " (id " + std::to_string(prompt[i]) +
                     ") outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
    }
    if (prompt[i] == c.mask_token_id) {
      return Invalid("prompt token " + std::to_string(i) + " is the mask token " + std::to_string(c.mask_token_id));
    }
  }
  if (o.max_new_tokens < 1) return Invalid("max_new_tokens must be >= 1, got " + std::to_string(o.max_new_tokens));
  if (o.denoising_steps < 1) return Invalid("denoising_steps must be >= 1, got " + std::to_string(o.denoising_steps));
  if (!(o.temperature >= 0) || std::isinf(o.temperature)) {
    return Invalid("temperature must be finite and >= 0, got " + std::to_string(o.temperature));
  }
  if (o.top_k < 0) return Invalid("top_k must be >= 0, got " + std::to_string(o.top_k));
  if (!(o.top_p > 0 && o.top_p <= 1)) return Invalid("top_p must be in (0, 1], got " + std::to_string(o.top_p));
  if (!(o.confidence_threshold >= 0 && o.confidence_threshold <= 1)) {
    return Invalid("confidence_threshold must be in [0, 1], got " + std::to_string(o.confidence_threshold));
  }
  if (o.num_samples < 1) return Invalid("num_samples must be >= 1, got " + std::to_string(o.num_samples));

  const int64_t bs = c.block_size;
  const int64_t plen = static_cast<int64_t>(prompt.size());
  const int64_t whole = plen / bs * bs;
  const int64_t first_fixed = plen - whole;
  const int64_t max_blocks = (first_fixed + o.max_new_tokens + bs - 1) / bs;
  const int64_t capacity = whole + max_blocks * bs;
  if (capacity > c.max_position_embeddings) {
    return Invalid("prompt of " + std::to_string(plen) + " tokens + max_new_tokens " +
                   std::to_string(o.max_new_tokens) + " (" + std::to_string(capacity) +
                   " positions in whole blocks) exceeds the model's context of " +
                   std::to_string(c.max_position_embeddings) + " (max_position_embeddings)");
  }

  DecodeResult result;
  const int64_t n = o.num_samples;
  result.tokens.assign(n, {});
  result.stopped_at_eos.assign(n, false);
  result.trace_tokens.assign(n, {});
  result.trace_steps.assign(n, {});
  try {
    torch::NoGradGuard no_grad;
    const auto device = model.options().device;
    const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(device);
    // Profile: each mark synchronises and books the time since the last
    // mark to one phase.
    DecodeProfile& prof = result.profile;
    auto last_mark = std::chrono::steady_clock::now();
    auto mark = [&](double& phase) {
      if (!o.profile) return;
      if (device.is_cuda()) torch::cuda::synchronize();
      const auto now = std::chrono::steady_clock::now();
      phase += std::chrono::duration<double>(now - last_mark).count();
      last_mark = now;
    };
    auto cache = model.NewCache(n, capacity);
    if (!cache.ok()) return cache.status();
    auto prompt_ids = torch::tensor(std::vector<int64_t>(prompt.begin(), prompt.end()), torch::kLong)
                          .to(device)
                          .unsqueeze(0)
                          .expand({n, plen});
    mark(prof.setup_s);
    if (whole > 0) {
      auto pre = SdarDecodeAccess::Forward(model, prompt_ids.narrow(1, 0, whole), &*cache, /*commit=*/true,
                                           /*compute_logits=*/false);
      if (!pre.ok()) return pre.status();
      ++result.forward_passes;
    }
    mark(prof.prefill_s);
    std::unique_ptr<SdarStepGraph> graph;
    auto make_graph = [&]() -> Status {
      graph.reset();  // its memory first: the new one may need it
      auto g = SdarStepGraph::Create(model, &*cache);
      if (!g.ok()) return g.status();
      graph = std::move(*g);
      ++prof.captures;
      mark(prof.graph_capture_s);
      return Status::Ok();
    };
    if (o.cuda_graphs) DICE_RETURN_IF_ERROR(make_graph());
    at::Generator gen = MakeGenerator(device, o.seed);
    const float neg_inf = -std::numeric_limits<float>::infinity();
    auto positions = torch::arange(bs, i64).unsqueeze(0);
    std::vector<int64_t> rows(n);  // sample id of each batch row
    for (int64_t i = 0; i < n; ++i) rows[i] = i;
    int64_t generated = 0, n_fixed = first_fixed;
    while (true) {
      const int64_t batch = static_cast<int64_t>(rows.size());
      auto block = torch::full({batch, bs}, c.mask_token_id, i64);
      auto masked = torch::ones({batch, bs}, torch::TensorOptions().dtype(torch::kBool).device(device));
      if (n_fixed > 0) {
        block.narrow(1, 0, n_fixed).copy_(prompt_ids.narrow(0, 0, batch).narrow(1, whole, n_fixed));
        masked.narrow(1, 0, n_fixed).fill_(false);
      }
      auto step_of = torch::full({batch, bs}, -1, i64);
      const int64_t n_masked = bs - n_fixed;
      const int64_t S = o.denoising_steps;
      int64_t steps = 0;
      int64_t still_masked = n_masked;  // static: every row has this many masks left
      for (int64_t s = 0;; ++s) {
        // Static: the schedule finishes the block in min(S, n) steps, known
        // on the host; dynamic asks the device whether masks remain.
        if (o.remasking == Remasking::kStatic ? s >= std::min(S, n_masked) : !masked.any().item<bool>()) break;
        Expected<torch::Tensor> logits =
            graph ? graph->Step(block)
                  : SdarDecodeAccess::Forward(model, block, &*cache, /*commit=*/false, /*compute_logits=*/true);
        if (!logits.ok()) return logits.status();
        ++steps;
        ++prof.step_forwards;
        mark(prof.step_forward_s);
        logits->select(-1, c.mask_token_id).fill_(neg_inf);
        auto [x0, conf] = Draw(*logits, o, gen);
        conf = conf.masked_fill(masked.logical_not(), neg_inf);
        auto order = std::get<1>(conf.sort(/*stable=*/true, /*dim=*/-1, /*descending=*/true));
        const int64_t k_s = std::max<int64_t>(1, n_masked / S + (s < n_masked % S ? 1 : 0));
        torch::Tensor reveal;
        if (o.remasking == Remasking::kStatic) {
          // k is the same for every row and known here: no per-row counts.
          const int64_t k = std::min(k_s, still_masked);
          still_masked -= k;
          reveal = torch::zeros_like(masked).scatter_(1, order.narrow(1, 0, k), true);
        } else {
          auto k = torch::full({batch}, k_s, i64);
          k = torch::maximum(k, (conf > o.confidence_threshold).sum(-1));
          k = torch::minimum(k, masked.sum(-1));
          auto take_sorted = positions < k.unsqueeze(1);  // the first k of the ranking
          reveal = torch::zeros_like(masked).scatter(1, order, take_sorted);
        }
        block = torch::where(reveal, x0, block);
        step_of.masked_fill_(reveal, s);
        masked.logical_and_(reveal.logical_not());
        mark(prof.sampling_s);
      }
      result.steps_per_block.push_back(steps);
      result.denoising_steps += steps;
      result.forward_passes += steps;

      // Collect the block's new tokens and their reveal steps (one read-back);
      // a sample ends at its first EOS.
      const int64_t width = bs - n_fixed;
      auto host = torch::cat({block.narrow(1, n_fixed, width), step_of.narrow(1, n_fixed, width)}, 1)
                      .to(torch::kCPU)
                      .contiguous();
      const int64_t* data = host.data_ptr<int64_t>();  // row r: width tokens, then width steps
      generated += width;
      std::vector<int64_t> keep;
      for (int64_t r = 0; r < batch; ++r) {
        const int64_t sample = rows[r];
        auto& out = result.tokens[sample];
        const int64_t* row = data + r * 2 * width;
        for (int64_t j = 0; j < width; ++j) {
          result.trace_tokens[sample].push_back(static_cast<int32_t>(row[j]));
          result.trace_steps[sample].push_back(static_cast<int32_t>(row[width + j]));
        }
        for (int64_t j = 0; j < width; ++j) {
          const int64_t t = row[j];
          if (std::find(o.eos_ids.begin(), o.eos_ids.end(), t) != o.eos_ids.end()) {
            result.stopped_at_eos[sample] = true;
            break;
          }
          if (static_cast<int64_t>(out.size()) < o.max_new_tokens) out.push_back(static_cast<int32_t>(t));
        }
        if (!result.stopped_at_eos[sample] && generated < o.max_new_tokens) keep.push_back(r);
      }
      if (o.on_block) {
        DecodeProgress p;
        p.blocks = static_cast<int64_t>(result.steps_per_block.size());
        p.generated_tokens = std::min(generated, o.max_new_tokens);
        p.active_samples = static_cast<int64_t>(keep.size());
        p.denoising_steps = result.denoising_steps;
        p.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        o.on_block(p);
      }
      mark(prof.readback_s);
      if (keep.empty()) break;
      if (static_cast<int64_t>(keep.size()) < batch) {
        auto index = torch::tensor(keep, torch::kLong).to(device);
        if (graph) graph.reset();  // it points at the storage SelectBatch replaces
        DICE_RETURN_IF_ERROR(cache->SelectBatch(index));
        block = block.index_select(0, index);
        std::vector<int64_t> kept_rows;
        for (int64_t r : keep) kept_rows.push_back(rows[r]);
        rows = std::move(kept_rows);
        mark(prof.batch_select_s);
        if (o.cuda_graphs) DICE_RETURN_IF_ERROR(make_graph());
      }
      if (graph) {
        DICE_RETURN_IF_ERROR(graph->Commit(block));
      } else {
        auto committed =
            SdarDecodeAccess::Forward(model, block, &*cache, /*commit=*/true, /*compute_logits=*/false);
        if (!committed.ok()) return committed.status();
      }
      ++result.forward_passes;
      ++prof.commits;
      mark(prof.commit_s);
      n_fixed = 0;
    }
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, std::string("Decode: ") + e.what_without_backtrace());
  }
  if (!o.profile) result.profile = DecodeProfile{};  // the counters ran regardless
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace dice
