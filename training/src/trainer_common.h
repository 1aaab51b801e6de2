// Private helpers shared by the SFT and RL trainers (not installed).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "dice/generator/checkpoint.h"
#include "dice/generator/tokenizer.h"
#include "dice/runtime/status.h"

namespace dice::training {

/// "cpu", "cuda", "cuda:N" -> torch::Device. Errors: kInvalidArgument for
/// other text; kNoDevice for cuda without a GPU.
Expected<torch::Device> ParseTrainDevice(const std::string& text);

/// The token that ends an answer: <|im_end|> when the tokenizer has it, else
/// <|endoftext|>. Errors: kInvalidArgument when neither exists or the id is
/// outside the model's vocabulary.
Expected<int64_t> EndOfTurnId(const Tokenizer& tokenizer, const SdarConfig& config);

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

}  // namespace dice::training
