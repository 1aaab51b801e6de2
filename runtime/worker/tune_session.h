// tune_session.h — the GPU half of dice-worker (private to runtime/worker/).
//
// RunTuneRequest serves one "tune" request (worker_protocol.h): compiles the
// candidates in parallel (CompileAll), builds verification trials (fresh
// random inputs kept inside each op's domain, plus captured real inputs) and
// their reference outputs (dice::reference::Run on the GPU), times the
// reference executor as the baseline, then for each candidate: announce it
// ("begin"), load its cubin, poison outputs, launch on PyTorch's current
// stream, check CUDA errors, compare every element, repeat once (races),
// time it (CUDA events, L2 flushed between repetitions, median), re-verify
// with 3x the trials when the speedup exceeds 10x, check that the trial
// data it shares with the other candidates (inputs, reference outputs) is
// unchanged (else reject it and rebuild the trials), and report.
#pragma once

#include <functional>
#include <string>

#include "dice/core/status.h"
#include "dice/runtime/worker_protocol.h"

namespace dice::worker_impl {

/// Sends one encoded event to the parent.
using SendFn = std::function<Status(const std::string&)>;

/// Serves one tune request, streaming events through `send`. Returns true
/// when the worker must exit now: a candidate left the CUDA context unusable
/// (illegal address, misaligned access, ...) and a result with fatal=true
/// was sent, or the parent is gone.
bool RunTuneRequest(const worker::TuneRequest& request, const SendFn& send);

}  // namespace dice::worker_impl
