// Private: the prebuild pass of a first call (issue 17, first-call time).
//
// In tune-sync mode each fusion group tunes when the forward first reaches
// it, so a network's groups build their nvcc candidates one group after the
// other. The backend's first call therefore runs the forward once with
// collection on: a group whose signature is not yet resolved records its task
// (CollectForPrebuild) and runs its fallback instead of tuning, and its
// signature stays unresolved. FinishPrebuild then builds every recorded
// task's extension-form candidates at once (tune_queue.h PrebuildNow) and
// turns collection off; the forward that follows tunes as before and finds
// its libraries in the build cache. No torch types. Thread-safe.
#pragma once

#include <string>

#include "dice/core/task.h"

namespace dice::torch_ext {

/// Turns collection on and forgets tasks recorded before.
void BeginPrebuildCollection();

/// True while collection is on (one relaxed atomic load: the hot path's check).
bool PrebuildCollecting();

/// Records `task` (once per task key) for the prebuild; `device` is the CUDA
/// device of its inputs (-1: the settings' device).
void CollectForPrebuild(const Task& task, int device);

/// Turns collection off, builds the recorded tasks' candidates (PrebuildNow)
/// and returns what happened as one JSON object: {"tasks", "requested",
/// "distinct", "built", "cached", "failed", "seconds", "first_error"}, or
/// {"tasks", "error"} when the cache store could not be read (nothing built;
/// the tunes then build as before). Never throws.
std::string FinishPrebuild();

}  // namespace dice::torch_ext
