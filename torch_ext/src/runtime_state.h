// Private: the process-wide state the fusion-group ops share, apart from the
// group table (group_record.h) and the tuner (tune_queue.h):
//   - the runtime settings (optimize.h's Options without the example inputs)
//     and the mode, read on every call without a lock;
//   - input capture (optimize.h SetCaptureInputs / TakeCapturedCalls);
//   - the cache store of the current cache dir and the shared cache server.
// No torch types (optimize.cc converts Options to and from RuntimeSettings).
// Thread-safe: one mutex for settings and captured calls, one for the store;
// the mode and the capture flag are atomics.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dice/cache/remote_cache.h"
#include "dice/cache/store.h"
#include "dice/core/status.h"
#include "dice/runtime/tuner.h"
#include "dice/torch_ext/capture_result.h"
#include "dice/torch_ext/mode.h"

namespace dice::torch_ext {

/// What the ops and the tuner read of the process-wide options (the fields
/// of optimize.h's Options that outlive optimize(); same defaults).
struct RuntimeSettings {
  Mode mode = Mode::kObserve;
  std::string cache_dir;      ///< "" = cache::DefaultCacheDir()
  runtime::TuneOptions tune;
  bool freeze = true;
  int min_nontrivial_ops = 1;
};

/// Defaults with mode from DICE_MODE (unset = kOff) and cache_dir from
/// DICE_CACHE_DIR. Errors: kInvalidArgument for an unknown DICE_MODE (the
/// message names DICE_MODE).
Expected<RuntimeSettings> SettingsFromEnv();

/// Replaces the process-wide settings (and the mode every op reads).
void SetRuntimeSettings(const RuntimeSettings& settings);

/// Copies PyTorch's TF32 switches, as they are now, into the precision
/// policy of `options` (runtime/precision_policy.h): tf32_conv =
/// torch.backends.cudnn.allow_tf32 (the conv flag cuDNN convolutions read,
/// also set by torch.backends.cudnn.conv.fp32_precision), tf32_matmul =
/// torch.backends.cuda.matmul.allow_tf32 (also on under
/// torch.set_float32_matmul_precision("high"/"medium") or
/// torch.backends.cuda.matmul.fp32_precision = "tf32"); and torch_version =
/// this build's TORCH_VERSION (winner_versions.h: extension winners built
/// against another torch are refused). Leaves the other fields,
/// allow_reduced_precision included. Never throws, also when the
/// legacy and the fp32_precision APIs were mixed. Defined in optimize.cc
/// (it needs ATen).
void ApplyFrameworkPrecision(runtime::TuneOptions* options);

/// The tune options a tune or a winner lookup uses now:
/// GetRuntimeSettings().tune with ApplyFrameworkPrecision (read at each
/// call, so a switch flipped before compiling takes effect).
runtime::TuneOptions CurrentTuneOptions();
/// The process-wide settings; until SetRuntimeSettings they are
/// SettingsFromEnv(), with an invalid DICE_MODE read as kOff.
RuntimeSettings GetRuntimeSettings();

namespace state_internal {
extern std::atomic<int> g_mode;
extern std::atomic<bool> g_mode_loaded;
extern std::atomic<bool> g_capture;
Mode LoadMode();
}  // namespace state_internal

/// The process-wide mode. Hot path (every op call): two atomic loads once
/// the settings are known.
inline Mode CurrentMode() {
  if (!state_internal::g_mode_loaded.load(std::memory_order_acquire)) return state_internal::LoadMode();
  return static_cast<Mode>(state_internal::g_mode.load(std::memory_order_relaxed));
}

/// Whether ops record the inputs of their first call per input signature.
/// Hot path: one relaxed atomic load.
inline bool CapturingInputs() { return state_internal::g_capture.load(std::memory_order_relaxed); }
/// Turns input capture on or off; turning it on forgets which signatures
/// every group has already captured.
void SetCapturingInputs(bool enabled);
/// Keeps one captured call (an op calls it while capture is on).
void AddCapturedCall(CapturedCall call);
/// Returns and forgets the calls kept so far.
std::vector<CapturedCall> TakeStoredCapturedCalls();

/// The cache store of the current cache dir, held under the lock that
/// serialises the ops' use of it. The store stays alive while a holder (the
/// tuner) keeps the shared_ptr, even after another cache dir replaces it.
struct LockedStore {
  std::unique_lock<std::mutex> lock;
  std::shared_ptr<cache::Store> store;
};
/// Opens the store of GetRuntimeSettings().cache_dir (once per dir) and
/// locks it. Errors: as cache::Store::Open (kIoError, kCorrupt).
Expected<LockedStore> LockStore();

/// The shared cache server of $DICE_REMOTE_CACHE, or null when unset or
/// invalid (an invalid setting is reported once on stderr and ignored).
cache::RemoteCache* Remote();

}  // namespace dice::torch_ext
