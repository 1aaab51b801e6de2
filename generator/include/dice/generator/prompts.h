// dice/generator/prompts.h — the DICE generator's prompts and the parser of
// its answers (torch-free).
//
// DICE (arXiv 2602.11715) asks its model for CUDA in two ways, both as a
// chat turn in the Qwen chat format
//   <|im_start|>system\n{system}<|im_end|>\n
//   <|im_start|>user\n{user}<|im_end|>\n
//   <|im_start|>assistant\n
// - end-to-end: the reference PyTorch program (KernelBench style: a `Model`
//   class plus get_inputs/get_init_inputs) is given; the answer is a whole
//   program whose `ModelNew` runs custom CUDA kernels (inline extension);
// - kernel infilling: the reference program and the candidate program's
//   prefix (imports, declarations) and suffix (host declarations, the module
//   that calls the kernels) are given; the answer is only the missing middle,
//   the CUDA source.
// The wording here is this project's own; only the structure follows DICE.
// Every template is overridable from a JSON file (PromptTemplates::Load).
// Placeholders are replaced in one pass, so braces inside the substituted
// code are never expanded again.
#pragma once

#include <string>

#include "dice/core/status.h"
#include "dice/core/task.h"

namespace dice::generator {

/// The texts prompts are built from. Placeholders: {reference} in
/// end_to_end; {reference}, {prefix}, {suffix} in infilling. Any other
/// brace text is kept verbatim.
struct PromptTemplates {
  std::string system;
  std::string end_to_end;
  std::string infilling;

  /// The built-in wording.
  static PromptTemplates Default();

  /// Default() overridden by a JSON object file with any of the string keys
  /// "system", "end_to_end", "infilling" (other keys are rejected, so a typo
  /// does not silently keep the default).
  /// Errors: kNotFound (no such file), kIoError (unreadable), kCorrupt (not
  /// JSON, not an object, a non-string value, an unknown key; naming the
  /// file and key), kInvalidArgument (end_to_end without {reference};
  /// infilling without one of {reference}, {prefix}, {suffix}; naming the
  /// file, key and placeholder).
  static Expected<PromptTemplates> Load(const std::string& path);
};

/// One user turn in the Qwen chat format, ending with the open assistant
/// turn "<|im_start|>assistant\n" the model continues. An empty `system`
/// leaves the system turn out.
std::string ChatPrompt(const std::string& system, const std::string& user);

/// End-to-end prompt for a reference program (Python source, UTF-8).
/// Errors: kInvalidArgument when `reference_program` is empty or only
/// whitespace.
Expected<std::string> BuildEndToEndPrompt(const PromptTemplates& templates, const std::string& reference_program);

/// Infilling prompt: reference program, prefix and suffix of the program to
/// complete. Errors: kInvalidArgument when the reference or the suffix is
/// empty (the suffix carries the declarations the middle must implement;
/// an empty prefix is allowed).
Expected<std::string> BuildInfillingPrompt(const PromptTemplates& templates, const std::string& reference_program,
                                           const std::string& prefix, const std::string& suffix);

/// An infilling prompt's parts for a runtime task: the reference program and
/// the program around the missing CUDA source.
struct InfillingSkeleton {
  std::string reference;  ///< ir::RenderReferenceProgram(graph, inputs, "cuda")
  /// Imports (torch, torch.nn, load_inline); the middle follows it.
  std::string prefix;
  /// Declares `dice_forward(torch::Tensor in0, ...)` (one argument per task
  /// input; returns torch::Tensor for one output, std::vector<torch::Tensor>
  /// for several) in `cpp_src`, builds it with load_inline from the middle's
  /// `source` string, and defines `ModelNew` whose forward calls it. The
  /// middle must define `source = """..."""` holding the kernels and
  /// dice_forward.
  std::string suffix;
};

/// The skeleton the runtime gives the model for a fusion group, so the model
/// writes the kernels and dice_forward, nothing else (DICE's kernel
/// infilling stage: a model cannot dodge writing a kernel by wrapping a
/// library call in the module). Errors: kInvalidArgument when the task has
/// no inputs or no outputs.
Expected<InfillingSkeleton> BuildInfillingSkeleton(const Task& task);

/// The code of a model answer: the body of the first fenced block
/// (```lang ... ```; any language tag, or none). An answer that was cut off
/// inside the block (no closing fence, e.g. max_new_tokens reached) yields
/// the text up to the end. Errors: kNotFound "generated text has no code
/// block" (the message quotes the answer's first 80 bytes).
Expected<std::string> ExtractCodeBlock(const std::string& generated);

}  // namespace dice::generator
