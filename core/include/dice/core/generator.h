// dice/core/generator.h — the interface every kernel generator implements.
//
// A generator turns a Task into candidate kernels. Two implementations are
// planned: TemplateGenerator (templates.h, always available, parametric CUDA
// templates) and DiceGenerator (the DICE diffusion LM, given a checkpoint).
// Generators never compile, run or judge their candidates: the runtime does.
// A generator whose outputs can fail to become candidates (a model answer
// with no code) reports those as GenerationFailure values through
// TakeFailures(); the runtime records them as failed attempts.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dice/core/candidate.h"
#include "dice/core/status.h"
#include "dice/core/task.h"

namespace dice {
inline namespace core {

/// A generated output that did not become a candidate (e.g. a DICE sample
/// with no code block, or no dice_forward).
struct GenerationFailure {
  std::string origin;  ///< "dice:sample3"
  std::string reason;  ///< why it is not a candidate, one line
  std::string text;    ///< the generated text (may be long; for logs and the attempts table)
};

class KernelGenerator {
 public:
  virtual ~KernelGenerator() = default;
  /// "templates", "dice".
  virtual std::string name() const = 0;
  /// Up to `max_candidates` device- or extension-form candidates for `task`.
  /// Errors: kUnsupported when the generator cannot handle any op of the
  /// group (the message names the op); other codes for internal failures.
  virtual Expected<std::vector<Candidate>> Generate(const Task& task, int max_candidates) = 0;
  /// The failures of the last Generate call (cleared by this call). The
  /// default generator never fails per output and returns none.
  virtual std::vector<GenerationFailure> TakeFailures() { return {}; }
};

}  // namespace core
}  // namespace dice
