// Private helpers shared by the SFT and RL trainers (not installed).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dice/generator/checkpoint.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/prompts.h"
#include "dice/generator/tokenizer.h"
#include "dice/core/status.h"
#include "dice/training/distributed.h"
#include "dice/training/examples.h"
#include "dice/training/files.h"

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

/// What the two trainers' rank runs (SftRun in sft.cc, RlRun in rl.cc)
/// share: the data-parallel group, rank-0 logging, the report with its last
/// checkpoint, this rank's device, the tokenizer, the trained parameters,
/// the AdamW optimizer, the per-step CSV,
/// and how LibTorch errors and NCCL start-up become a Status.
/// `kind` is "sft" or "rl": messages read "dice train <kind>: ...". `Report`
/// needs a string field `checkpoint` (the last checkpoint directory written,
/// "" before the first) and a string field `parameter_digest`.
template <class Report>
class TrainerRank {
 protected:
  TrainerRank(std::string kind, DataParallel& dp, const std::function<void(const std::string&)>& log_fn)
      : kind_(std::move(kind)), dp_(dp), log_fn_(log_fn), world_(dp.world_size()) {}

  /// Passes `line` to the log callback, on rank 0 only.
  void Log(const std::string& line) const {
    if (log_fn_ && dp_.is_root()) log_fn_(line);
  }

  /// "; last checkpoint <dir>" once one is written, else "": for error messages.
  std::string LastCheckpointNote() const {
    return report_.checkpoint.empty() ? "" : "; last checkpoint " + report_.checkpoint;
  }

  /// Runs `body` (a callable returning Status); a LibTorch error it throws
  /// (c10::Error) becomes kInternal "dice train <kind>: <what>; last checkpoint <dir>".
  template <class Body>
  Status CatchTorchErrors(Body&& body) const {
    try {
      return body();
    } catch (const c10::Error& e) {
      return Status(StatusCode::kInternal,
                    "dice train " + kind_ + ": " + e.what_without_backtrace() + LastCheckpointNote());
    }
  }

  /// With several ranks on a CUDA `device`: gradients are all-reduced with
  /// NCCL when this build has it, else through the TCPStore (logged either
  /// way); nothing otherwise. Errors: kCudaError "dice train <kind>:
  /// starting NCCL: <what>".
  Status StartNccl(const torch::Device& device) {
    if (world_ <= 1 || !device.is_cuda()) return Status::Ok();
    try {
      Log(dp_.UseNccl(device) ? kind_ + ": gradients all-reduced with NCCL"
                              : kind_ + ": this build has no NCCL: gradients all-reduced through the TCPStore (host)");
    } catch (const std::exception& e) {
      return Status(StatusCode::kCudaError, "dice train " + kind_ + ": starting NCCL: " + e.what());
    }
    return Status::Ok();
  }

  /// Sets `device_` from `device` (ParseRankDevice: a bare "cuda" is this
  /// rank's GPU) and loads `tokenizer_` from `tokenizer_dir`. Errors: those
  /// of ParseRankDevice and Tokenizer::Load.
  Status LoadDeviceAndTokenizer(const std::string& device, const std::string& tokenizer_dir) {
    auto parsed = ParseRankDevice(device, dp_.local_rank(), world_);
    if (!parsed.ok()) return parsed.status();
    device_ = *parsed;
    auto tokenizer = generator::Tokenizer::Load(tokenizer_dir);
    if (!tokenizer.ok()) return tokenizer.status();
    tokenizer_.emplace(std::move(*tokenizer));
    return Status::Ok();
  }

  /// Rank 0 only (nothing on the others): creates `out_dir` and opens
  /// `csv_` at `csv_path`, appended to when `append` (a resumed run), else
  /// truncated; a file that is still empty gets `header` (one line, with
  /// its newline). Errors: those of MakeDirs; kIoError "cannot write <path>".
  Status OpenCsv(const std::string& csv_path, const std::string& out_dir, bool append, const char* header) {
    if (!dp_.is_root()) return Status::Ok();
    DICE_RETURN_IF_ERROR(MakeDirs(out_dir));
    csv_.open(csv_path, append ? std::ios::app : std::ios::trunc);
    if (!csv_) return Status(StatusCode::kIoError, "cannot write " + csv_path);
    csv_.seekp(0, std::ios::end);
    if (csv_.tellp() == std::streampos(0)) csv_ << header;
    return Status::Ok();
  }

  /// The end of a successful run: the digest of `params_` in the report,
  /// then DataParallel::Finish. Errors: those of Finish.
  Expected<Report> FinishRun() {
    report_.parameter_digest = ParameterDigest(params_);
    DICE_RETURN_IF_ERROR(dp_.Finish());
    return report_;
  }

  const std::string kind_;
  DataParallel& dp_;
  const std::function<void(const std::string&)>& log_fn_;
  const int world_;  // ranks in the run
  torch::Device device_{torch::kCPU};
  std::optional<generator::Tokenizer> tokenizer_;
  std::vector<torch::Tensor> params_;  // the trained weights (requires_grad)
  std::unique_ptr<torch::optim::AdamW> optimizer_;  // over params_
  std::ofstream csv_;                  // rank 0: one row per step (OpenCsv)
  Report report_;
};

/// Runs one trainer on this process's rank: joins the data-parallel group of
/// the torchrun environment (DataParallel::Join with `o.dist_timeout_s` and
/// `o.collective_timeout_s`, in seconds), runs `RankRun(o, group,
/// log_fn).Run()` (a TrainerRank<Report>), and stamps the report's rank and
/// world_size. When a rank fails in a multi-rank run it aborts the group, so
/// the other ranks stop at their next collective with "rank r of N:
/// <cause>", and returns that message (same status code). Errors: those of
/// Join and of Run(). `Report` needs int fields `rank` and `world_size`.
template <class Report, class RankRun, class Options>
Expected<Report> RunOnThisRank(const Options& o, const std::function<void(const std::string&)>& log_fn) {
  auto dp = DataParallel::Join(std::chrono::seconds(o.dist_timeout_s), std::chrono::seconds(o.collective_timeout_s));
  if (!dp.ok()) return dp.status();
  Expected<Report> report = RankRun(o, **dp, log_fn).Run();
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
