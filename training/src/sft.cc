// `dice train sft`: see dice/training/sft.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/training/sft.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "dice/generator/sdar_model.h"
#include "dice/generator/tokenizer.h"
#include "dice/training/checkpoint_io.h"
#include "dice/training/distributed.h"
#include "dice/training/examples.h"
#include "dice/training/losses.h"
#include "dice/training/split.h"
#include "trainer_common.h"

namespace dice::training {

double ScheduledLr(int64_t step, int64_t steps, int64_t warmup, double lr, double min_ratio) {
  if (warmup > 0 && step <= warmup) return lr * static_cast<double>(step) / static_cast<double>(warmup);
  const double span = std::max<int64_t>(1, steps - warmup);
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  return lr * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

namespace {

struct Tokenised {
  std::vector<int64_t> ids;
  int64_t prompt_len = 0;
};

Status CheckOptions(const SftOptions& o) {
  auto bad = [](const std::string& m) { return Status(StatusCode::kInvalidArgument, "dice train sft: " + m); };
  if (o.model_dir.empty()) return bad("--model is required");
  if (o.data_path.empty()) return bad("--data is required");
  if (o.out_dir.empty()) return bad("--out is required");
  if (o.steps < 1) return bad("--steps must be >= 1");
  if (o.batch_size < 1) return bad("--batch-size must be >= 1");
  if (o.grad_accum < 1) return bad("--grad-accum must be >= 1");
  if (o.max_length < 8) return bad("--max-length must be >= 8");
  if (o.warmup_steps < 0) return bad("--warmup-steps must be >= 0");
  if (!(o.lr > 0)) return bad("--lr must be > 0");
  if (!(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1)) return bad("--min-lr-ratio must be in [0, 1]");
  if (o.dist_timeout_s < 1) return bad("--dist-timeout must be >= 1");
  if (o.collective_timeout_s < 1) return bad("--collective-timeout must be >= 1");
  return Status::Ok();
}

}  // namespace

namespace {

// One micro-batch of this rank on the host: the clean sequences (int64
// [B, len], EOS-padded to whole blocks), the response positions (bool) and
// the noising draw of each row.
struct SftBatch {
  torch::Tensor tokens, response;
  NoisedBatch noised;
  int64_t len = 0;
};

// One rank's SFT run (sft.h). Run() is the pipeline: load the model, read
// and tokenise the training examples, set up the optimizer and the CSV,
// then TrainStep() until `steps`. Only rank 0 prints progress, writes the
// CSV and checkpoints.
class SftRun : private TrainerRank<SftReport> {
 public:
  SftRun(const SftOptions& o, DataParallel& dp, const std::function<void(const std::string&)>& log_fn)
      : TrainerRank("sft", dp, log_fn),
        o_(o),
        // Resume: weights from the resume checkpoint; config/tokenizer from there too.
        load_dir_(o.resume_dir.empty() ? o.model_dir : o.resume_dir) {}

  // Errors: see RunSft (sft.h).
  Expected<SftReport> Run() {
    DICE_RETURN_IF_ERROR(LoadModel());
    DICE_RETURN_IF_ERROR(ReadData());
    DICE_RETURN_IF_ERROR(PrepareOptimizer());
    DICE_RETURN_IF_ERROR(OpenCsv());
    t0_ = std::chrono::steady_clock::now();
    DICE_RETURN_IF_ERROR(CatchTorchErrors([&]() -> Status {
      while (step_ < o_.steps) DICE_RETURN_IF_ERROR(TrainStep());
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      report_.tokens_per_s = elapsed > 0 ? tokens_total_ / elapsed : 0;
      return Status::Ok();
    }));
    return FinishRun();
  }

 private:
  // The device (cuda: this rank's GPU), the tokenizer, the float32 master
  // weights and the end-of-turn id. Errors: those of the loaders.
  Status LoadModel() {
    DICE_RETURN_IF_ERROR(LoadDeviceAndTokenizer(o_.device, load_dir_));
    generator::SdarModelOptions mo;
    mo.device = device_;
    mo.dtype = torch::kFloat32;  // master weights
    auto model = generator::SdarModel::Load(load_dir_, mo);
    if (!model.ok()) return model.status();
    model_.emplace(std::move(*model));
    auto eos = EndOfTurnId(*tokenizer_, model_->config());
    if (!eos.ok()) return eos.status();
    eos_ = *eos;
    return Status::Ok();
  }

  // The train split's examples with an answer, tokenised as prompt + answer
  // + EOS and cut to max_length (a prompt that leaves no room is counted and
  // skipped). Errors: those of ReadExamples and LoadTemplatesOrDefault;
  // kInvalidArgument when no example is left.
  Status ReadData() {
    auto loaded_templates = LoadTemplatesOrDefault(o_.templates_path);
    if (!loaded_templates.ok()) return loaded_templates.status();
    const generator::PromptTemplates& templates = *loaded_templates;
    std::vector<std::string> skipped;
    auto examples = ReadExamples(o_.data_path, &skipped);
    if (!examples.ok()) return examples.status();
    report_.skipped_lines = static_cast<int64_t>(skipped.size());
    for (const auto& s : skipped) Log("skipped malformed line: " + s);
    int64_t heldout = 0, too_long = 0;
    for (const auto& e : *examples) {
      if (!InSplit(e.split, "train")) {  // held out or validation (split.h)
        ++heldout;
        continue;
      }
      if (e.kind == "task") continue;  // no answer to learn from (RL only)
      auto pa = ExamplePromptAndAnswer(e, templates);
      if (!pa.ok()) {
        Log("skipped example " + e.id + ": " + pa.status().message());
        continue;
      }
      Tokenised t;
      for (int32_t id : tokenizer_->Encode(pa->prompt)) t.ids.push_back(id);
      t.prompt_len = static_cast<int64_t>(t.ids.size());
      if (t.prompt_len + 1 >= o_.max_length) {
        ++too_long;
        continue;
      }
      for (int32_t id : tokenizer_->Encode(pa->answer)) t.ids.push_back(id);
      t.ids.push_back(eos_);
      if (static_cast<int64_t>(t.ids.size()) > o_.max_length) t.ids.resize(o_.max_length);
      data_.push_back(std::move(t));
    }
    Log("sft: " + std::to_string(data_.size()) + " training examples (" + std::to_string(heldout) +
        " held out or validation, never trained on; " + std::to_string(too_long) +
        " prompts longer than --max-length; " +
        std::to_string(skipped.size()) + " malformed lines skipped)");
    if (data_.empty()) {
      return Status(StatusCode::kInvalidArgument,
                    "dice train sft: " + o_.data_path + " has no usable training example");
    }
    report_.examples = static_cast<int64_t>(data_.size());
    return Status::Ok();
  }

  // NCCL when there are several GPU ranks; every rank from rank 0's
  // weights; AdamW; a resumed run's optimizer state and step. Errors:
  // kCudaError when NCCL fails to start; those of the broadcast and
  // LoadTrainerState.
  Status PrepareOptimizer() {
    auto weights = model_->NamedWeights();
    for (auto& [name, t] : weights) params_.push_back(t.requires_grad_(true));
    DICE_RETURN_IF_ERROR(StartNccl(device_));
    // Every rank starts from rank 0's weights (they loaded the same files; this
    // makes it so even if the files changed between the ranks' reads).
    DICE_RETURN_IF_ERROR(dp_.Broadcast(params_));
    if (world_ > 1) {
      Log("sft: data parallel over " + std::to_string(world_) + " ranks; global batch " +
          std::to_string(o_.batch_size * world_) + " examples per micro-batch");
    }
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        params_, torch::optim::AdamWOptions(o_.lr).weight_decay(o_.weight_decay).betas({0.9, 0.95}));
    if (!o_.resume_dir.empty()) {
      auto state = LoadTrainerState(o_.resume_dir, "sft", optimizer_.get());
      if (!state.ok()) return state.status();
      step_ = *state;
      Log("sft: resumed from " + o_.resume_dir + " at step " + std::to_string(step_));
    }
    report_.first_step = step_;
    return Status::Ok();
  }

  // Rank 0: the output directory and the CSV (appended to on resume).
  // Errors: those of TrainerRank::OpenCsv.
  Status OpenCsv() {
    return TrainerRank::OpenCsv(o_.csv_path.empty() ? o_.out_dir + "/sft_log.csv" : o_.csv_path, o_.out_dir, step_ > 0,
                                "step,loss,lr,tokens,tokens_per_s,elapsed_s\n");
  }

  // One optimiser step: the scheduled lr, grad_accum micro-batches, the
  // gradients averaged over ranks and clipped, AdamW; then the CSV row, the
  // progress line and the checkpoint. Errors: kInternal when the loss is not
  // finite; those of the forward, the loss, the collectives and the saves.
  Status TrainStep() {
    ++step_;
    const double lr = ScheduledLr(step_, o_.steps, o_.warmup_steps, o_.lr, o_.min_lr_ratio);
    for (auto& group : optimizer_->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    optimizer_->zero_grad();
    double step_loss = 0;
    int64_t step_tokens = 0;
    for (int64_t micro = 0; micro < o_.grad_accum; ++micro) {
      DICE_RETURN_IF_ERROR(MicroBatch(micro, &step_loss, &step_tokens));
    }
    DICE_RETURN_IF_ERROR(dp_.AllReduceMeanGradients(params_));
    {
      auto sums = dp_.AllReduceSum({step_loss, static_cast<double>(step_tokens)});
      if (!sums.ok()) return sums.status();
      step_loss = (*sums)[0];
      step_tokens = static_cast<int64_t>((*sums)[1]);
    }
    if (o_.grad_clip > 0) torch::nn::utils::clip_grad_norm_(params_, o_.grad_clip);
    optimizer_->step();
    tokens_total_ += step_tokens;
    report_.losses.push_back(step_loss);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const double tps = elapsed > 0 ? tokens_total_ / elapsed : 0;
    if (dp_.is_root()) {
      csv_ << step_ << "," << step_loss << "," << lr << "," << step_tokens << "," << tps << "," << elapsed << "\n";
      csv_.flush();
    }
    char line[256];
    std::snprintf(line, sizeof line, "sft step %lld/%lld loss %.4f lr %.3g tokens/s %.0f",
                  static_cast<long long>(step_), static_cast<long long>(o_.steps), step_loss, lr, tps);
    Log(line);
    if (!std::isfinite(step_loss)) {
      return Status(StatusCode::kInternal,
                    "dice train sft: loss is not finite at step " + std::to_string(step_) + LastCheckpointNote());
    }
    if (dp_.is_root() && ((o_.save_every > 0 && step_ % o_.save_every == 0) || step_ == o_.steps)) {
      DICE_RETURN_IF_ERROR(SaveCheckpoint(*model_, load_dir_, o_.out_dir));
      DICE_RETURN_IF_ERROR(SaveTrainerState(o_.out_dir, "sft", step_, *optimizer_));
      report_.checkpoint = o_.out_dir;
      Log("sft: checkpoint " + o_.out_dir + " (step " + std::to_string(step_) + ")");
    }
    return Status::Ok();
  }

  // The example at global index k: a fixed order per seed.
  const Tokenised& Example(int64_t k) const {
    return data_[static_cast<size_t>((k + static_cast<int64_t>(o_.seed)) % data_.size())];
  }

  // Forward and backward of this rank's share of micro-batch `micro`;
  // adds its share of the global loss and its packed tokens.
  Status MicroBatch(int64_t micro, double* step_loss, int64_t* step_tokens) {
    // The global micro-batch holds batch_size * world examples in a fixed
    // order per (seed, step): resume sees the same data, and rank r takes
    // the r-th slice of batch_size, so N ranks at batch B see exactly
    // what 1 rank at batch N * B sees.
    const int64_t global_b = o_.batch_size * world_;
    const int64_t first_k = ((step_ - 1) * o_.grad_accum + micro) * global_b;
    // Response tokens of the whole global micro-batch: the loss is
    // normalised by it on every rank (known here without communication).
    int64_t global_response = 0;
    for (int64_t k = first_k; k < first_k + global_b; ++k) {
      global_response += static_cast<int64_t>(Example(k).ids.size()) - Example(k).prompt_len;
    }
    std::vector<int64_t> ks;
    for (int64_t i = 0; i < o_.batch_size; ++i) ks.push_back(first_k + dp_.rank() * o_.batch_size + i);
    const SftBatch batch = MakeBatch(ks);
    const int64_t len = batch.len;
    const generator::SdarConfig& cfg = model_->config();
    auto layout = BlockDiffusionLayout(len, cfg.block_size, device_);
    auto ids = torch::cat({batch.noised.noised, batch.tokens}, 1).to(device_);
    torch::Tensor logits;
    {
      AutocastGuard guard(device_.is_cuda() && o_.bf16);
      auto out = model_->ForwardPacked(ids, layout.positions, layout.mask);
      if (!out.ok()) return out.status();
      logits = out->narrow(1, 0, len);
    }
    auto loss = BlockDiffusionLoss(logits, batch.tokens.to(device_), batch.noised.masked.to(device_),
                                   batch.noised.t.to(device_), batch.response.to(device_));
    if (!loss.ok()) return loss.status();
    // BlockDiffusionLoss divides by this rank's response tokens; rescale
    // to the global count so that the ranks' mean gradient is the
    // gradient of the global micro-batch's loss.
    const double local_response = static_cast<double>(batch.response.sum().item<int64_t>());
    const double share = local_response / static_cast<double>(std::max<int64_t>(1, global_response));
    (*loss * (share * static_cast<double>(world_) / static_cast<double>(o_.grad_accum))).backward();
    *step_loss += loss->item<double>() * share / o_.grad_accum;
    *step_tokens += 2 * static_cast<int64_t>(ks.size()) * len;
    return Status::Ok();
  }

  // The examples `ks` (global indices) as one batch, each row noised by its
  // own generator seeded from (seed, k).
  SftBatch MakeBatch(const std::vector<int64_t>& ks) const {
    const generator::SdarConfig& cfg = model_->config();
    SftBatch b;
    int64_t len = 0;
    for (int64_t k : ks) len = std::max<int64_t>(len, Example(k).ids.size());
    // Whole blocks: a real token's block then holds the same padding in
    // any batch (a rank's or the global one), so its logits do not depend
    // on which other examples share the batch.
    len = (len + cfg.block_size - 1) / cfg.block_size * cfg.block_size;
    b.len = len;
    const int64_t B = static_cast<int64_t>(ks.size());
    b.tokens = torch::full({B, len}, eos_, torch::kLong);
    b.response = torch::zeros({B, len}, torch::kBool);
    b.noised.noised = b.tokens.clone();
    b.noised.masked = torch::zeros({B, len}, torch::kBool);
    b.noised.t = torch::ones({B, len}, torch::kFloat32);
    for (int64_t i = 0; i < B; ++i) {
      const auto& t = Example(ks[i]);
      const int64_t n = static_cast<int64_t>(t.ids.size());
      auto row = torch::tensor(t.ids, torch::kLong).unsqueeze(0);
      auto row_response = torch::zeros({1, n}, torch::kBool);
      row_response.narrow(1, t.prompt_len, n - t.prompt_len).fill_(true);
      b.tokens[i].narrow(0, 0, n).copy_(row[0]);
      b.response[i].narrow(0, 0, n).copy_(row_response[0]);
      // Noise drawn per example from (seed, global index): independent of
      // the batch it lands in and of the rank that takes it.
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o_.seed * 1000003ULL +
                                                                    static_cast<uint64_t>(ks[i]) * 131ULL + 17ULL);
      auto nr = NoiseResponseBlocks(row, row_response, cfg.block_size, cfg.mask_token_id, gen);
      b.noised.noised[i].narrow(0, 0, n).copy_(nr.noised[0]);
      b.noised.masked[i].narrow(0, 0, n).copy_(nr.masked[0]);
      b.noised.t[i].narrow(0, 0, n).copy_(nr.t[0]);
    }
    return b;
  }

  const SftOptions& o_;
  const std::string load_dir_;  // the model's weights, config and tokenizer
  std::optional<generator::SdarModel> model_;
  int64_t eos_ = 0;  // EndOfTurnId: ends every answer, pads every batch
  std::vector<Tokenised> data_;
  int64_t step_ = 0;  // optimiser steps done
  std::chrono::steady_clock::time_point t0_;
  int64_t tokens_total_ = 0;
};

}  // namespace

Expected<SftReport> RunSft(const SftOptions& o, const std::function<void(const std::string&)>& log_fn) {
  DICE_RETURN_IF_ERROR(CheckOptions(o));
  return RunOnThisRank<SftReport, SftRun>(o, log_fn);
}

}  // namespace dice::training
