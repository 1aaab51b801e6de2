// fixed_generator.h — the tuner tests' name for dice::generator::FixedGenerator
// (dice/generator/fixed_generator.h): a fixed list of hand-written kernels,
// known-good or deliberately wrong, whatever the task.
#pragma once

#include "dice/generator/fixed_generator.h"

namespace dice::runtime_test {

using dice::generator::FixedGenerator;

}  // namespace dice::runtime_test
