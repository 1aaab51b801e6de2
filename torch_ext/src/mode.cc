// Mode names (mode.h).
#include "dice/torch_ext/mode.h"

#include <string>

namespace dice::torch_ext {

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kOff: return "off";
    case Mode::kObserve: return "observe";
    case Mode::kCache: return "cache";
    case Mode::kTune: return "tune";
    case Mode::kTuneSync: return "tune-sync";
  }
  return "off";
}

Expected<Mode> ParseMode(std::string_view text) {
  if (text.empty() || text == "off" || text == "0") return Mode::kOff;
  if (text == "observe") return Mode::kObserve;
  if (text == "cache") return Mode::kCache;
  if (text == "tune") return Mode::kTune;
  if (text == "tune-sync" || text == "tune_sync") return Mode::kTuneSync;
  return Status(StatusCode::kInvalidArgument,
                "unknown DICE mode '" + std::string(text) + "' (expected off|observe|cache|tune|tune-sync)");
}

}  // namespace dice::torch_ext
