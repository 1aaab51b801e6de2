// fixed_generator.h — shared by the tuner tests: a KernelGenerator that hands
// the Tuner a fixed list of candidates (hand-written kernels, known-good or
// deliberately wrong), whatever the task.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dice/generator/generator.h"

namespace dice::runtime_test {

/// Returns `candidates` for every Generate call (the count argument is ignored).
class FixedGenerator : public KernelGenerator {
 public:
  explicit FixedGenerator(std::vector<Candidate> candidates) : candidates_(std::move(candidates)) {}
  std::string name() const override { return "fixed"; }
  Expected<std::vector<Candidate>> Generate(const Task&, int) override { return candidates_; }

 private:
  std::vector<Candidate> candidates_;
};

}  // namespace dice::runtime_test
