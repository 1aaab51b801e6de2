// `dice train rl` (BiC-RL with TraceRL): see dice/training/rl.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/training/rl.h"

#include <algorithm>
#include <memory>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "dice/generator/decode_session.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/prompts.h"
#include "dice/generator/sdar_model.h"
#include "dice/generator/tokenizer.h"
#include "dice/runtime/program_judge.h"
#include "dice/training/checkpoint_io.h"
#include "dice/training/distributed.h"
#include "dice/training/examples.h"
#include "dice/training/injection.h"
#include "dice/training/losses.h"
#include "dice/training/reward.h"
#include "dice/training/rollout_numerics.h"
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
  if (auto mode = InjectionSchedule::ParseMode(o.inject_until); !mode.ok()) return Bad(mode.status().message());
  if (o.inject_earn_threshold < 1) return Bad("--inject-earn-threshold must be >= 1");
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
Expected<std::map<std::string, std::string>> ReadKnownGood(const std::string& path, const generator::PromptTemplates& templates) {
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
  std::vector<float> decoder_logp;  // beside trace.tokens: the decoder's log p (empty: injected)
  bool injected = false;
  double reward = 0;
  double advantage = 0;
};

// What the rollouts of one step add up to, before the totals over ranks.
struct StepRollouts {
  std::vector<Rollout> used;  // rollouts of groups that carry signal
  // Rewards of the whole step, slot ti * G + i for rollout i of task ti;
  // this rank fills its tasks' slots, the all-reduce fills the rest.
  std::vector<double> step_rewards;
  double policy_reward_sum = 0, decode_s = 0;
  int64_t policy_rollouts = 0, decoded_tokens = 0;
  int64_t graphs_made = 0;  // step graphs the rollouts' DecodeSession captured this step
  // Rewarded decoded (not injected) rollouts per task slot of the step, for
  // the injection schedule; filled like step_rewards.
  std::vector<double> own_rewarded;
};

// One chunk of a used rollout's packed trace with its logp_old and
// logp_ref (float32 [scored tokens]), computed once per step.
struct Piece {
  size_t rollout;
  PackedTrace packed;
  torch::Tensor old_lp, ref_lp;
};

// One rank's BiC-RL run (rl.h). Run() is the pipeline: load the models and
// the tasks, set up the reward, the optimizer and the CSV, then Step() per
// step (rollouts -> rewards -> totals over ranks -> TraceRL update -> log
// and checkpoint). Only rank 0 prints progress, writes the CSV and
// checkpoints.
class RlRun : private TrainerRank<RlReport> {
 public:
  RlRun(const RlOptions& o, DataParallel& dp, const std::function<void(const std::string&)>& log_fn)
      : TrainerRank("rl", dp, log_fn), o_(o) {}

  // Errors: see RunRl (rl.h).
  Expected<RlReport> Run() {
    DICE_RETURN_IF_ERROR(LoadModels());
    DICE_RETURN_IF_ERROR(LoadTasks());
    DescribeReward();
    DICE_RETURN_IF_ERROR(PrepareOptimizer());
    DICE_RETURN_IF_ERROR(OpenCsv());
    if (world_ > 1) {
      Log("rl: data parallel over " + std::to_string(world_) + " ranks: each takes a disjoint share of the step's " +
          std::to_string(o_.tasks_per_step) + " tasks" +
          (o_.tasks_per_step < world_ ? " (fewer tasks than ranks: some ranks idle)" : ""));
    }
    DICE_RETURN_IF_ERROR(CatchTorchErrors([&]() -> Status {
      for (int64_t step = first_step_ + 1; step <= o_.steps; ++step) DICE_RETURN_IF_ERROR(Step(step));
      torch::NoGradGuard no_grad;
      double sq = 0;
      for (size_t i = 0; i < params_.size(); ++i) sq += (params_[i].detach() - initial_[i]).pow(2).sum().item<double>();
      report_.parameter_change = std::sqrt(sq);
      return Status::Ok();
    }));
    return FinishRun();
  }

 private:
  // The device (cuda: this rank's GPU), the tokenizer, the policy (the start
  // model or a resumed run's last checkpoint), the frozen KL reference, the
  // stop ids and (CUDA, rollout_graphs) the rollouts' DecodeSession. Errors: those of the loaders; kInvalidArgument when
  // resume_dir holds another architecture.
  Status LoadModels() {
    DICE_RETURN_IF_ERROR(LoadDeviceAndTokenizer(o_.device, o_.model_dir));
    generator::SdarModelOptions mo;
    mo.device = device_;
    auto model = generator::SdarModel::Load(o_.resume_dir.empty() ? o_.model_dir : o_.resume_dir, mo);
    if (!model.ok()) return model.status();
    model_.emplace(std::move(*model));
    auto reference = generator::SdarModel::Load(o_.model_dir, mo);  // frozen KL reference
    if (!reference.ok()) return reference.status();
    reference_.emplace(std::move(*reference));
    if (!o_.resume_dir.empty()) {
      auto pw = model_->NamedWeights(), rw = reference_->NamedWeights();
      bool same = pw.size() == rw.size();
      for (size_t i = 0; same && i < pw.size(); ++i) {
        same = pw[i].first == rw[i].first && pw[i].second.sizes() == rw[i].second.sizes();
      }
      if (!same) {
        return Status(StatusCode::kInvalidArgument, "dice train rl: --resume " + o_.resume_dir +
                                                        " does not hold a model of --model " + o_.model_dir +
                                                        "'s architecture (weight names or shapes differ)");
      }
    }
    auto eos = EndOfTurnId(*tokenizer_, model_->config());
    if (!eos.ok()) return eos.status();
    eos_ = *eos;
    eos_ids_ = AnswerStopIds(*tokenizer_, eos_);
    // The optimizer updates the policy's weights in place, so the session's
    // graphs stay valid across steps (decode_session.h).
    if (o_.rollout_graphs && device_.is_cuda()) session_ = std::make_unique<generator::DecodeSession>(*model_);
    Log(std::string("rl: rollouts decode ") +
        (session_ ? "with CUDA graphs kept across tasks and steps (--rollout-graphs off: eager)" : "eagerly"));
    return Status::Ok();
  }

  // The prompt templates, the stage's train tasks, the known-good answers
  // and the task schedule. Errors: those of the readers.
  Status LoadTasks() {
    auto loaded_templates = LoadTemplatesOrDefault(o_.templates_path);
    if (!loaded_templates.ok()) return loaded_templates.status();
    templates_.emplace(std::move(*loaded_templates));
    auto read = ReadStageTasks(o_.tasks_path, o_.stage, "train", 0, "dice train rl",
                               [&](const std::string& s) { Log("skipped malformed line: " + s); });
    if (!read.ok()) return read.status();
    tasks_ = std::move(*read);
    auto known_good = ReadKnownGood(o_.inject_path, *templates_);
    if (!known_good.ok()) return known_good.status();
    known_good_ = std::move(*known_good);
    injection_.emplace(*InjectionSchedule::ParseMode(o_.inject_until), o_.inject_earn_threshold);
    std::vector<int> levels;
    for (const auto& t : tasks_) levels.push_back(t.level);
    schedule_.emplace(levels, o_.schedule == "adaptive" ? TaskSchedule::Mode::kAdaptive : TaskSchedule::Mode::kOrdered,
                      o_.tasks_per_step, o_.advance_at, std::max<int64_t>(o_.group_size, 8));
    return Status::Ok();
  }

  // The reward (rl.h step 3) and the log lines that say what it checks.
  void DescribeReward() {
    reward_options_ = MakeRewardOptions(o_.reward, o_.stage, device_.str(), o_.judge_jobs, o_.judge_timeout_s, o_.arch,
                                        o_.speedup_bonus, o_.seed, &device_judge_);
    if (reward_options_.judge) {
      Log("rl: reward = compiles AND correct: KernelBench protocol against each task's reference program on " +
          reward_options_.judge_options.device + " (dice judge), " + std::to_string(o_.judge_jobs) + " at a time");
    } else {
      report_.correctness_note =
          std::string("correctness not checked: ") +
          (torch::cuda::is_available() ? "--reward compile" : "no CUDA device on this machine (--reward auto)") +
          "; reward = compiles (NVRTC " + o_.arch + ")";
      Log("rl: " + report_.correctness_note);
      if (o_.speedup_bonus > 0) Log("rl: --speedup-bonus has no effect while correctness/timing is not checked");
    }
    Log("rl: " + std::to_string(tasks_.size()) + " tasks (stage " + o_.stage + "), " +
        std::to_string(known_good_.size()) + " known-good answers, group size " + std::to_string(o_.group_size));
  }

  // NCCL when there are several GPU ranks; policy and reference from rank
  // 0's weights; AdamW over the policy; a resumed run's optimizer state and
  // step (the ordered schedule replayed to it). Errors: kCudaError when NCCL
  // fails to start; those of the broadcast and LoadTrainerState;
  // kInvalidArgument when the resumed step is not before `steps`.
  Status PrepareOptimizer() {
    auto weights = model_->NamedWeights();
    DICE_RETURN_IF_ERROR(StartNccl(device_));
    {
      // Policy and reference start from rank 0's weights on every rank.
      std::vector<torch::Tensor> all;
      for (auto& [name, t] : weights) all.push_back(t);
      for (auto& [name, t] : reference_->NamedWeights()) all.push_back(t);
      DICE_RETURN_IF_ERROR(dp_.Broadcast(all));
    }
    for (auto& [name, t] : weights) {
      initial_.push_back(t.detach().clone());
      params_.push_back(t.requires_grad_(true));
    }
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        params_, torch::optim::AdamWOptions(o_.lr).weight_decay(0.0).betas({0.9, 0.95}));
    if (!o_.resume_dir.empty()) {
      auto state = LoadTrainerState(o_.resume_dir, "rl", optimizer_.get());
      if (!state.ok()) return state.status();
      first_step_ = *state;
      if (first_step_ >= o_.steps) {
        return Status(StatusCode::kInvalidArgument, "dice train rl: --resume " + o_.resume_dir + " was saved at step " +
                                                        std::to_string(first_step_) + ": --steps (the total, " +
                                                        std::to_string(o_.steps) + ") must be larger");
      }
      // The ordered schedule is a function of the step: replay the steps done.
      for (int64_t i = 0; i < first_step_; ++i) (void)schedule_->Next();
      Log("rl: resumed from " + o_.resume_dir + " at step " + std::to_string(first_step_) + "; KL reference " +
          o_.model_dir);
    }
    report_.first_step = first_step_;
    return Status::Ok();
  }

  // Rank 0: the output directory and the CSV (appended to on resume; a new
  // file gets the header). Errors: those of TrainerRank::OpenCsv.
  Status OpenCsv() {
    return TrainerRank::OpenCsv(o_.csv_path.empty() ? o_.out_dir + "/rl_log.csv" : o_.csv_path, o_.out_dir,
                                first_step_ > 0,
                                "step,level,mean_reward,policy_reward,rollouts,injected,compiled,groups_used,"
                                "groups_dropped,scored_tokens,loss,rollout_tokens_per_s,seconds,logp_gap_mean,logp_gap_max,"
                                "rollout_graphs_made\n");
  }

  // One RL step (rl.h steps 1-5), then its CSV row, log line and checkpoint.
  Status Step(int64_t step) {
    const auto t0 = std::chrono::steady_clock::now();
    RlStepReport sr;
    sr.step = step;
    const auto picked = schedule_->Next();
    sr.level = tasks_[picked.front()].level;
    StepRollouts acc;
    acc.step_rewards.assign(picked.size() * static_cast<size_t>(o_.group_size), 0.0);
    acc.own_rewarded.assign(picked.size(), 0.0);
    const auto [shard_begin, shard_end] = ShardRange(static_cast<int64_t>(picked.size()), dp_.rank(), world_);
    const int64_t made_before = session_ ? session_->counters().graphs_made : 0;
    for (size_t ti = static_cast<size_t>(shard_begin); ti < static_cast<size_t>(shard_end); ++ti) {
      DICE_RETURN_IF_ERROR(RolloutTask(tasks_[picked[ti]], ti, step, &sr, &acc));
    }
    if (session_) acc.graphs_made = session_->counters().graphs_made - made_before;
    DICE_RETURN_IF_ERROR(SumOverRanks(&sr, &acc));
    schedule_->Report(acc.step_rewards);
    ReportInjection(picked, acc, step);
    sr.rollouts = static_cast<int64_t>(acc.step_rewards.size());
    for (double r : acc.step_rewards) sr.mean_reward += r / std::max<size_t>(1, acc.step_rewards.size());
    sr.policy_reward = acc.policy_rollouts ? acc.policy_reward_sum / acc.policy_rollouts : 0;
    sr.rollout_tokens_per_s = acc.decode_s > 0 ? acc.decoded_tokens / acc.decode_s : 0;
    DICE_RETURN_IF_ERROR(Update(acc.used, &sr));
    sr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    report_.steps.push_back(sr);
    LogStep(sr);
    if (dp_.is_root() && ((o_.save_every > 0 && step % o_.save_every == 0) || step == o_.steps)) {
      DICE_RETURN_IF_ERROR(SaveCheckpoint(*model_, o_.model_dir, o_.out_dir));
      DICE_RETURN_IF_ERROR(SaveTrainerState(o_.out_dir, "rl", step, *optimizer_));
      report_.checkpoint = o_.out_dir;
      Log("rl: checkpoint " + o_.out_dir + " (step " + std::to_string(step) + ")");
    }
    return Status::Ok();
  }

  // rl.h steps 2-4 for the task in slot `ti` of the step: G rollouts, the
  // known-good answers injected, rewarded; a group with an advantage joins
  // acc->used, a group without one is counted as dropped.
  Status RolloutTask(const CukeExample& task, size_t ti, int64_t step, RlStepReport* sr, StepRollouts* acc) {
    auto pa = ExamplePromptAndAnswer(task, *templates_);
    if (!pa.ok()) return pa.status();
    const std::vector<int32_t> prompt = tokenizer_->Encode(pa->prompt);
    // With a session (CUDA, rollout_graphs) the step graphs captured for a
    // batch are replayed by every later task of that batch: no capture per task.
    generator::DecodeOptions d = RolloutDecodeOptions(
        o_.max_new_tokens, o_.denoising_steps, o_.confidence_threshold, o_.temperature, o_.group_size,
        o_.seed * 1000003ULL + static_cast<uint64_t>(step) * 1009ULL + ti, eos_ids_, session_ != nullptr);
    d.record_logprobs = true;  // the decoder-vs-trainer gap (rollout_numerics.h)
    auto decoded = generator::Decode(*model_, prompt, d, session_.get());
    if (!decoded.ok()) return decoded.status();
    acc->decode_s += decoded->seconds;
    std::vector<Rollout> group(o_.group_size);
    for (int64_t i = 0; i < o_.group_size; ++i) {
      group[i].trace = {prompt, decoded->trace_tokens[i], decoded->trace_steps[i]};
      group[i].answer = decoded->tokens[i];
      group[i].decoder_logp = std::move(decoded->trace_logprobs[i]);
      acc->decoded_tokens += static_cast<int64_t>(decoded->trace_tokens[i].size());
    }
    InjectKnownGood(task, prompt, step, &group);
    auto rewards = RewardGroup(task, ti, step, &group, sr, acc);
    if (!rewards.ok()) return rewards.status();
    auto adv = GroupAdvantages(*rewards);
    if (!adv) {
      ++sr->groups_dropped;
      return Status::Ok();
    }
    ++sr->groups_used;
    for (int64_t i = 0; i < o_.group_size; ++i) {
      group[i].advantage = (*adv)[i];
      acc->used.push_back(std::move(group[i]));
    }
    return Status::Ok();
  }

  // rl.h step 2's injection: the last inject_per_group rollouts become the
  // task's known-good answer, traced left to right, unless prompt + answer
  // + EOS in whole blocks would not fit the context (then logged).
  void InjectKnownGood(const CukeExample& task, const std::vector<int32_t>& prompt, int64_t step,
                       std::vector<Rollout>* group) const {
    auto good = known_good_.find(task.id);
    if (good == known_good_.end() || !injection_->ShouldInject(task.id)) return;
    const generator::SdarConfig& cfg = model_->config();
    const int64_t B = cfg.block_size;
    std::vector<int32_t> good_tokens = tokenizer_->Encode(good->second);
    // Prompt + answer + EOS, padded to a whole block, must fit the
    // model's context, or the trajectory loss could not score it.
    const int64_t need = (static_cast<int64_t>(prompt.size() + good_tokens.size()) + 1 + B - 1) / B * B;
    if (need > cfg.max_position_embeddings) {
      Log("rl: step " + std::to_string(step) + ": known-good answer of " + task.id + " not injected: prompt " +
          std::to_string(prompt.size()) + " + answer " + std::to_string(good_tokens.size()) +
          " tokens exceed the context (" + std::to_string(cfg.max_position_embeddings) + ")");
      return;
    }
    for (int64_t i = o_.group_size - o_.inject_per_group; i < o_.group_size; ++i) {
      Rollout& r = (*group)[i];
      r.injected = true;
      r.answer = good_tokens;
      r.decoder_logp.clear();  // not decoded: nothing to compare
      std::vector<int32_t> toks = r.answer;
      toks.push_back(static_cast<int32_t>(eos_));
      const int64_t plen = static_cast<int64_t>(prompt.size());
      while ((plen + static_cast<int64_t>(toks.size())) % B != 0) toks.push_back(static_cast<int32_t>(eos_));
      std::vector<int32_t> steps;
      for (size_t j = 0; j < toks.size(); ++j) {
        const int64_t offset = (plen + static_cast<int64_t>(j)) % B;
        steps.push_back(static_cast<int32_t>(offset * o_.denoising_steps / B));
      }
      r.trace = {prompt, toks, steps};
    }
  }

  // rl.h step 3 for one group: rewards each rollout (reward.h), books them
  // into the step's counters and slots, logs why rollouts earn nothing and
  // the group's own trend; returns the group's rewards in rollout order.
  Expected<std::vector<double>> RewardGroup(const CukeExample& task, size_t ti, int64_t step,
                                            std::vector<Rollout>* group, RlStepReport* sr, StepRollouts* acc) const {
    std::vector<std::string> answer_texts;
    for (const Rollout& r : *group) answer_texts.push_back(tokenizer_->Decode(r.answer));
    auto scored = RewardAnswers(task, answer_texts, reward_options_);
    if (!scored.ok()) return scored.status();
    std::vector<double> rewards;
    bool explained = false;  // why the group's first unrewarded rollout earned nothing
    for (int64_t i = 0; i < o_.group_size; ++i) {
      if ((*scored)[i].compiled) ++sr->compiled;
    }
    for (int64_t i = 0; i < o_.group_size; ++i) {
      Rollout& r = (*group)[i];
      const double reward = (*scored)[i].reward;
      const std::string& why = (*scored)[i].why;
      if (r.injected && reward == 0) {  // a known-good answer that earns nothing is worth a look
        Log("rl: known-good answer of " + task.id + " earns no reward: " + Printable(why, 200));
      } else if (!r.injected && reward == 0 && !explained) {
        Log("rl: step " + std::to_string(step) + " " + task.id + ": rollout " + std::to_string(i) +
            " earns nothing: " + Printable(why, 200));
        explained = true;
      }
      r.reward = reward;
      rewards.push_back(reward);
      acc->step_rewards[ti * static_cast<size_t>(o_.group_size) + static_cast<size_t>(i)] = reward;
      if (r.injected) {
        ++sr->injected;
      } else {
        acc->policy_reward_sum += reward;
        ++acc->policy_rollouts;
      }
    }
    // The group's own (decoded) rollouts: the per-task trend of a run.
    int64_t own = 0, own_rewarded = 0, own_compiled = 0;
    for (int64_t i = 0; i < o_.group_size; ++i) {
      if ((*group)[i].injected) continue;
      ++own;
      if (rewards[i] > 0) ++own_rewarded;
      if ((*scored)[i].compiled) ++own_compiled;
    }
    acc->own_rewarded[ti] = static_cast<double>(own_rewarded);
    Log("rl: step " + std::to_string(step) + " " + task.id + " (level " + std::to_string(task.level) +
        "): policy rewarded " + std::to_string(own_rewarded) + "/" + std::to_string(own) + ", compiled " +
        std::to_string(own_compiled) + "/" + std::to_string(own));
    return rewards;
  }

  // Step totals over all ranks (counts, rewards, throughput), so the
  // schedule sees the same rewards everywhere. Errors: the collective's.
  Status SumOverRanks(RlStepReport* sr, StepRollouts* acc) const {
    std::vector<double> sums = {static_cast<double>(sr->compiled), static_cast<double>(sr->injected),
                                static_cast<double>(sr->groups_used), static_cast<double>(sr->groups_dropped),
                                acc->policy_reward_sum, static_cast<double>(acc->policy_rollouts),
                                static_cast<double>(acc->decoded_tokens), acc->decode_s};
    sums.insert(sums.end(), acc->step_rewards.begin(), acc->step_rewards.end());
    sums.insert(sums.end(), acc->own_rewarded.begin(), acc->own_rewarded.end());
    sums.push_back(static_cast<double>(acc->graphs_made));
    auto all_sums = dp_.AllReduceSum(sums);
    if (!all_sums.ok()) return all_sums.status();
    const auto& g = *all_sums;
    sr->compiled = static_cast<int64_t>(g[0]);
    sr->injected = static_cast<int64_t>(g[1]);
    sr->groups_used = static_cast<int64_t>(g[2]);
    sr->groups_dropped = static_cast<int64_t>(g[3]);
    acc->policy_reward_sum = g[4];
    acc->policy_rollouts = static_cast<int64_t>(g[5]);
    acc->decoded_tokens = static_cast<int64_t>(g[6]);
    acc->decode_s = g[7] / world_;  // ranks decode at the same time
    const auto rewards_end = g.begin() + 8 + static_cast<std::ptrdiff_t>(acc->step_rewards.size());
    acc->step_rewards.assign(g.begin() + 8, rewards_end);
    acc->own_rewarded.assign(rewards_end, g.end() - 1);
    sr->rollout_graphs_made = static_cast<int64_t>(g.back());
    return Status::Ok();
  }

  // The injection schedule (injection.h) books each task's rewarded own
  // rollouts of the step (totals over ranks: every rank decides alike) and
  // says when injection stops.
  void ReportInjection(const std::vector<size_t>& picked, const StepRollouts& acc, int64_t step) {
    for (size_t ti = 0; ti < picked.size(); ++ti) {
      const std::string& id = tasks_[picked[ti]].id;
      const bool before = injection_->ShouldInject(id);
      injection_->Report(id, static_cast<int64_t>(acc.own_rewarded[ti]));
      if (before && !injection_->ShouldInject(id) && !known_good_.empty()) {
        Log("rl: step " + std::to_string(step) + ": the policy's own rollouts earned reward on " + id +
            ": known-good injection stops " +
            (injection_->mode() == InjectionSchedule::Mode::kUntilAnyEarned ? "for every task" : "for this task"));
      }
    }
  }

  // rl.h step 5: the TraceRL update on the groups that carry an advantage.
  // A long rollout is packed in chunks of at most max_trace_tokens (losses.h
  // PackTraceChunks); each chunk is one forward and one backward. Sets
  // sr->scored_tokens and sr->loss. Errors: those of the forwards, the loss
  // and the collectives.
  Status Update(const std::vector<Rollout>& used, RlStepReport* sr) {
    std::vector<Piece> pieces;
    int64_t total = 0;
    LogProbGap gap;
    DICE_RETURN_IF_ERROR(ScoreOldAndReference(used, &pieces, &total, &gap));
    // The token mean runs over the scored tokens of all ranks: each rank's
    // share is weighted by n / global total and the gradients averaged.
    // The logp gap's counts add up; its maximum is each rank's in its slot.
    std::vector<double> sums(3 + world_, 0.0);
    sums[0] = static_cast<double>(total);
    sums[1] = static_cast<double>(gap.tokens);
    sums[2] = gap.sum_abs;
    sums[3 + dp_.rank()] = gap.max_abs;
    auto global_total = dp_.AllReduceSum(sums);
    if (!global_total.ok()) return global_total.status();
    total = static_cast<int64_t>((*global_total)[0]);
    sr->logp_gap_tokens = static_cast<int64_t>((*global_total)[1]);
    sr->logp_gap_mean = sr->logp_gap_tokens > 0 ? (*global_total)[2] / sr->logp_gap_tokens : 0.0;
    sr->logp_gap_max = *std::max_element(global_total->begin() + 3, global_total->end());
    if (total <= 0) return Status::Ok();
    sr->scored_tokens = total;
    const int64_t mask_id = model_->config().mask_token_id;
    for (int64_t epoch = 0; epoch < o_.inner_epochs; ++epoch) {
      optimizer_->zero_grad();
      double loss_sum = 0;
      for (const Piece& piece : pieces) {
        const PackedTrace& p = piece.packed;
        const int64_t n = p.scored.size(0);
        auto logits = model_->ForwardPacked(p.ids, p.positions, p.mask);
        if (!logits.ok()) return logits.status();
        auto lp = ScoredLogProbs(*logits, p.scored, p.targets, mask_id);
        auto a = torch::full({n}, used[piece.rollout].advantage, lp.options());
        auto loss = TraceRlLoss(lp, piece.old_lp, piece.ref_lp, a, o_.clip_eps, o_.beta);
        if (!loss.ok()) return loss.status();
        auto part = *loss * (static_cast<double>(n) / static_cast<double>(total));
        (part * static_cast<double>(world_)).backward();
        loss_sum += part.item<double>();
      }
      DICE_RETURN_IF_ERROR(dp_.AllReduceMeanGradients(params_));
      auto losses = dp_.AllReduceSum({loss_sum});
      if (!losses.ok()) return losses.status();
      if (o_.grad_clip > 0) torch::nn::utils::clip_grad_norm_(params_, o_.grad_clip);
      optimizer_->step();
      sr->loss = (*losses)[0];
    }
    return Status::Ok();
  }

  // The rollout policy's and the reference's log-probs on every chunk of
  // the used rollouts' traces (no grad); *total = this rank's scored tokens;
  // *gap gets the decoded rollouts' |logp_decoder - logp_old| (a failed
  // measurement is logged, never fatal).
  Status ScoreOldAndReference(const std::vector<Rollout>& used, std::vector<Piece>* pieces, int64_t* total,
                              LogProbGap* gap) const {
    if (used.empty()) return Status::Ok();
    torch::NoGradGuard no_grad;
    const generator::SdarConfig& cfg = model_->config();
    bool gap_failed = false;
    for (size_t i = 0; i < used.size(); ++i) {
      auto chunks = PackTraceChunks(used[i].trace, cfg.block_size, cfg.mask_token_id, o_.max_trace_tokens, device_);
      if (!chunks.ok()) return chunks.status();
      Expected<std::vector<int64_t>> order = std::vector<int64_t>{};
      if (!used[i].decoder_logp.empty()) order = ScoredTraceIndices(used[i].trace, cfg.block_size);
      size_t offset = 0;  // scored slots of the earlier chunks
      for (auto& p : *chunks) {
        if (p.scored.size(0) == 0) continue;
        auto lo = model_->ForwardPacked(p.ids, p.positions, p.mask);
        if (!lo.ok()) return lo.status();
        auto lr = reference_->ForwardPacked(p.ids, p.positions, p.mask);
        if (!lr.ok()) return lr.status();
        torch::Tensor old_lp = ScoredLogProbs(*lo, p.scored, p.targets, cfg.mask_token_id);
        torch::Tensor ref_lp = ScoredLogProbs(*lr, p.scored, p.targets, cfg.mask_token_id);
        const size_t n = static_cast<size_t>(p.scored.size(0));
        if (!gap_failed && order.ok() && !order->empty()) {
          const std::vector<int64_t> slots(order->begin() + std::min(offset, order->size()),
                                           order->begin() + std::min(offset + n, order->size()));
          Status st = AddLogProbGap(used[i].decoder_logp, slots, old_lp, gap);
          if (!st.ok()) {
            Log("rl: decoder-vs-trainer logp gap not measured: " + st.message());
            gap_failed = true;
          }
        }
        offset += n;
        *total += p.scored.size(0);
        pieces->push_back(Piece{i, std::move(p), std::move(old_lp), std::move(ref_lp)});
      }
    }
    return Status::Ok();
  }

  // The step's CSV row (rank 0) and progress line.
  void LogStep(const RlStepReport& sr) {
    if (dp_.is_root()) {
      csv_ << sr.step << "," << sr.level << "," << sr.mean_reward << "," << sr.policy_reward << "," << sr.rollouts
           << "," << sr.injected << "," << sr.compiled << "," << sr.groups_used << "," << sr.groups_dropped << ","
           << sr.scored_tokens << "," << sr.loss << "," << sr.rollout_tokens_per_s << "," << sr.seconds << ","
           << sr.logp_gap_mean << "," << sr.logp_gap_max << "," << sr.rollout_graphs_made << "\n";
      csv_.flush();
    }
    char line[448];
    std::snprintf(line, sizeof line,
                  "rl step %lld/%lld level %d reward %.3f (policy %.3f) compiled %lld/%lld injected %lld groups "
                  "%lld used %lld dropped, %lld tokens scored, loss %.5f, rollout %.0f tok/s (%lld graphs captured), "
                  "|logp decoder - trainer| mean %.2e max %.2e over %lld tokens, %.1f s",
                  static_cast<long long>(sr.step), static_cast<long long>(o_.steps), sr.level, sr.mean_reward,
                  sr.policy_reward, static_cast<long long>(sr.compiled), static_cast<long long>(sr.rollouts),
                  static_cast<long long>(sr.injected), static_cast<long long>(sr.groups_used),
                  static_cast<long long>(sr.groups_dropped), static_cast<long long>(sr.scored_tokens), sr.loss,
                  sr.rollout_tokens_per_s, static_cast<long long>(sr.rollout_graphs_made), sr.logp_gap_mean,
                  sr.logp_gap_max, static_cast<long long>(sr.logp_gap_tokens), sr.seconds);
    Log(line);
  }

  const RlOptions& o_;
  std::optional<generator::SdarModel> model_;      // the policy
  std::optional<generator::SdarModel> reference_;  // frozen KL reference
  int64_t eos_ = 0;                     // EndOfTurnId: ends an injected answer
  std::vector<int64_t> eos_ids_;        // where a rollout stops
  std::optional<generator::PromptTemplates> templates_;
  std::vector<CukeExample> tasks_;
  std::map<std::string, std::string> known_good_;  // answer by task id
  std::optional<TaskSchedule> schedule_;
  std::optional<InjectionSchedule> injection_;  // when known-good answers stop (--inject-until)
  // Rollouts' CUDA graphs and KV cache kept across tasks and steps (null:
  // eager rollouts: a CPU device or rollout_graphs off). After model_: it
  // borrows the policy and goes first.
  std::unique_ptr<generator::DecodeSession> session_;
  std::unique_ptr<DeviceFormJudge> device_judge_;  // kind "device" tasks: Tuner + dice-worker, kept across steps
  RewardOptions reward_options_;                   // borrows device_judge_
  std::vector<torch::Tensor> initial_;  // the policy's weights at the start (params_ is the policy)
  int64_t first_step_ = 0;
};

}  // namespace

Expected<RlReport> RunRl(const RlOptions& o, const std::function<void(const std::string&)>& log_fn) {
  DICE_RETURN_IF_ERROR(CheckOptions(o));
  return RunOnThisRank<RlReport, RlRun>(o, log_fn);
}

}  // namespace dice::training
