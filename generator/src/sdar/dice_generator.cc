// dice_generator.cc — DiceGenerator (dice_generator.h): task -> infilling
// prompt -> block-diffusion samples -> extension-form candidates.
// No spdlog/fmt here: this file includes LibTorch.
#include "dice/generator/dice_generator.h"

#include <unistd.h>

#include <cstdio>

#include "dice/generator/completion_parser.h"

namespace dice::generator {

DiceGenerator::DiceGenerator(DiceGeneratorOptions options, Tokenizer tokenizer, SdarModel model)
    : options_(std::move(options)), tokenizer_(std::move(tokenizer)), model_(std::move(model)) {}

Expected<std::unique_ptr<DiceGenerator>> DiceGenerator::Load(DiceGeneratorOptions options) {
  if (options.num_samples < 1) {
    return Status(StatusCode::kInvalidArgument, "DiceGenerator: num_samples is " +
                                                    std::to_string(options.num_samples) + " (want >= 1)");
  }
  auto tok = Tokenizer::Load(options.model_dir);
  if (!tok.ok()) return tok.status();
  auto model = SdarModel::Load(options.model_dir, options.model);
  if (!model.ok()) return model.status();
  return std::unique_ptr<DiceGenerator>(new DiceGenerator(std::move(options), std::move(*tok), std::move(*model)));
}

Expected<std::vector<Candidate>> DiceGenerator::Generate(const Task& task, int max_candidates) {
  failures_.clear();
  auto skeleton = BuildInfillingSkeleton(task);
  if (!skeleton.ok()) return skeleton.status();
  auto prompt = BuildInfillingPrompt(options_.templates, skeleton->reference, skeleton->prefix, skeleton->suffix);
  if (!prompt.ok()) return prompt.status();
  last_prompt_ = *prompt;
  const std::vector<int32_t> ids = tokenizer_.Encode(*prompt);
  for (int32_t id : ids) {
    if (id >= model_.config().vocab_size) {
      return Status(StatusCode::kInvalidArgument, "the tokenizer of " + options_.model_dir + " gives id " +
                                                      std::to_string(id) + " but the model's vocabulary has " +
                                                      std::to_string(model_.config().vocab_size) + " entries");
    }
  }
  DecodeOptions o = options_.decode;
  o.num_samples = std::max(1, std::min(options_.num_samples, max_candidates));
  o.eos_ids.clear();
  for (int32_t id : tokenizer_.eos_ids()) o.eos_ids.push_back(id);
  if (options_.progress) {
    const bool tty = ::isatty(STDERR_FILENO) != 0;
    const int64_t max_new = o.max_new_tokens;
    const std::string what = task.Describe();
    o.on_block = [tty, max_new, what](const DecodeProgress& p) {
      std::fprintf(stderr, "%sdice: decoding %s: block %lld, %lld/%lld tokens, %lld sample(s) active, %.1f s%s",
                   tty ? "\r" : "", what.c_str(), static_cast<long long>(p.blocks),
                   static_cast<long long>(p.generated_tokens), static_cast<long long>(max_new),
                   static_cast<long long>(p.active_samples), p.elapsed_s, !tty || p.active_samples == 0 ? "\n" : "");
    };
  }
  auto decoded = Decode(model_, ids, o);
  if (!decoded.ok()) return decoded.status().WithContext("DICE decoding for " + task.Describe());
  std::vector<Candidate> out;
  for (size_t i = 0; i < decoded->tokens.size(); ++i) {
    const std::string origin = "dice:sample" + std::to_string(i);
    const std::string text = tokenizer_.Decode(decoded->tokens[i]);
    auto c = ParseExtensionCandidate(text, origin);
    if (c.ok()) {
      out.push_back(std::move(*c));
    } else {
      failures_.push_back(GenerationFailure{origin, c.status().message(), text});
    }
  }
  return out;
}

std::vector<GenerationFailure> DiceGenerator::TakeFailures() {
  std::vector<GenerationFailure> f = std::move(failures_);
  failures_.clear();
  return f;
}

}  // namespace dice::generator
