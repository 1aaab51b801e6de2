// `dice train sft`: see dice/training/sft.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/training/sft.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dice/generator/sdar_model.h"
#include "dice/generator/tokenizer.h"
#include "dice/training/checkpoint_io.h"
#include "dice/training/distributed.h"
#include "dice/training/examples.h"
#include "dice/training/losses.h"
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

Expected<SftReport> RunSftRank(const SftOptions& o, DataParallel& dp,
                               const std::function<void(const std::string&)>& log_fn) {
  // Only rank 0 prints progress, writes the CSV and checkpoints.
  auto log = [&](const std::string& line) {
    if (log_fn && dp.is_root()) log_fn(line);
  };
  const int64_t world = dp.world_size();
  auto device = ParseTrainDevice(o.device);
  if (!device.ok()) return device.status();
  if (device->is_cuda() && !device->has_index() && world > 1) {
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(dp.local_rank()));
  }
  // Resume: weights from the resume checkpoint; config/tokenizer from there too.
  const std::string load_dir = o.resume_dir.empty() ? o.model_dir : o.resume_dir;
  auto tokenizer = Tokenizer::Load(load_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  SdarModelOptions mo;
  mo.device = *device;
  mo.dtype = torch::kFloat32;  // master weights
  auto model = SdarModel::Load(load_dir, mo);
  if (!model.ok()) return model.status();
  const SdarConfig& cfg = model->config();
  auto eos = EndOfTurnId(*tokenizer, cfg);
  if (!eos.ok()) return eos.status();

  auto loaded_templates = LoadTemplatesOrDefault(o.templates_path);
  if (!loaded_templates.ok()) return loaded_templates.status();
  const PromptTemplates& templates = *loaded_templates;
  SftReport report;
  std::vector<std::string> skipped;
  auto examples = ReadExamples(o.data_path, &skipped);
  if (!examples.ok()) return examples.status();
  report.skipped_lines = static_cast<int64_t>(skipped.size());
  for (const auto& s : skipped) log("skipped malformed line: " + s);
  std::vector<Tokenised> data;
  int64_t heldout = 0, too_long = 0;
  for (const auto& e : *examples) {
    if (e.split == "heldout") {
      ++heldout;
      continue;
    }
    if (e.kind == "task") continue;  // no answer to learn from (RL only)
    auto pa = ExamplePromptAndAnswer(e, templates);
    if (!pa.ok()) {
      log("skipped example " + e.id + ": " + pa.status().message());
      continue;
    }
    Tokenised t;
    for (int32_t id : tokenizer->Encode(pa->prompt)) t.ids.push_back(id);
    t.prompt_len = static_cast<int64_t>(t.ids.size());
    if (t.prompt_len + 1 >= o.max_length) {
      ++too_long;
      continue;
    }
    for (int32_t id : tokenizer->Encode(pa->answer)) t.ids.push_back(id);
    t.ids.push_back(*eos);
    if (static_cast<int64_t>(t.ids.size()) > o.max_length) t.ids.resize(o.max_length);
    data.push_back(std::move(t));
  }
  log("sft: " + std::to_string(data.size()) + " training examples (" + std::to_string(heldout) +
      " held out, never trained on; " + std::to_string(too_long) + " prompts longer than --max-length; " +
      std::to_string(skipped.size()) + " malformed lines skipped)");
  if (data.empty()) {
    return Status(StatusCode::kInvalidArgument, "dice train sft: " + o.data_path + " has no usable training example");
  }
  report.examples = static_cast<int64_t>(data.size());

  auto weights = model->NamedWeights();
  std::vector<torch::Tensor> params;
  for (auto& [name, t] : weights) params.push_back(t.requires_grad_(true));
  if (world > 1 && device->is_cuda()) {
    try {
      log(dp.UseNccl(*device) ? "sft: gradients all-reduced with NCCL"
                              : "sft: this build has no NCCL: gradients all-reduced through the TCPStore (host)");
    } catch (const std::exception& e) {
      return Status(StatusCode::kCudaError, std::string("dice train sft: starting NCCL: ") + e.what());
    }
  }
  // Every rank starts from rank 0's weights (they loaded the same files; this
  // makes it so even if the files changed between the ranks' reads).
  DICE_RETURN_IF_ERROR(dp.Broadcast(params));
  if (world > 1) {
    log("sft: data parallel over " + std::to_string(world) + " ranks; global batch " +
        std::to_string(o.batch_size * world) + " examples per micro-batch");
  }
  torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay).betas({0.9, 0.95}));
  int64_t step = 0;
  if (!o.resume_dir.empty()) {
    auto state = LoadTrainerState(o.resume_dir, "sft", &optimizer);
    if (!state.ok()) return state.status();
    step = *state;
    log("sft: resumed from " + o.resume_dir + " at step " + std::to_string(step));
  }
  report.first_step = step;
  const std::string csv_path = o.csv_path.empty() ? o.out_dir + "/sft_log.csv" : o.csv_path;
  std::ofstream csv;
  if (dp.is_root()) {
    DICE_RETURN_IF_ERROR(MakeDirs(o.out_dir));
    csv.open(csv_path, step > 0 ? std::ios::app : std::ios::trunc);
    if (!csv) return Status(StatusCode::kIoError, "cannot write " + csv_path);
    if (step == 0) csv << "step,loss,lr,tokens,tokens_per_s,elapsed_s\n";
  }

  const auto t0 = std::chrono::steady_clock::now();
  int64_t tokens_total = 0;
  const bool autocast = device->is_cuda() && o.bf16;
  try {
    while (step < o.steps) {
      ++step;
      const double lr = ScheduledLr(step, o.steps, o.warmup_steps, o.lr, o.min_lr_ratio);
      for (auto& group : optimizer.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
      optimizer.zero_grad();
      double step_loss = 0;
      int64_t step_tokens = 0;
      for (int64_t micro = 0; micro < o.grad_accum; ++micro) {
        // The global micro-batch holds batch_size * world examples in a fixed
        // order per (seed, step): resume sees the same data, and rank r takes
        // the r-th slice of batch_size, so N ranks at batch B see exactly
        // what 1 rank at batch N * B sees.
        const int64_t global_b = o.batch_size * world;
        const int64_t first_k = ((step - 1) * o.grad_accum + micro) * global_b;
        auto example = [&](int64_t k) -> const Tokenised& {
          return data[static_cast<size_t>((k + static_cast<int64_t>(o.seed)) % data.size())];
        };
        // Response tokens of the whole global micro-batch: the loss is
        // normalised by it on every rank (known here without communication).
        int64_t global_response = 0;
        for (int64_t k = first_k; k < first_k + global_b; ++k) {
          global_response += static_cast<int64_t>(example(k).ids.size()) - example(k).prompt_len;
        }
        std::vector<int64_t> ks;
        for (int64_t i = 0; i < o.batch_size; ++i) ks.push_back(first_k + dp.rank() * o.batch_size + i);
        int64_t len = 0;
        for (int64_t k : ks) len = std::max<int64_t>(len, example(k).ids.size());
        // Whole blocks: a real token's block then holds the same padding in
        // any batch (a rank's or the global one), so its logits do not depend
        // on which other examples share the batch.
        len = (len + cfg.block_size - 1) / cfg.block_size * cfg.block_size;
        const int64_t B = static_cast<int64_t>(ks.size());
        auto tokens = torch::full({B, len}, *eos, torch::kLong);
        auto response = torch::zeros({B, len}, torch::kBool);
        NoisedBatch noised;
        noised.noised = tokens.clone();
        noised.masked = torch::zeros({B, len}, torch::kBool);
        noised.t = torch::ones({B, len}, torch::kFloat32);
        for (int64_t i = 0; i < B; ++i) {
          const auto& t = example(ks[i]);
          const int64_t n = static_cast<int64_t>(t.ids.size());
          auto row = torch::tensor(t.ids, torch::kLong).unsqueeze(0);
          auto row_response = torch::zeros({1, n}, torch::kBool);
          row_response.narrow(1, t.prompt_len, n - t.prompt_len).fill_(true);
          tokens[i].narrow(0, 0, n).copy_(row[0]);
          response[i].narrow(0, 0, n).copy_(row_response[0]);
          // Noise drawn per example from (seed, global index): independent of
          // the batch it lands in and of the rank that takes it.
          at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed * 1000003ULL +
                                                                        static_cast<uint64_t>(ks[i]) * 131ULL + 17ULL);
          auto nr = NoiseResponseBlocks(row, row_response, cfg.block_size, cfg.mask_token_id, gen);
          noised.noised[i].narrow(0, 0, n).copy_(nr.noised[0]);
          noised.masked[i].narrow(0, 0, n).copy_(nr.masked[0]);
          noised.t[i].narrow(0, 0, n).copy_(nr.t[0]);
        }
        auto layout = BlockDiffusionLayout(len, cfg.block_size, *device);
        auto ids = torch::cat({noised.noised, tokens}, 1).to(*device);
        torch::Tensor logits;
        {
          AutocastGuard guard(autocast);
          auto out = model->ForwardPacked(ids, layout.positions, layout.mask);
          if (!out.ok()) return out.status();
          logits = out->narrow(1, 0, len);
        }
        auto loss = BlockDiffusionLoss(logits, tokens.to(*device), noised.masked.to(*device), noised.t.to(*device),
                                       response.to(*device));
        if (!loss.ok()) return loss.status();
        // BlockDiffusionLoss divides by this rank's response tokens; rescale
        // to the global count so that the ranks' mean gradient is the
        // gradient of the global micro-batch's loss.
        const double local_response = static_cast<double>(response.sum().item<int64_t>());
        const double share = local_response / static_cast<double>(std::max<int64_t>(1, global_response));
        (*loss * (share * static_cast<double>(world) / static_cast<double>(o.grad_accum))).backward();
        step_loss += loss->item<double>() * share / o.grad_accum;
        step_tokens += 2 * B * len;
      }
      DICE_RETURN_IF_ERROR(dp.AllReduceMeanGradients(params));
      {
        auto sums = dp.AllReduceSum({step_loss, static_cast<double>(step_tokens)});
        if (!sums.ok()) return sums.status();
        step_loss = (*sums)[0];
        step_tokens = static_cast<int64_t>((*sums)[1]);
      }
      if (o.grad_clip > 0) torch::nn::utils::clip_grad_norm_(params, o.grad_clip);
      optimizer.step();
      tokens_total += step_tokens;
      report.losses.push_back(step_loss);
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double tps = elapsed > 0 ? tokens_total / elapsed : 0;
      if (dp.is_root()) {
        csv << step << "," << step_loss << "," << lr << "," << step_tokens << "," << tps << "," << elapsed << "\n";
        csv.flush();
      }
      char line[256];
      std::snprintf(line, sizeof line, "sft step %lld/%lld loss %.4f lr %.3g tokens/s %.0f", static_cast<long long>(step),
                    static_cast<long long>(o.steps), step_loss, lr, tps);
      log(line);
      if (!std::isfinite(step_loss)) {
        return Status(StatusCode::kInternal, "dice train sft: loss is not finite at step " + std::to_string(step) +
                                                 (report.checkpoint.empty() ? "" : "; last checkpoint " + report.checkpoint));
      }
      if (dp.is_root() && ((o.save_every > 0 && step % o.save_every == 0) || step == o.steps)) {
        DICE_RETURN_IF_ERROR(SaveCheckpoint(*model, load_dir, o.out_dir));
        DICE_RETURN_IF_ERROR(SaveTrainerState(o.out_dir, "sft", step, optimizer));
        report.checkpoint = o.out_dir;
        log("sft: checkpoint " + o.out_dir + " (step " + std::to_string(step) + ")");
      }
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    report.tokens_per_s = elapsed > 0 ? tokens_total / elapsed : 0;
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, std::string("dice train sft: ") + e.what_without_backtrace() +
                                             (report.checkpoint.empty() ? "" : "; last checkpoint " + report.checkpoint));
  }
  report.parameter_digest = ParameterDigest(params);
  DICE_RETURN_IF_ERROR(dp.Finish());
  return report;
}

}  // namespace

Expected<SftReport> RunSft(const SftOptions& o, const std::function<void(const std::string&)>& log_fn) {
  DICE_RETURN_IF_ERROR(CheckOptions(o));
  return RunOnThisRank<SftReport>(o.dist_timeout_s, o.collective_timeout_s,
                                   [&](DataParallel& dp) { return RunSftRank(o, dp, log_fn); });
}

}  // namespace dice::training
