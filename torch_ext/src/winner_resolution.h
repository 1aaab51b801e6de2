// Private: finding and loading the winner kernel of one task for serving.
//
// ResolveWinner follows one order for every fusion-group op (both
// frontends): a winner this process already loaded -> the local SQLite cache
// -> the shared cache server (on a local miss; the entry is stored locally,
// unverified unless trusted) -> re-verification of an unverified entry on
// this GPU (the tuner verifies and times only that kernel) -> load. In
// tune-sync mode a miss is tuned before a second look. A winner marked
// reduced precision (TF32) that the precision policy refuses for the task
// under PyTorch's switches as they are at the call (runtime/precision_policy.h)
// is a miss, never served: tune-sync tunes it again under that policy (a new
// winner replaces the row), the other modes say why in `no_winner`. Loading depends on
// the stored winner's form (WinnerForm): a device-form cubin is loaded with
// the CUDA driver, an extension-form shared object is dlopen'ed (and stays
// loaded for the process's lifetime). Loaded winners are shared by task key
// and device across op instances: one key (the GPU model's) is loaded once
// into each device's context. No torch types: the caller makes the task's
// device current (a device-form cubin loads into the current context). Thread-safe;
// not on the cache-hit path (an op resolves once per input signature).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dice/cache/store.h"
#include "dice/core/candidate.h"
#include "dice/core/status.h"
#include "dice/core/task.h"
#include "dice/runtime/extension_compiler.h"
#include "dice/runtime/kernel_launcher.h"

namespace dice::torch_ext {

/// What an op serves for one task: a device-form kernel or an extension's
/// entry point; neither when there is no winner (why in `no_winner`).
struct LoadedWinner {
  CandidateForm form = CandidateForm::kDevice;
  std::shared_ptr<runtime::LoadedKernel> kernel;  ///< device form
  runtime::ExtensionEntryFn extension = nullptr;  ///< extension form (kernel is then null)
  std::string no_winner;                 ///< "" or NoWinnerText of a tune that found none
  double baseline_us = 0;                ///< the record's PyTorch baseline, µs (tuner's isolated median)
  double best_us = 0;                    ///< the record's winner time, µs

  /// True when a winner was loaded.
  bool found() const { return kernel != nullptr || extension != nullptr; }
};

/// One task to resolve.
struct WinnerRequest {
  const Task* task = nullptr;  ///< REQUIRES: non-null
  std::string key;             ///< task->Key()
  int num_inputs = 0;          ///< tensor arguments of the kernel, in order (then the outputs)
  int num_outputs = 0;
  int device = -1;             ///< CUDA device of the inputs (current at the call); -1 = the settings' tune.device
  bool tune_on_miss = false;   ///< tune-sync: tune before the second look (waits while another process tunes it)
  /// Host copies of the call's inputs for the tuner's verification (empty:
  /// random trials only); called only when tuning on a miss.
  std::function<std::vector<std::string>()> captured_inputs;
};

/// Resolves and loads the winner of `request` (order above). A value
/// without a winner (found() false) means none is stored and none was
/// tuned, or the stored one is refused by the precision policy (no_winner
/// "winner <origin> uses TF32 (reduced precision) and
/// torch.backends.cudnn.allow_tf32 is off", and in tune-sync
/// "; tuned again: <why none>"). Errors (the message is the op's fallback reason from then on):
/// "cache: ..." when the store cannot be opened or read; "kernel from <url>
/// not served: ..." when an unverified entry cannot be or was not
/// re-verified; "tuning failed: ..."; "bad launch plan: ...", "kernel load
/// failed: ...", "extension load failed: ..." when loading fails; kCorrupt
/// or kUnsupported from WinnerForm / a library-backed winner.
Expected<LoadedWinner> ResolveWinner(const WinnerRequest& request);

/// The form of a stored winner, decided from its versions_json "form"
/// field as the tuner writes it: "device" -> kDevice, "extension" ->
/// kExtension (the record's cubin field then holds the nvcc-built shared
/// object), "library" -> kLibrary (a vendor-library configuration). Records
/// without the field, or with empty versions, are device form (they predate
/// extension winners). Errors: kCorrupt naming the task key when the
/// versions are not a JSON object or the form is another value.
Expected<CandidateForm> WinnerForm(const cache::WinnerRecord& record);

}  // namespace dice::torch_ext
