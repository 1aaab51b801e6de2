// dice/generator/fixed_generator.h — a KernelGenerator that hands the Tuner
// a given list of candidates, whatever the task: answers a model already
// wrote (the training module's device-form judge, training/reward.h) or
// hand-written kernels in tests. Torch-free, header-only.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dice/core/generator.h"

namespace dice::generator {

/// Returns the current candidate list for every Generate call (the count
/// argument is ignored: the Tuner's max_candidates still caps what it takes).
/// Not thread-safe: set the candidates and run Tune from one thread.
class FixedGenerator : public KernelGenerator {
 public:
  explicit FixedGenerator(std::vector<Candidate> candidates = {}, std::string name = "fixed")
      : candidates_(std::move(candidates)), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  Expected<std::vector<Candidate>> Generate(const Task&, int) override { return candidates_; }
  /// Replaces the list the next Generate returns.
  void SetCandidates(std::vector<Candidate> candidates) { candidates_ = std::move(candidates); }

 private:
  std::vector<Candidate> candidates_;
  std::string name_;
};

}  // namespace dice::generator
