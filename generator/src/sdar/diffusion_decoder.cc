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

#include "dice/generator/decode_session.h"
#include "dice/generator/sdar_step_graph.h"

namespace dice::generator {

// Forward without the token-range check, which would synchronise the device
// at every step: Decode checked the prompt, and every other id it feeds is
// an argmax/sample over the vocabulary. The first `commit_len` new tokens
// are committed (0: none; a merged commit passes block_size of 2 blocks);
// `logit_rows` (int64 [B, m], rows of ids) limits the LM head to those rows.
struct SdarDecodeAccess {
  static Expected<torch::Tensor> Forward(const SdarModel& model, const torch::Tensor& ids, KvCache* cache,
                                         int64_t commit_len, bool compute_logits,
                                         const torch::Tensor& logit_rows = {}) {
    DICE_RETURN_IF_ERROR(model.CheckForward(ids, cache, commit_len > 0, /*check_ids=*/false));
    try {
      torch::NoGradGuard no_grad;
      return model.ForwardImpl(ids, cache, commit_len, compute_logits, logit_rows);
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

namespace {

// Every argument check of Decode, in the order the header lists them.
// Errors: kInvalidArgument naming the token or option.
Status CheckDecodeInputs(const SdarConfig& c, const std::vector<int32_t>& prompt, const DecodeOptions& o) {
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
  return Status::Ok();
}

// Where the prompt and the new tokens fall in whole blocks (positions).
struct BlockPlan {
  int64_t block_size = 0;
  int64_t prompt_len = 0;
  int64_t whole = 0;        // the prompt's whole blocks, prefilled
  int64_t first_fixed = 0;  // prompt tokens in the first decoded (partial) block
  int64_t capacity = 0;     // KV cache positions: whole + the decoded blocks
};

// Lays out a prompt of `prompt_len` tokens and max_new_tokens in blocks of
// the config. Errors: kInvalidArgument when the blocks exceed the context.
Expected<BlockPlan> PlanBlocks(const SdarConfig& c, int64_t prompt_len, const DecodeOptions& o) {
  BlockPlan p;
  p.block_size = c.block_size;
  p.prompt_len = prompt_len;
  p.whole = prompt_len / p.block_size * p.block_size;
  p.first_fixed = prompt_len - p.whole;
  const int64_t max_blocks = (p.first_fixed + o.max_new_tokens + p.block_size - 1) / p.block_size;
  p.capacity = p.whole + max_blocks * p.block_size;
  if (p.capacity > c.max_position_embeddings) {
    return Invalid("prompt of " + std::to_string(prompt_len) + " tokens + max_new_tokens " +
                   std::to_string(o.max_new_tokens) + " (" + std::to_string(p.capacity) +
                   " positions in whole blocks) exceeds the model's context of " +
                   std::to_string(c.max_position_embeddings) + " (max_position_embeddings)");
  }
  return p;
}

// One block being decoded: its ids (int64 [batch, block_size]), which are
// still masked (bool), the step each position was revealed at (int64, -1 =
// not yet) and how many leading positions are prompt tokens.
struct Block {
  torch::Tensor tokens, masked, step_of;
  torch::Tensor logp;  // record_logprobs: float32 [batch, block_size], each revealed token's log-probability
  int64_t n_fixed = 0;
};

// One Decode after its inputs are checked: the KV cache, the optional step
// graph, the random stream and the samples still in the batch. Run() is the
// pipeline (header steps 1-4); the other methods are its phases. LibTorch
// failures throw c10::Error (Decode turns them into kInternal).
class BlockDecoder {
 public:
  BlockDecoder(const SdarModel& model, const DecodeOptions& o, const BlockPlan& plan,
               std::chrono::steady_clock::time_point t0, DecodeResult* result, DecodeSession* session)
      : model_(model),
        c_(model.config()),
        o_(o),
        plan_(plan),
        t0_(t0),
        result_(*result),
        prof_(result->profile),
        device_(model.options().device),
        i64_(torch::TensorOptions().dtype(torch::kLong).device(device_)),
        last_mark_(std::chrono::steady_clock::now()),
        session_(o.cuda_graphs ? session : nullptr) {}

  // Prefill, then Denoise -> ReadBack -> DropFinished -> Commit per block
  // until every sample has stopped (merge_commit: the block is kept as
  // pending_ and committed by the next block's first step). Errors: those of
  // the model, the cache and the step graph.
  Status Run(const std::vector<int32_t>& prompt) {
    DICE_RETURN_IF_ERROR(Setup(prompt));
    DICE_RETURN_IF_ERROR(Prefill());
    if (o_.cuda_graphs) DICE_RETURN_IF_ERROR(CaptureGraph());
    gen_ = MakeGenerator(device_, o_.seed);
    positions_ = torch::arange(plan_.block_size, i64_).unsqueeze(0);
    rows_.resize(o_.num_samples);
    for (int64_t i = 0; i < o_.num_samples; ++i) rows_[i] = i;
    int64_t n_fixed = plan_.first_fixed;
    while (true) {
      Block b = NewBlock(n_fixed);
      auto steps = Denoise(b);
      if (!steps.ok()) return steps.status();
      result_.steps_per_block.push_back(*steps);
      result_.denoising_steps += *steps;
      result_.forward_passes += *steps;
      const std::vector<int64_t> keep = ReadBack(b);
      ReportProgress(static_cast<int64_t>(keep.size()));
      Mark(prof_.readback_s);
      if (keep.empty()) break;
      if (static_cast<int64_t>(keep.size()) < b.tokens.size(0)) DICE_RETURN_IF_ERROR(DropFinished(keep, &b));
      if (o_.merge_commit) {
        pending_ = b.tokens;
      } else {
        DICE_RETURN_IF_ERROR(Commit(b.tokens));
      }
      n_fixed = 0;
    }
    return Status::Ok();
  }

 private:
  // With DecodeOptions::profile: synchronises and books the time since the
  // last mark to `phase` (seconds).
  void Mark(double& phase) {
    if (!o_.profile) return;
    if (device_.is_cuda()) torch::cuda::synchronize();
    const auto now = std::chrono::steady_clock::now();
    phase += std::chrono::duration<double>(now - last_mark_).count();
    last_mark_ = now;
  }

  // Allocates the KV cache for num_samples rows (with a session: views its
  // kept storage) and uploads the prompt.
  Status Setup(const std::vector<int32_t>& prompt) {
    auto cache = session_ ? session_->Cache(o_.num_samples, plan_.capacity)
                          : model_.NewCache(o_.num_samples, plan_.capacity);
    if (!cache.ok()) return cache.status();
    cache_ = std::move(*cache);
    prompt_ids_ = torch::tensor(std::vector<int64_t>(prompt.begin(), prompt.end()), torch::kLong)
                      .to(device_)
                      .unsqueeze(0)
                      .expand({o_.num_samples, plan_.prompt_len});
    Mark(prof_.setup_s);
    return Status::Ok();
  }

  // Step 1: the prompt's whole blocks into the cache (one committed forward).
  Status Prefill() {
    if (plan_.whole > 0) {
      auto pre = SdarDecodeAccess::Forward(model_, prompt_ids_.narrow(1, 0, plan_.whole), &cache_,
                                           /*commit_len=*/plan_.whole, /*compute_logits=*/false);
      if (!pre.ok()) return pre.status();
      ++result_.forward_passes;
    }
    Mark(prof_.prefill_s);
    // One synchronisation, so the prefill's end is a device time too (the
    // step loop reads results back every block anyway).
    if (!o_.profile && device_.is_cuda()) torch::cuda::synchronize();
    result_.prefill_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    return Status::Ok();
  }

  // (Re)captures the step graph for the cache's current batch (with a
  // session: reuses the one it kept for this batch, if any).
  Status CaptureGraph() {
    graph_ = nullptr;
    own_graph_.reset();  // its memory first: the new one may need it
    SdarStepGraphOptions forms;
    forms.logits_in_graph = !o_.masked_logits_only;
    forms.commit = !o_.merge_commit;
    forms.merged_step = o_.merge_commit;
    if (session_) {
      const int64_t made = session_->counters().graphs_made;
      auto g = session_->Graph(&cache_, forms);
      if (!g.ok()) return g.status();
      graph_ = *g;
      ++(session_->counters().graphs_made > made ? prof_.captures : prof_.graph_reuses);
      Mark(prof_.graph_capture_s);
      NoteAttention();
      return Status::Ok();
    }
    auto g = SdarStepGraph::Create(model_, &cache_, forms);
    if (!g.ok()) return g.status();
    own_graph_ = std::move(*g);
    graph_ = own_graph_.get();
    ++prof_.captures;
    Mark(prof_.graph_capture_s);
    NoteAttention();
    return Status::Ok();
  }

  // Which attention the captured step forward runs (DecodeResult::step_attention).
  void NoteAttention() {
    if (graph_ == nullptr || !graph_->captured()) return;
    result_.step_attention = graph_->split_kv_attention() ? "split-kv" : "sdpa";
    result_.sdpa_step_us = graph_->sdpa_step_us();
    result_.split_kv_step_us = graph_->split_kv_step_us();
  }

  // A fresh block for the rows in the batch: mask tokens, after the
  // `n_fixed` prompt tokens of a first partial block.
  Block NewBlock(int64_t n_fixed) {
    const int64_t batch = static_cast<int64_t>(rows_.size());
    const int64_t bs = plan_.block_size;
    Block b;
    b.n_fixed = n_fixed;
    b.tokens = torch::full({batch, bs}, c_.mask_token_id, i64_);
    b.masked = torch::ones({batch, bs}, torch::TensorOptions().dtype(torch::kBool).device(device_));
    if (n_fixed > 0) {
      b.tokens.narrow(1, 0, n_fixed).copy_(prompt_ids_.narrow(0, 0, batch).narrow(1, plan_.whole, n_fixed));
      b.masked.narrow(1, 0, n_fixed).fill_(false);
    }
    b.step_of = torch::full({batch, bs}, -1, i64_);
    if (o_.record_logprobs) {
      b.logp = torch::full({batch, bs}, std::numeric_limits<float>::quiet_NaN(),
                           torch::TensorOptions().dtype(torch::kFloat32).device(device_));
    }
    return b;
  }

  // Step 2: denoising steps until the block has no mask left; returns how
  // many steps (forwards) it took.
  Expected<int64_t> Denoise(Block& b) {
    const int64_t n_masked = plan_.block_size - b.n_fixed;
    const int64_t S = o_.denoising_steps;
    int64_t steps = 0;
    int64_t still_masked = n_masked;  // static: every row has this many masks left
    for (int64_t s = 0;; ++s) {
      // Static: the schedule finishes the block in min(S, n) steps, known
      // on the host. Dynamic: a new block has n masks in every row; after
      // that the device says how many the fullest row has left.
      int64_t width = still_masked;
      if (o_.remasking == Remasking::kStatic) {
        if (s >= std::min(S, n_masked)) break;
      } else if (s > 0) {
        width = b.masked.sum(-1).max().item<int64_t>();
        if (width == 0) break;
      }
      const torch::Tensor rows = MaskedRows(b, width);
      Expected<torch::Tensor> logits = StepForward(b, rows);
      if (!logits.ok()) return logits.status();
      ++steps;
      ++prof_.step_forwards;
      Mark(prof_.step_forward_s);
      RevealStep(*logits, rows, s, n_masked, &still_masked, b);
      Mark(prof_.sampling_s);
    }
    return steps;
  }

  // masked_logits_only: the block positions a step needs logits at, int64
  // [batch, width]: each row's masked positions in ascending order (a
  // stable sort puts them first), then, in a row with fewer than `width`
  // masks (dynamic remasking), revealed ones that ranking never picks.
  // Undefined (every position) when the option is off or nothing is saved.
  torch::Tensor MaskedRows(const Block& b, int64_t width) const {
    if (!o_.masked_logits_only || width >= plan_.block_size) return torch::Tensor();
    auto order = std::get<1>(b.masked.to(torch::kInt).sort(/*stable=*/true, /*dim=*/-1, /*descending=*/true));
    return order.narrow(1, 0, width).contiguous();
  }

  // One denoising-step forward of the block: float32 logits [batch, m,
  // vocab] at `rows` (m = rows.size(1)) or [batch, block, vocab] when rows
  // is undefined. With a pending block (merge_commit) the same forward
  // commits it first (header step 3).
  Expected<torch::Tensor> StepForward(const Block& b, const torch::Tensor& rows) {
    if (!pending_.defined()) {
      if (graph_) return graph_->Step(b.tokens, rows);
      return SdarDecodeAccess::Forward(model_, b.tokens, &cache_, /*commit_len=*/0, /*compute_logits=*/true, rows);
    }
    const torch::Tensor committed = pending_;
    pending_ = torch::Tensor();
    ++result_.merged_commits;
    if (graph_) return graph_->MergedStep(committed, b.tokens, rows);
    // [committed ; block] in one forward: the block's rows are bs .. 2bs-1.
    const int64_t bs = plan_.block_size;
    const torch::Tensor logit_rows =
        rows.defined() ? rows + bs : torch::arange(bs, 2 * bs, i64_).unsqueeze(0).expand({b.tokens.size(0), bs});
    return SdarDecodeAccess::Forward(model_, torch::cat({committed, b.tokens}, 1), &cache_, /*commit_len=*/bs,
                                     /*compute_logits=*/true, logit_rows);
  }

  // One step's sampling on its logits (float32 [batch, block, vocab], or
  // [batch, m, vocab] at the block positions `rows` when defined): draws a
  // token per position and reveals the k most confident masked ones (the
  // header's schedule k_s, static or dynamic remasking). `rows` lists each
  // row's masked positions in ascending order first, so the stable ranking
  // over them orders the masked positions as the ranking over the whole
  // block does (ties to the lower position).
  void RevealStep(torch::Tensor& logits, const torch::Tensor& rows, int64_t s, int64_t n_masked,
                  int64_t* still_masked, Block& b) {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const int64_t S = o_.denoising_steps;
    logits.select(-1, c_.mask_token_id).fill_(neg_inf);
    auto [x0, conf] = Draw(logits, o_, gen_);
    torch::Tensor lp;  // record_logprobs: log p(x0) untempered, float32 [batch, m]
    if (o_.record_logprobs) lp = logits.gather(-1, x0.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1);
    const torch::Tensor masked = rows.defined() ? b.masked.gather(1, rows) : b.masked;
    conf = conf.masked_fill(masked.logical_not(), neg_inf);
    auto order = std::get<1>(conf.sort(/*stable=*/true, /*dim=*/-1, /*descending=*/true));
    const int64_t k_s = std::max<int64_t>(1, n_masked / S + (s < n_masked % S ? 1 : 0));
    torch::Tensor reveal;
    if (o_.remasking == Remasking::kStatic) {
      // k is the same for every row and known here: no per-row counts.
      const int64_t k = std::min(k_s, *still_masked);
      *still_masked -= k;
      reveal = torch::zeros_like(masked).scatter_(1, order.narrow(1, 0, k), true);
    } else {
      auto k = torch::full({b.tokens.size(0)}, k_s, i64_);
      k = torch::maximum(k, (conf > o_.confidence_threshold).sum(-1));
      k = torch::minimum(k, b.masked.sum(-1));
      auto take_sorted = positions_.narrow(1, 0, masked.size(1)) < k.unsqueeze(1);  // the first k of the ranking
      reveal = torch::zeros_like(masked).scatter(1, order, take_sorted);
    }
    if (rows.defined()) {  // back to block positions
      reveal = torch::zeros_like(b.masked).scatter_(1, rows, reveal);
      x0 = b.tokens.scatter(1, rows, x0);
      if (lp.defined()) lp = b.logp.scatter(1, rows, lp);
    }
    if (lp.defined()) b.logp = torch::where(reveal, lp, b.logp);
    b.tokens = torch::where(reveal, x0, b.tokens);
    b.step_of.masked_fill_(reveal, s);
    b.masked.logical_and_(reveal.logical_not());
  }

  // Step 4: collects the block's new tokens and their reveal steps (one
  // read-back) into the result; a sample ends at its first EOS or at
  // max_new_tokens. Returns the batch rows that go on.
  std::vector<int64_t> ReadBack(const Block& b) {
    const int64_t batch = b.tokens.size(0);
    const int64_t width = plan_.block_size - b.n_fixed;
    auto host = torch::cat({b.tokens.narrow(1, b.n_fixed, width), b.step_of.narrow(1, b.n_fixed, width)}, 1)
                    .to(torch::kCPU)
                    .contiguous();
    const int64_t* data = host.data_ptr<int64_t>();  // row r: width tokens, then width steps
    torch::Tensor host_lp;
    if (o_.record_logprobs) host_lp = b.logp.narrow(1, b.n_fixed, width).to(torch::kCPU).contiguous();
    generated_ += width;
    std::vector<int64_t> keep;
    for (int64_t r = 0; r < batch; ++r) {
      const int64_t sample = rows_[r];
      auto& out = result_.tokens[sample];
      const int64_t* row = data + r * 2 * width;
      for (int64_t j = 0; j < width; ++j) {
        result_.trace_tokens[sample].push_back(static_cast<int32_t>(row[j]));
        result_.trace_steps[sample].push_back(static_cast<int32_t>(row[width + j]));
        if (host_lp.defined()) result_.trace_logprobs[sample].push_back(host_lp.data_ptr<float>()[r * width + j]);
      }
      for (int64_t j = 0; j < width; ++j) {
        const int64_t t = row[j];
        if (std::find(o_.eos_ids.begin(), o_.eos_ids.end(), t) != o_.eos_ids.end()) {
          result_.stopped_at_eos[sample] = true;
          break;
        }
        if (static_cast<int64_t>(out.size()) < o_.max_new_tokens) out.push_back(static_cast<int32_t>(t));
      }
      if (!result_.stopped_at_eos[sample] && generated_ < o_.max_new_tokens) keep.push_back(r);
    }
    return keep;
  }

  // Calls DecodeOptions::on_block, when set, with the totals so far.
  void ReportProgress(int64_t active) const {
    if (!o_.on_block) return;
    DecodeProgress p;
    p.blocks = static_cast<int64_t>(result_.steps_per_block.size());
    p.generated_tokens = std::min(generated_, o_.max_new_tokens);
    p.active_samples = active;
    p.denoising_steps = result_.denoising_steps;
    p.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    o_.on_block(p);
  }

  // Keeps only the batch rows `keep` in the cache and the block; recaptures
  // the step graph for the smaller batch.
  Status DropFinished(const std::vector<int64_t>& keep, Block* b) {
    auto index = torch::tensor(keep, torch::kLong).to(device_);
    graph_ = nullptr;
    own_graph_.reset();  // it points at the storage SelectBatch replaces
    DICE_RETURN_IF_ERROR(session_ ? session_->SelectBatch(&cache_, index) : cache_.SelectBatch(index));
    b->tokens = b->tokens.index_select(0, index);
    std::vector<int64_t> kept_rows;
    for (int64_t r : keep) kept_rows.push_back(rows_[r]);
    rows_ = std::move(kept_rows);
    Mark(prof_.batch_select_s);
    if (o_.cuda_graphs) DICE_RETURN_IF_ERROR(CaptureGraph());
    return Status::Ok();
  }

  // Step 3 without merge_commit: one more forward writes the complete block
  // into the cache.
  Status Commit(const torch::Tensor& block) {
    if (graph_) {
      DICE_RETURN_IF_ERROR(graph_->Commit(block));
    } else {
      auto committed = SdarDecodeAccess::Forward(model_, block, &cache_, /*commit_len=*/block.size(1),
                                                 /*compute_logits=*/false);
      if (!committed.ok()) return committed.status();
    }
    ++result_.forward_passes;
    ++result_.commit_forwards;
    ++prof_.commits;
    Mark(prof_.commit_s);
    return Status::Ok();
  }

  const SdarModel& model_;
  const SdarConfig& c_;
  const DecodeOptions& o_;
  const BlockPlan plan_;
  const std::chrono::steady_clock::time_point t0_;
  DecodeResult& result_;
  DecodeProfile& prof_;
  const torch::Device device_;
  const torch::TensorOptions i64_;
  std::chrono::steady_clock::time_point last_mark_;
  DecodeSession* session_;                // null: this decode owns its cache and graph
  KvCache cache_;                        // before own_graph_: the graph borrows it and goes first
  std::unique_ptr<SdarStepGraph> own_graph_;  // the graph without a session
  SdarStepGraph* graph_ = nullptr;       // own_graph_ or the session's; null: eager forwards
  torch::Tensor pending_;  // merge_commit: int64 [batch, block] complete, not yet committed (undefined: none)
  torch::Tensor prompt_ids_;              // int64 [num_samples, prompt_len] on the device
  at::Generator gen_;
  torch::Tensor positions_;               // int64 [1, block_size]: 0..block_size-1
  std::vector<int64_t> rows_;             // sample id of each batch row
  int64_t generated_ = 0;                 // tokens per sample generated so far
};

}  // namespace

Expected<DecodeResult> Decode(const SdarModel& model, const std::vector<int32_t>& prompt,
                              const DecodeOptions& o) {
  return Decode(model, prompt, o, nullptr);
}

Expected<DecodeResult> Decode(const SdarModel& model, const std::vector<int32_t>& prompt, const DecodeOptions& o,
                              DecodeSession* session) {
  if (session != nullptr && &session->model() != &model) {
    return Invalid("the DecodeSession was made for another model");
  }
  const auto t0 = std::chrono::steady_clock::now();
  DICE_RETURN_IF_ERROR(CheckDecodeInputs(model.config(), prompt, o));
  auto plan = PlanBlocks(model.config(), static_cast<int64_t>(prompt.size()), o);
  if (!plan.ok()) return plan.status();
  DecodeResult result;
  const int64_t n = o.num_samples;
  result.tokens.assign(n, {});
  result.stopped_at_eos.assign(n, false);
  result.trace_tokens.assign(n, {});
  result.trace_steps.assign(n, {});
  result.trace_logprobs.assign(o.record_logprobs ? n : 0, {});
  try {
    torch::NoGradGuard no_grad;
    BlockDecoder decoder(model, o, *plan, t0, &result, session);
    DICE_RETURN_IF_ERROR(decoder.Run(prompt));
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, std::string("Decode: ") + e.what_without_backtrace());
  }
  if (!o.profile) result.profile = DecodeProfile{};  // the counters ran regardless
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace dice::generator
