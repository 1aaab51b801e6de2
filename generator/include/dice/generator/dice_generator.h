// dice/generator/dice_generator.h — the DICE diffusion LM as a kernel
// generator (issue 3 "Integration"; DESIGN.md "DICE generator").
//
// For a runtime Task, DiceGenerator builds DICE's kernel-infilling prompt
// from the fusion group (prompts.h BuildInfillingSkeleton: the reference
// program rendered from the IR, the prefix with the imports, and the suffix
// declaring dice_forward(in0, ...) and the ModelNew that calls it), decodes
// n samples in one batch with block diffusion (diffusion_decoder.h), and
// parses each answer (completion_parser.h) into an extension-form candidate
// with origin "dice:sample<i>". Answers that do not parse are kept as
// GenerationFailure values (TakeFailures) with their reason, never thrown.
// Links LibTorch. Thread-compatible: one Generate at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dice/generator/diffusion_decoder.h"
#include "dice/core/generator.h"
#include "dice/generator/prompts.h"
#include "dice/generator/sdar_model.h"
#include "dice/generator/tokenizer.h"

namespace dice::generator {

struct DiceGeneratorOptions {
  std::string model_dir;        ///< checkpoint directory (config.json, *.safetensors, tokenizer files)
  SdarModelOptions model;       ///< device and compute dtype
  /// Decoding knobs; num_samples is replaced by min(num_samples below,
  /// Generate's max_candidates) and eos_ids by the tokenizer's.
  DecodeOptions decode;
  int num_samples = 4;          ///< samples per task, >= 1
  PromptTemplates templates = PromptTemplates::Default();
  bool progress = false;        ///< a line on stderr after every decoded block
};

class DiceGenerator : public KernelGenerator {
 public:
  /// Loads the tokenizer and the model of options.model_dir.
  /// Errors: those of Tokenizer::Load and SdarModel::Load (kNotFound,
  /// kCorrupt, kInvalidArgument naming file and tensor); kInvalidArgument
  /// when num_samples < 1.
  static Expected<std::unique_ptr<DiceGenerator>> Load(DiceGeneratorOptions options);

  /// "dice".
  std::string name() const override { return "dice"; }

  /// Decodes min(num_samples, max_candidates) samples for `task` and returns
  /// the ones that parse as extension-form candidates (origin
  /// "dice:sample<i>", i = sample index). Errors: kInvalidArgument when the
  /// task has no inputs/outputs (no skeleton) or the prompt plus
  /// max_new_tokens exceeds the model's context; kInternal when LibTorch
  /// fails. An empty vector with failures recorded is a success.
  Expected<std::vector<Candidate>> Generate(const Task& task, int max_candidates) override;

  /// The samples of the last Generate that are not candidates, with reasons.
  std::vector<GenerationFailure> TakeFailures() override;

  /// The last prompt built (for logs and tests).
  const std::string& last_prompt() const { return last_prompt_; }

 private:
  DiceGenerator(DiceGeneratorOptions options, Tokenizer tokenizer, SdarModel model);
  DiceGeneratorOptions options_;
  Tokenizer tokenizer_;
  SdarModel model_;
  std::vector<GenerationFailure> failures_;
  std::string last_prompt_;
};

}  // namespace dice::generator
