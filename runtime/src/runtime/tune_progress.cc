// tune_progress.cc — the progress events of one Tune (tune_progress.h).
#include "tune_progress.h"

namespace dice::runtime {

std::string_view TunePhaseName(TunePhase phase) {
  switch (phase) {
    case TunePhase::kLookupCache: return "lookup";
    case TunePhase::kGenerate: return "generate";
    case TunePhase::kCompile: return "compile";
    case TunePhase::kMeasure: return "measure";
    case TunePhase::kSelectWinner: return "select";
    case TunePhase::kPersist: return "persist";
    case TunePhase::kDone: return "done";
  }
  return "unknown";
}

TuneProgress CountOutcomes(const std::vector<CandidateOutcome>& outcomes) {
  TuneProgress p;
  for (const CandidateOutcome& o : outcomes) {
    if (IsCompiled(o.outcome)) ++p.compiled;
    if (o.time_us > 0) ++p.timed;
    if (IsVerified(o.outcome)) {
      ++p.verified;
      if (o.time_us > 0 && (p.best_us <= 0 || o.time_us < p.best_us)) p.best_us = o.time_us;
    }
  }
  return p;
}

TuneProgress FromWorkerProgress(const WorkerTuneProgress& w) {
  TuneProgress p;
  p.compiled = w.compiled;
  p.verified = w.verified;
  p.timed = w.timed;
  p.finished = w.finished;
  p.best_us = w.best_us;
  p.baseline_us = w.baseline_us;
  return p;
}

void ProgressSink::Send(TunePhase phase, TuneProgress counts) const {
  if (!callback_) return;
  counts.phase = phase;
  counts.generated = report_.tried;
  counts.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  counts.from_cache = report_.from_cache;
  if (counts.baseline_us <= 0) counts.baseline_us = report_.baseline_us;
  counts.description = report_.description;
  callback_(counts);
}

}  // namespace dice::runtime
