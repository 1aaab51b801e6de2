// dice/torch_ext/mode.h — the runtime modes of the torch frontends.
//
// A mode says what a fusion group does when it runs (DESIGN.md "Modes"):
// nothing (off), time the fallback (observe), serve cached winners (cache),
// or also tune on a miss, in the background (tune) or before returning
// (tune-sync). The process-wide mode is set with SetRuntimeOptions
// (optimize.h) or DICE_MODE. Plain values and functions, no torch types;
// thread-safe.
#pragma once

#include <string_view>

#include "dice/core/status.h"

namespace dice::torch_ext {

/// DESIGN.md "Modes".
enum class Mode {
  kOff,       ///< no fusion pass; optimize() still reports groups but inserts none
  kObserve,   ///< fusion groups run the fallback and are timed (profile only)
  kCache,     ///< use cached winners, never tune
  kTune,      ///< on a miss, queue the task for a background tuner thread; fallback meanwhile
  kTuneSync,  ///< on a miss, tune before returning (warm-up)
};

/// "off", "observe", "cache", "tune", "tune-sync".
const char* ModeName(Mode mode);
/// Parses a mode name (also "" and "0" -> kOff, "tune_sync"). Errors:
/// kInvalidArgument naming the text and the accepted values.
Expected<Mode> ParseMode(std::string_view text);

}  // namespace dice::torch_ext
