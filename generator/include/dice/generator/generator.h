// dice/generator/generator.h — the interface every kernel generator implements.
//
// A generator turns a Task into candidate kernels. Two implementations are
// planned: TemplateGenerator (templates.h, always available, parametric CUDA
// templates) and DiceGenerator (the DICE diffusion LM, given a checkpoint).
// Generators never compile, run or judge their candidates: the runtime does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dice/runtime/candidate.h"
#include "dice/runtime/status.h"
#include "dice/runtime/task.h"

namespace dice {

class KernelGenerator {
 public:
  virtual ~KernelGenerator() = default;
  /// "templates", "dice".
  virtual std::string name() const = 0;
  /// Up to `max_candidates` device- or extension-form candidates for `task`.
  /// Errors: kUnsupported when the generator cannot handle any op of the
  /// group (the message names the op); other codes for internal failures.
  virtual Expected<std::vector<Candidate>> Generate(const Task& task, int max_candidates) = 0;
};

}  // namespace dice
