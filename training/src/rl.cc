// `dice train rl` (BiC-RL with TraceRL): see dice/training/rl.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/training/rl.h"

#include <algorithm>
#include <memory>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/prompts.h"
#include "dice/generator/sdar_model.h"
#include "dice/generator/tokenizer.h"
#include "dice/runtime/program_judge.h"
#include "dice/training/checkpoint_io.h"
#include "dice/training/distributed.h"
#include "dice/training/examples.h"
#include "dice/training/losses.h"
#include "dice/training/reward.h"
#include "trainer_common.h"

namespace dice::training {
namespace {

Status Bad(const std::string& m) { return Status(StatusCode::kInvalidArgument, "dice train rl: " + m); }

Status CheckOptions(const RlOptions& o) {
  if (o.model_dir.empty()) return Bad("--model is required");
  if (o.tasks_path.empty()) return Bad("--tasks is required");
  if (o.out_dir.empty()) return Bad("--out is required");
  if (o.stage != "infill" && o.stage != "e2e") return Bad("--stage must be infill or e2e, got '" + o.stage + "'");
  if (o.schedule != "ordered" && o.schedule != "adaptive") {
    return Bad("--schedule must be ordered or adaptive, got '" + o.schedule + "'");
  }
  if (!(o.advance_at >= 0 && o.advance_at <= 1)) return Bad("--advance-at must be in [0, 1]");
  if (o.reward != "auto" && o.reward != "judge" && o.reward != "compile") {
    return Bad("--reward must be auto, judge or compile, got '" + o.reward + "'");
  }
  if (o.judge_jobs < 1) return Bad("--judge-jobs must be >= 1");
  if (!(o.judge_timeout_s > 0)) return Bad("--judge-timeout must be > 0");
  if (o.steps < 1) return Bad("--steps must be >= 1");
  if (!o.resume_dir.empty() && o.schedule != "ordered") {
    return Bad("--resume needs --schedule ordered: the adaptive schedule's running success rate is not saved");
  }
  if (o.tasks_per_step < 1) return Bad("--tasks-per-step must be >= 1");
  if (o.group_size < 2) return Bad("--group-size must be >= 2 (advantages are normalised within a group)");
  if (o.inject_per_group < 0 || o.inject_per_group >= o.group_size) {
    return Bad("--inject-per-group must be in [0, group size)");
  }
  if (o.max_new_tokens < 1) return Bad("--max-new-tokens must be >= 1");
  if (o.denoising_steps < 1) return Bad("--denoising-steps must be >= 1");
  if (o.inner_epochs < 1) return Bad("--inner-epochs must be >= 1");
  if (o.max_trace_tokens < 0) return Bad("--max-trace-tokens must be >= 0 (0 = no cap)");
  if (o.dist_timeout_s < 1) return Bad("--dist-timeout must be >= 1");
  if (o.collective_timeout_s < 1) return Bad("--collective-timeout must be >= 1");
  if (!(o.lr > 0)) return Bad("--lr must be > 0");
  if (!(o.clip_eps > 0)) return Bad("--clip-eps must be > 0");
  if (!(o.beta >= 0)) return Bad("--beta must be >= 0");
  if (!(o.temperature >= 0)) return Bad("--temperature must be >= 0");
  if (!(o.speedup_bonus >= 0)) return Bad("--speedup-bonus must be >= 0");
  return Status::Ok();
}

// Known-good answers by task id, from JSONL lines {"id", "answer"} or CuKe
// example lines (their middle/program, fenced as SFT trains it).
Expected<std::map<std::string, std::string>> ReadKnownGood(const std::string& path, const PromptTemplates& templates) {
  std::map<std::string, std::string> out;
  if (path.empty()) return out;
  std::ifstream in(path);
  if (!in) return Bad("--inject-known-good " + path + " cannot be opened");
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("answer")) {
      if (!j["answer"].is_string() || !j.contains("id") || !j["id"].is_string()) {
        return Bad(where + ": a known-good line needs string fields \"id\" and \"answer\"");
      }
      out[j["id"].get<std::string>()] = j["answer"].get<std::string>();
      continue;
    }
    auto e = CukeExample::FromJsonLine(line, where);
    if (!e.ok()) return Bad("known-good answers: " + e.status().message());
    auto pa = ExamplePromptAndAnswer(*e, templates);
    if (!pa.ok()) return Bad(where + ": " + pa.status().message());
    out[e->id] = pa->answer;
  }
  return out;
}

struct Rollout {
  RolloutTrace trace;
  std::vector<int32_t> answer;  // cut at EOS
  bool injected = false;
  double reward = 0;
  double advantage = 0;
};

Expected<RlReport> RunRlRank(const RlOptions& o, DataParallel& dp,
                             const std::function<void(const std::string&)>& log_fn) {
  // Only rank 0 prints progress, writes the CSV and checkpoints.
  auto log = [&](const std::string& line) {
    if (log_fn && dp.is_root()) log_fn(line);
  };
  const int world = dp.world_size();
  auto device = ParseTrainDevice(o.device);
  if (!device.ok()) return device.status();
  if (device->is_cuda() && !device->has_index() && world > 1) {
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(dp.local_rank()));
  }
  auto tokenizer = Tokenizer::Load(o.model_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  SdarModelOptions mo;
  mo.device = *device;
  // The policy: the start model, or a resumed run's last checkpoint.
  auto model = SdarModel::Load(o.resume_dir.empty() ? o.model_dir : o.resume_dir, mo);
  if (!model.ok()) return model.status();
  auto reference = SdarModel::Load(o.model_dir, mo);  // frozen KL reference
  if (!reference.ok()) return reference.status();
  if (!o.resume_dir.empty()) {
    auto pw = model->NamedWeights(), rw = reference->NamedWeights();
    bool same = pw.size() == rw.size();
    for (size_t i = 0; same && i < pw.size(); ++i) same = pw[i].first == rw[i].first && pw[i].second.sizes() == rw[i].second.sizes();
    if (!same) {
      return Status(StatusCode::kInvalidArgument, "dice train rl: --resume " + o.resume_dir +
                                                      " does not hold a model of --model " + o.model_dir +
                                                      "'s architecture (weight names or shapes differ)");
    }
  }
  const SdarConfig& cfg = model->config();
  auto eos = EndOfTurnId(*tokenizer, cfg);
  if (!eos.ok()) return eos.status();
  const std::vector<int64_t> eos_ids = AnswerStopIds(*tokenizer, *eos);

  auto loaded_templates = LoadTemplatesOrDefault(o.templates_path);
  if (!loaded_templates.ok()) return loaded_templates.status();
  const PromptTemplates& templates = *loaded_templates;
  auto read = ReadStageTasks(o.tasks_path, o.stage, "train", 0, "dice train rl",
                             [&](const std::string& s) { log("skipped malformed line: " + s); });
  if (!read.ok()) return read.status();
  std::vector<CukeExample> tasks = std::move(*read);
  auto known_good = ReadKnownGood(o.inject_path, templates);
  if (!known_good.ok()) return known_good.status();
  std::vector<int> levels;
  for (const auto& t : tasks) levels.push_back(t.level);
  TaskSchedule schedule(levels, o.schedule == "adaptive" ? TaskSchedule::Mode::kAdaptive : TaskSchedule::Mode::kOrdered,
                        o.tasks_per_step, o.advance_at, std::max<int64_t>(o.group_size, 8));

  RlReport report;
  std::unique_ptr<DeviceFormJudge> device_judge;  // kind "device" tasks: Tuner + dice-worker, kept across steps
  const RewardOptions reward_options = MakeRewardOptions(o.reward, o.stage, device->str(), o.judge_jobs,
                                                         o.judge_timeout_s, o.arch, o.speedup_bonus, o.seed,
                                                         &device_judge);
  const bool judge = reward_options.judge;
  const ProgramJudgeOptions& judge_options = reward_options.judge_options;
  if (judge) {
    log("rl: reward = compiles AND correct: KernelBench protocol against each task's reference program on " +
        judge_options.device + " (dice judge), " + std::to_string(o.judge_jobs) + " at a time");
  } else {
    report.correctness_note =
        std::string("correctness not checked: ") +
        (torch::cuda::is_available() ? "--reward compile" : "no CUDA device on this machine (--reward auto)") +
        "; reward = compiles (NVRTC " + o.arch + ")";
    log("rl: " + report.correctness_note);
    if (o.speedup_bonus > 0) log("rl: --speedup-bonus has no effect while correctness/timing is not checked");
  }
  log("rl: " + std::to_string(tasks.size()) + " tasks (stage " + o.stage + "), " +
      std::to_string(known_good->size()) + " known-good answers, group size " + std::to_string(o.group_size));

  auto weights = model->NamedWeights();
  std::vector<torch::Tensor> params, initial;
  if (world > 1 && device->is_cuda()) {
    try {
      log(dp.UseNccl(*device) ? "rl: gradients all-reduced with NCCL"
                              : "rl: this build has no NCCL: gradients all-reduced through the TCPStore (host)");
    } catch (const std::exception& e) {
      return Status(StatusCode::kCudaError, std::string("dice train rl: starting NCCL: ") + e.what());
    }
  }
  {
    // Policy and reference start from rank 0's weights on every rank.
    std::vector<torch::Tensor> all;
    for (auto& [name, t] : weights) all.push_back(t);
    for (auto& [name, t] : reference->NamedWeights()) all.push_back(t);
    DICE_RETURN_IF_ERROR(dp.Broadcast(all));
  }
  for (auto& [name, t] : weights) {
    initial.push_back(t.detach().clone());
    params.push_back(t.requires_grad_(true));
  }
  torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(o.lr).weight_decay(0.0).betas({0.9, 0.95}));
  int64_t first_step = 0;
  if (!o.resume_dir.empty()) {
    auto state = LoadTrainerState(o.resume_dir, "rl", &optimizer);
    if (!state.ok()) return state.status();
    first_step = *state;
    if (first_step >= o.steps) {
      return Status(StatusCode::kInvalidArgument, "dice train rl: --resume " + o.resume_dir + " was saved at step " +
                                                      std::to_string(first_step) + ": --steps (the total, " +
                                                      std::to_string(o.steps) + ") must be larger");
    }
    // The ordered schedule is a function of the step: replay the steps done.
    for (int64_t i = 0; i < first_step; ++i) (void)schedule.Next();
    log("rl: resumed from " + o.resume_dir + " at step " + std::to_string(first_step) + "; KL reference " +
        o.model_dir);
  }
  report.first_step = first_step;
  const std::string csv_path = o.csv_path.empty() ? o.out_dir + "/rl_log.csv" : o.csv_path;
  std::ofstream csv;
  if (dp.is_root()) {
    DICE_RETURN_IF_ERROR(MakeDirs(o.out_dir));
    csv.open(csv_path, first_step > 0 ? std::ios::app : std::ios::trunc);
    if (!csv) return Status(StatusCode::kIoError, "cannot write " + csv_path);
    // A resumed run appends to its CSV; a new file (another --out) gets the header.
    csv.seekp(0, std::ios::end);
    if (csv.tellp() == std::streampos(0)) {
      csv << "step,level,mean_reward,policy_reward,rollouts,injected,compiled,groups_used,groups_dropped,scored_tokens,"
             "loss,rollout_tokens_per_s,seconds\n";
    }
  }
  if (world > 1) {
    log("rl: data parallel over " + std::to_string(world) + " ranks: each takes a disjoint share of the step's " +
        std::to_string(o.tasks_per_step) + " tasks" +
        (o.tasks_per_step < world ? " (fewer tasks than ranks: some ranks idle)" : ""));
  }

  const int64_t B = cfg.block_size;
  try {
    for (int64_t step = first_step + 1; step <= o.steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      RlStepReport sr;
      sr.step = step;
      const auto picked = schedule.Next();
      sr.level = tasks[picked.front()].level;
      std::vector<Rollout> used;  // rollouts of groups that carry signal
      // Rewards of the whole step, slot ti * G + i for rollout i of task ti;
      // this rank fills its tasks' slots, the all-reduce fills the rest.
      std::vector<double> step_rewards(picked.size() * static_cast<size_t>(o.group_size), 0.0);
      double policy_reward_sum = 0, decode_s = 0;
      int64_t policy_rollouts = 0, decoded_tokens = 0;
      const auto [shard_begin, shard_end] = ShardRange(static_cast<int64_t>(picked.size()), dp.rank(), world);
      for (size_t ti = static_cast<size_t>(shard_begin); ti < static_cast<size_t>(shard_end); ++ti) {
        const CukeExample& task = tasks[picked[ti]];
        auto pa = ExamplePromptAndAnswer(task, templates);
        if (!pa.ok()) return pa.status();
        const std::vector<int32_t> prompt = tokenizer->Encode(pa->prompt);
        // Rollouts decode eagerly: a graph capture per (task, batch) would cost more than it saves here.
        const DecodeOptions d = RolloutDecodeOptions(
            o.max_new_tokens, o.denoising_steps, o.confidence_threshold, o.temperature, o.group_size,
            o.seed * 1000003ULL + static_cast<uint64_t>(step) * 1009ULL + ti, eos_ids, /*cuda=*/false);
        auto decoded = Decode(*model, prompt, d);
        if (!decoded.ok()) return decoded.status();
        decode_s += decoded->seconds;
        std::vector<Rollout> group(o.group_size);
        for (int64_t i = 0; i < o.group_size; ++i) {
          group[i].trace = {prompt, decoded->trace_tokens[i], decoded->trace_steps[i]};
          group[i].answer = decoded->tokens[i];
          decoded_tokens += static_cast<int64_t>(decoded->trace_tokens[i].size());
        }
        auto good = known_good->find(task.id);
        std::vector<int32_t> good_tokens;
        if (good != known_good->end()) {
          good_tokens = tokenizer->Encode(good->second);
          // Prompt + answer + EOS, padded to a whole block, must fit the
          // model's context, or the trajectory loss could not score it.
          const int64_t need = (static_cast<int64_t>(prompt.size() + good_tokens.size()) + 1 + B - 1) / B * B;
          if (need > cfg.max_position_embeddings) {
            log("rl: step " + std::to_string(step) + ": known-good answer of " + task.id + " not injected: prompt " +
                std::to_string(prompt.size()) + " + answer " + std::to_string(good_tokens.size()) +
                " tokens exceed the context (" + std::to_string(cfg.max_position_embeddings) + ")");
            good = known_good->end();
          }
        }
        if (good != known_good->end()) {
          for (int64_t i = o.group_size - o.inject_per_group; i < o.group_size; ++i) {
            Rollout& r = group[i];
            r.injected = true;
            r.answer = good_tokens;
            std::vector<int32_t> toks = r.answer;
            toks.push_back(static_cast<int32_t>(*eos));
            const int64_t plen = static_cast<int64_t>(prompt.size());
            while ((plen + static_cast<int64_t>(toks.size())) % B != 0) toks.push_back(static_cast<int32_t>(*eos));
            std::vector<int32_t> steps;
            for (size_t j = 0; j < toks.size(); ++j) {
              const int64_t offset = (plen + static_cast<int64_t>(j)) % B;
              steps.push_back(static_cast<int32_t>(offset * o.denoising_steps / B));
            }
            r.trace = {prompt, toks, steps};
          }
        }
        // Reward (rl.h step 3, reward.h): judged programs, or NVRTC-compiled device form.
        std::vector<double> rewards;
        std::vector<std::string> answer_texts;
        for (const Rollout& r : group) answer_texts.push_back(tokenizer->Decode(r.answer));
        auto scored = RewardAnswers(task, answer_texts, reward_options);
        if (!scored.ok()) return scored.status();
        std::vector<double> group_rewards(static_cast<size_t>(o.group_size), 0.0);
        std::vector<std::string> whys(static_cast<size_t>(o.group_size));
        for (int64_t i = 0; i < o.group_size; ++i) {
          if ((*scored)[i].compiled) ++sr.compiled;
          group_rewards[i] = (*scored)[i].reward;
          whys[i] = (*scored)[i].why;
        }
        bool explained = false;  // why the group's first unrewarded rollout earned nothing
        for (int64_t i = 0; i < o.group_size; ++i) {
          Rollout& r = group[i];
          const double reward = group_rewards[i];
          const std::string& why = whys[i];
          if (r.injected && reward == 0) {  // a known-good answer that earns nothing is worth a look
            log("rl: known-good answer of " + task.id + " earns no reward: " + Printable(why, 200));
          } else if (!r.injected && reward == 0 && !explained) {
            log("rl: step " + std::to_string(step) + " " + task.id + ": rollout " + std::to_string(i) +
                " earns nothing: " + Printable(why, 200));
            explained = true;
          }
          r.reward = reward;
          rewards.push_back(reward);
          step_rewards[ti * static_cast<size_t>(o.group_size) + static_cast<size_t>(i)] = reward;
          if (r.injected) {
            ++sr.injected;
          } else {
            policy_reward_sum += reward;
            ++policy_rollouts;
          }
        }
        {  // the group's own (decoded) rollouts: the per-task trend of a run
          int64_t own = 0, own_rewarded = 0, own_compiled = 0;
          for (int64_t i = 0; i < o.group_size; ++i) {
            if (group[i].injected) continue;
            ++own;
            if (group_rewards[i] > 0) ++own_rewarded;
            if ((*scored)[i].compiled) ++own_compiled;
          }
          log("rl: step " + std::to_string(step) + " " + task.id + " (level " + std::to_string(task.level) +
              "): policy rewarded " + std::to_string(own_rewarded) + "/" + std::to_string(own) + ", compiled " +
              std::to_string(own_compiled) + "/" + std::to_string(own));
        }
        auto adv = GroupAdvantages(rewards);
        if (!adv) {
          ++sr.groups_dropped;
          continue;
        }
        ++sr.groups_used;
        for (int64_t i = 0; i < o.group_size; ++i) {
          group[i].advantage = (*adv)[i];
          used.push_back(std::move(group[i]));
        }
      }
      {
        // Step totals over all ranks; the schedule sees the same rewards everywhere.
        std::vector<double> sums = {static_cast<double>(sr.compiled), static_cast<double>(sr.injected),
                                    static_cast<double>(sr.groups_used), static_cast<double>(sr.groups_dropped),
                                    policy_reward_sum, static_cast<double>(policy_rollouts),
                                    static_cast<double>(decoded_tokens), decode_s};
        sums.insert(sums.end(), step_rewards.begin(), step_rewards.end());
        auto all_sums = dp.AllReduceSum(sums);
        if (!all_sums.ok()) return all_sums.status();
        const auto& g = *all_sums;
        sr.compiled = static_cast<int64_t>(g[0]);
        sr.injected = static_cast<int64_t>(g[1]);
        sr.groups_used = static_cast<int64_t>(g[2]);
        sr.groups_dropped = static_cast<int64_t>(g[3]);
        policy_reward_sum = g[4];
        policy_rollouts = static_cast<int64_t>(g[5]);
        decoded_tokens = static_cast<int64_t>(g[6]);
        decode_s = g[7] / world;  // ranks decode at the same time
        step_rewards.assign(g.begin() + 8, g.end());
      }
      schedule.Report(step_rewards);
      sr.rollouts = static_cast<int64_t>(step_rewards.size());
      for (double r : step_rewards) sr.mean_reward += r / std::max<size_t>(1, step_rewards.size());
      sr.policy_reward = policy_rollouts ? policy_reward_sum / policy_rollouts : 0;
      sr.rollout_tokens_per_s = decode_s > 0 ? decoded_tokens / decode_s : 0;

      // TraceRL update on the groups that carry an advantage. A long
      // rollout is packed in chunks of at most max_trace_tokens (losses.h
      // PackTraceChunks); each chunk is one forward and one backward.
      struct Piece {
        size_t rollout;
        PackedTrace packed;
        torch::Tensor old_lp, ref_lp;
      };
      std::vector<Piece> pieces;
      int64_t total = 0;
      if (!used.empty()) {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < used.size(); ++i) {
          auto chunks = PackTraceChunks(used[i].trace, B, cfg.mask_token_id, o.max_trace_tokens, *device);
          if (!chunks.ok()) return chunks.status();
          for (auto& p : *chunks) {
            if (p.scored.size(0) == 0) continue;
            auto lo = model->ForwardPacked(p.ids, p.positions, p.mask);
            if (!lo.ok()) return lo.status();
            auto lr = reference->ForwardPacked(p.ids, p.positions, p.mask);
            if (!lr.ok()) return lr.status();
            torch::Tensor old_lp = ScoredLogProbs(*lo, p.scored, p.targets, cfg.mask_token_id);
            torch::Tensor ref_lp = ScoredLogProbs(*lr, p.scored, p.targets, cfg.mask_token_id);
            total += p.scored.size(0);
            pieces.push_back(Piece{i, std::move(p), std::move(old_lp), std::move(ref_lp)});
          }
        }
      }
      // The token mean runs over the scored tokens of all ranks: each rank's
      // share is weighted by n / global total and the gradients averaged.
      auto global_total = dp.AllReduceSum({static_cast<double>(total)});
      if (!global_total.ok()) return global_total.status();
      total = static_cast<int64_t>((*global_total)[0]);
      if (total > 0) {
        sr.scored_tokens = total;
        for (int64_t epoch = 0; epoch < o.inner_epochs; ++epoch) {
          optimizer.zero_grad();
          double loss_sum = 0;
          for (const Piece& piece : pieces) {
            const PackedTrace& p = piece.packed;
            const int64_t n = p.scored.size(0);
            auto logits = model->ForwardPacked(p.ids, p.positions, p.mask);
            if (!logits.ok()) return logits.status();
            auto lp = ScoredLogProbs(*logits, p.scored, p.targets, cfg.mask_token_id);
            auto a = torch::full({n}, used[piece.rollout].advantage, lp.options());
            auto loss = TraceRlLoss(lp, piece.old_lp, piece.ref_lp, a, o.clip_eps, o.beta);
            if (!loss.ok()) return loss.status();
            auto part = *loss * (static_cast<double>(n) / static_cast<double>(total));
            (part * static_cast<double>(world)).backward();
            loss_sum += part.item<double>();
          }
          DICE_RETURN_IF_ERROR(dp.AllReduceMeanGradients(params));
          auto losses = dp.AllReduceSum({loss_sum});
          if (!losses.ok()) return losses.status();
          if (o.grad_clip > 0) torch::nn::utils::clip_grad_norm_(params, o.grad_clip);
          optimizer.step();
          sr.loss = (*losses)[0];
        }
      }
      sr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      report.steps.push_back(sr);
      if (dp.is_root()) csv << sr.step << "," << sr.level << "," << sr.mean_reward << "," << sr.policy_reward << "," << sr.rollouts << ","
          << sr.injected << "," << sr.compiled << "," << sr.groups_used << "," << sr.groups_dropped << ","
          << sr.scored_tokens << "," << sr.loss << "," << sr.rollout_tokens_per_s << "," << sr.seconds << "\n";
      if (dp.is_root()) csv.flush();
      char line[320];
      std::snprintf(line, sizeof line,
                    "rl step %lld/%lld level %d reward %.3f (policy %.3f) compiled %lld/%lld injected %lld groups "
                    "%lld used %lld dropped, %lld tokens scored, loss %.5f, rollout %.0f tok/s, %.1f s",
                    static_cast<long long>(step), static_cast<long long>(o.steps), sr.level, sr.mean_reward,
                    sr.policy_reward, static_cast<long long>(sr.compiled), static_cast<long long>(sr.rollouts),
                    static_cast<long long>(sr.injected), static_cast<long long>(sr.groups_used),
                    static_cast<long long>(sr.groups_dropped), static_cast<long long>(sr.scored_tokens), sr.loss,
                    sr.rollout_tokens_per_s, sr.seconds);
      log(line);
      if (dp.is_root() && ((o.save_every > 0 && step % o.save_every == 0) || step == o.steps)) {
        DICE_RETURN_IF_ERROR(SaveCheckpoint(*model, o.model_dir, o.out_dir));
        DICE_RETURN_IF_ERROR(SaveTrainerState(o.out_dir, "rl", step, optimizer));
        report.checkpoint = o.out_dir;
        log("rl: checkpoint " + o.out_dir + " (step " + std::to_string(step) + ")");
      }
    }
    torch::NoGradGuard no_grad;
    double sq = 0;
    for (size_t i = 0; i < params.size(); ++i) sq += (params[i].detach() - initial[i]).pow(2).sum().item<double>();
    report.parameter_change = std::sqrt(sq);
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, std::string("dice train rl: ") + e.what_without_backtrace() +
                                             (report.checkpoint.empty() ? "" : "; last checkpoint " + report.checkpoint));
  }
  report.parameter_digest = ParameterDigest(params);
  DICE_RETURN_IF_ERROR(dp.Finish());
  return report;
}

}  // namespace

Expected<RlReport> RunRl(const RlOptions& o, const std::function<void(const std::string&)>& log_fn) {
  DICE_RETURN_IF_ERROR(CheckOptions(o));
  return RunOnThisRank<RlReport>(o.dist_timeout_s, o.collective_timeout_s,
                                  [&](DataParallel& dp) { return RunRlRank(o, dp, log_fn); });
}

}  // namespace dice::training
