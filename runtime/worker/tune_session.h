// tune_session.h — one "tune" request inside dice-worker (private to
// runtime/worker/; the protocol is worker_protocol.h).
//
// RunTuneRequest runs the request's phases in order: Setup (CUDA driver, the
// device must be the task's arch, the graph and its output specs), compile
// (device form with NVRTC in parallel, then extension form with nvcc in
// batches; after each batch a compile_error result for each failure and,
// when the request asks for progress, a "progress" event naming the items
// that compiled), trials and baseline (verifier.h),
// then one loop over the runnable candidates (device form first): within
// the budget, announce ("begin"), verify and time (Verifier::Evaluate),
// guard the shared trial data, report. The items must already obey the
// precision policy: the Tuner applies it, the worker does not check again.
// Torch-free (LibTorch is used by verifier.cc only).
#pragma once

#include <functional>
#include <string>

#include "dice/core/status.h"
#include "dice/runtime/worker_protocol.h"

namespace dice::runtime::worker_impl {

/// Sends one encoded event to the parent.
using SendFn = std::function<Status(const std::string&)>;

/// Serves one tune request, streaming events through `send`. Returns true
/// when the worker must exit now: a candidate left the CUDA context unusable
/// (illegal address, misaligned access, ...) and a result with fatal=true
/// was sent, or the parent is gone.
bool RunTuneRequest(const worker::TuneRequest& request, const SendFn& send);

}  // namespace dice::runtime::worker_impl
