// Private: the process's tuner and its background queue.
//
// One Tuner per CUDA device of the process (its worker bound to that GPU by
// UUID, runtime/device_binding.h); one task is tuned at a time (TuneNow
// blocks while another tune runs). The tuners are built for the cache store
// of the current cache dir and the current tune options (runtime_state.h
// CurrentTuneOptions: PyTorch's TF32 switches included, read at each tune)
// and rebuilt when either changes or SetTunerGenerators replaces their
// generators. They claim each key in the cache before tuning it
// (dice/cache/tuning_claim.h; DICE_CLAIM_TTL_S seconds, 0 = off, default
// runtime::DefaultClaimTtl), so of the processes sharing a cache dir one
// tunes a key. Tune mode hands tasks to EnqueueTune: one detached thread,
// started on first use, tunes them in order and reports each result to the
// job's callback; a job whose key another process has claimed waits (the
// fallback runs) and is tried again about once a second until that winner
// is stored, or the claim is released or expires. No torch types;
// before each tune the framework's cached, unused device memory is handed
// back (ReleaseFrameworkCachedMemory, defined by the op library's torch
// part). Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dice/core/generator.h"
#include "dice/core/status.h"
#include "dice/core/task.h"
#include "dice/runtime/prebuild.h"
#include "dice/runtime/tuner.h"

namespace dice::torch_ext {

/// Tunes `task` with the process's tuner (Tuner::Tune; `captured`: host
/// copies of real inputs to verify with, or null; `on_progress`: the Tune's
/// progress events, called on this thread while the tuner is held).
/// `device`: the CUDA device of the task's tensors, where the worker runs
/// (-1: the settings' tune.device). A report with claimed_by set means
/// another process tunes the key now; nothing was tuned.
/// Errors: as Tuner::Tune, or the cache store's open errors.
Expected<runtime::TuneReport> TuneNow(const Task& task, const std::vector<std::string>* captured,
                                      const runtime::TuneProgressCallback& on_progress = {}, int device = -1);

/// Builds ahead of their tunes the extension-form candidates of `tasks`
/// (each with its CUDA device, -1 = the settings' device) that the process's
/// tuners would build (Tuner::PendingExtensionCandidates: none for a key
/// with a verified winner), all at once, runtime::DefaultPrebuildJobs() nvcc
/// processes at a time (runtime/prebuild.h), into the build cache their
/// tunes read. DICE_PREBUILD_JOBS=0, or compile-only tune options (no GPU:
/// those tunes build within their budget): nothing is built (empty report).
/// The tune budget (TuneOptions::budget_s) does not cut a prebuild short.
/// Errors: the cache store's open and read errors.
Expected<runtime::PrebuildReport> PrebuildNow(const std::vector<std::pair<Task, int>>& tasks);

/// Called on the tuner thread with the result of one queued tune.
using TuneDone = std::function<void(const Expected<runtime::TuneReport>& report)>;

/// Queues `task` for the background tuner thread (starting it on first
/// use); `captured` as TuneNow's (empty = none). The thread logs one line
/// per task on stderr (a failure at log level warn, a result or a wait on
/// another process's claim at info: dice/core/log.h) and then calls `done`
/// (once, with the final result: never with a claimed_by report). `device`
/// as TuneNow's.
void EnqueueTune(Task task, std::vector<std::string> captured, TuneDone done, int device = -1);

/// The generators the tuner asks, in order (empty = TemplateGenerator
/// alone). Takes effect for the next tune (waits for a running one).
void SetTunerGenerators(std::vector<std::shared_ptr<KernelGenerator>> generators);

/// Why tuning stored no winner, for fallback reasons and logs: counts, the
/// baseline and the fastest verified candidate (µs), and the first failure
/// (its error's first line, at most 200 characters). E.g. "no winner
/// (tuned: 6 tried, 6 compiled, 6 verified; baseline 11400.0 µs, best
/// template:row/tile32x8/reg 11350.2 µs, needs < 0.95x of it)". `margin`
/// as TuneOptions::margin.
std::string NoWinnerText(const runtime::TuneReport& report, double margin);

/// Returns the framework allocator's cached, unused device blocks to the
/// driver, so the tuning worker (another process) can use that memory; live
/// tensors stay. Covers every device of the process (the allocator's
/// emptyCache), so the device about to be tuned on is always included. Defined in run_group.cc (it needs c10).
void ReleaseFrameworkCachedMemory();

}  // namespace dice::torch_ext
