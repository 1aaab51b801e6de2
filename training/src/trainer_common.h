// Private helpers shared by the SFT and RL trainers (not installed).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dice/generator/checkpoint.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/prompts.h"
#include "dice/generator/tokenizer.h"
#include "dice/core/status.h"
#include "dice/training/distributed.h"
#include "dice/training/examples.h"

namespace dice::training {

/// "cpu", "cuda", "cuda:N" -> torch::Device. Errors: kInvalidArgument for
/// other text; kNoDevice for cuda without a GPU.
Expected<torch::Device> ParseTrainDevice(const std::string& text);

/// ParseTrainDevice for one rank of a data-parallel run of `world` ranks:
/// a bare "cuda" becomes this rank's GPU, cuda:`local_rank`, when world > 1
/// (torchrun's one process per GPU). Errors: those of ParseTrainDevice.
Expected<torch::Device> ParseRankDevice(const std::string& text, int local_rank, int world);

/// The token that ends an answer: <|im_end|> when the tokenizer has it, else
/// <|endoftext|>. Errors: kInvalidArgument when neither exists or the id is
/// outside the model's vocabulary.
Expected<int64_t> EndOfTurnId(const generator::Tokenizer& tokenizer, const generator::SdarConfig& config);

/// The ids a rollout stops at: `end_of_turn` (EndOfTurnId) and
/// <|endoftext|> when the tokenizer has it and it differs.
std::vector<int64_t> AnswerStopIds(const generator::Tokenizer& tokenizer, int64_t end_of_turn);

/// The prompt templates at `path`, or PromptTemplates::Default() when it is
/// empty. Errors: those of PromptTemplates::Load.
Expected<generator::PromptTemplates> LoadTemplatesOrDefault(const std::string& path);

/// `text` for a terminal line: control bytes and newlines as \n / \xNN (a
/// decoded answer can hold any byte), cut at `max` characters ("..." added).
std::string Printable(const std::string& text, size_t max);

/// Whether an example of `kind` is a task of RL/eval `stage`: "infill" takes
/// infill and the device kinds (IsDeviceKind), "e2e" takes e2e and task examples.
bool IsStageKind(const std::string& stage, const std::string& kind);

/// The tasks of `stage` (IsStageKind) in `split` ("train", "heldout" or
/// "all") read from the CuKe JSONL at `path`, in file order, at most
/// `max_tasks` (0 = all); each malformed line is passed to `on_skipped`.
/// Errors: those of ReadExamples; kInvalidArgument (prefixed with
/// `command`) when no task is left.
Expected<std::vector<CukeExample>> ReadStageTasks(const std::string& path, const std::string& stage,
                                                  const std::string& split, int64_t max_tasks,
                                                  const std::string& command,
                                                  const std::function<void(const std::string&)>& on_skipped);

/// The decoding settings of a rollout (RL) or an evaluation sample: dynamic
/// low-confidence remasking, temperature sampling, `samples` answers in
/// one batch, stopping at `eos_ids`; CUDA graphs on a CUDA model.
generator::DecodeOptions RolloutDecodeOptions(int64_t max_new_tokens, int64_t denoising_steps, double confidence_threshold,
                                   double temperature, int64_t samples, uint64_t seed,
                                   const std::vector<int64_t>& eos_ids, bool cuda);

/// Enables CUDA autocast to bfloat16 for its lifetime (when `enabled`);
/// restores the previous state and clears the cast cache on exit.
class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool enabled_;
  bool previous_ = false;
};

/// Writes out_dir/optimizer.pt (torch::save of the optimizer) and
/// out_dir/trainer_state.json {"kind", "step"}. Errors: kIoError / kInternal.
Status SaveTrainerState(const std::string& out_dir, const std::string& kind, int64_t step,
                        torch::optim::Optimizer& optimizer);

/// Reads dir/trainer_state.json (must be of `kind`) and loads optimizer.pt
/// into `optimizer`; returns the step. Errors: kNotFound naming a missing
/// file; kCorrupt for a malformed state or another kind; kInternal when the
/// optimizer state does not fit (message from LibTorch).
Expected<int64_t> LoadTrainerState(const std::string& dir, const std::string& kind, torch::optim::Optimizer* optimizer);

/// Runs one trainer on this process's rank: joins the data-parallel group of
/// the torchrun environment (DataParallel::Join with the two timeouts, in
/// seconds), calls `run_rank`, and stamps the report's rank and world_size.
/// When a rank fails in a multi-rank run it aborts the group, so the other
/// ranks stop at their next collective with "rank r of N: <cause>", and
/// returns that message (same status code). Errors: those of Join and of
/// `run_rank`. `Report` needs int fields `rank` and `world_size`.
template <class Report>
Expected<Report> RunOnThisRank(int64_t dist_timeout_s, int64_t collective_timeout_s,
                               const std::function<Expected<Report>(DataParallel&)>& run_rank) {
  auto dp = DataParallel::Join(std::chrono::seconds(dist_timeout_s), std::chrono::seconds(collective_timeout_s));
  if (!dp.ok()) return dp.status();
  auto report = run_rank(**dp);
  if (!report.ok()) {
    if ((*dp)->world_size() == 1) return report.status();
    const std::string where = "rank " + std::to_string((*dp)->rank()) + " of " + std::to_string((*dp)->world_size());
    (*dp)->Abort(where + ": " + report.status().message());
    return Status(report.status().code(), where + ": " + report.status().message());
  }
  report->rank = (*dp)->rank();
  report->world_size = (*dp)->world_size();
  return report;
}

}  // namespace dice::training
