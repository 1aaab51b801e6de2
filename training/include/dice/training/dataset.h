// dice/training/dataset.h — `dice train dataset`: the CuKe builder (DICE
// arXiv 2602.11715: PyTorch -> CUDA pairs kept only at a verified speedup of
// at least 2.0x over eager). Torch-free.
//
// Sources:
//   (a) dice kernel caches (cache/ library, SQLite): every winner becomes a
//       "device" example (reference = the group's KernelBench-style program
//       rendered from its IR; middle = the device-form CUDA source; suffix =
//       its launch plan), and up to device_infill_spans "device_infill"
//       examples: prefix + middle + suffix = the same source, the middle a
//       run of 1..3 kernel-body lines (examples.h SplitKernelForInfill;
//       DICE's stage-1 kernel infilling on our own kernels, judged in the
//       device form in ~50 ms). Unverified winners (pulled, never
//       re-verified) are dropped; the cache's measured speedup is the
//       filter's input.
//   (b) KernelBench-format corpora (a JSON array or JSONL of objects with
//       id (or idx), pytorch_code, cuda_code and optionally prefix, middle,
//       suffix, level (integer or digit string), speedup), e.g. the DICE RL
//       infilling set; an item whose cuda_code is empty is a task without a
//       solution and is counted as no_answer, not written. Each item gives an
//       "e2e" example (cuda_code is the answer) and, when prefix/middle/suffix
//       are present, an "infill" example.
// Filters, in order, each with a count in the report: malformed item;
// corpus task without an answer;
// unverified cache winner; failed verification (verify = judge only);
// speedup < min_speedup (only where a speedup is known); duplicate answer
// (sha256 of the answer with comments removed and whitespace collapsed).
// Verification of corpus pairs (verify): "judge" runs each item's cuda_code
// program (and, when it differs, the infill example's prefix + middle +
// suffix) against its pytorch_code by KernelBench's protocol on
// verify_device (runtime/program_judge.h JudgeProgram: load_inline build,
// seeded trials, allclose 1e-2, both timed), verify_jobs at a time: an
// incorrect/crashing/uncompilable pair is dropped (counted, logged), a
// correct one gets the measured speedup (replacing the file's) and verified
// = "judge:<device>". "none" keeps the file's speedup, if any, and marks
// the pair verified = "unverified-here". "auto" = judge when a CUDA device
// is present, else none. Cache winners keep the speedup measured where they
// were tuned.
// Difficulty: the item's level when given, else from the op count (IR ops
// for cache winners; torch/F/nn/self.* calls in the reference's forward for
// corpus items): 1 op -> single_op (level 1), 2..6 -> fused_chain (level 2),
// more -> network (level 3).
// Split, fixed before training (split.h): the split key of an example made
// from a cache winner is its group's op-chain (the sorted multiset of its op
// names), so every shape and variant of one op-chain lands in one split; a
// corpus item's key is its task hash (sha256 of the normalised reference).
// The key's hash puts it in "heldout" (heldout_percent of the hash space:
// never trained on, only reported), "validation" (the next
// validation_percent: checkpoints and settings are chosen on it; SFT and RL
// skip it too) or "train".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dice/core/status.h"

namespace dice::training {

struct DatasetOptions {
  std::vector<std::string> cache_dbs;  ///< dice cache SQLite files
  std::vector<std::string> corpora;    ///< KernelBench-format JSON / JSONL files
  std::string out_path;                ///< JSONL output (examples.h schema)
  double min_speedup = 2.0;
  double heldout_percent = 30.0;       ///< [0, 100]: share of split keys held out (split.h)
  double validation_percent = 20.0;    ///< [0, 100 - heldout_percent]: share of split keys for validation
  bool keep_tasks = false;             ///< write answer-less corpus items as kind "task" (stage-2 RL tasks)
  std::string verify = "auto";         ///< corpus pairs: "auto" | "judge" | "none" (see above)
  std::string verify_device = "cuda";  ///< judge: "cuda", "cuda:N" or "cpu" (pure-PyTorch programs only)
  int64_t verify_jobs = 8;             ///< judge: programs judged at once (each a child process)
  double verify_timeout_s = 300;       ///< judge: limit per program, seconds
  int64_t device_infill_spans = 2;     ///< "device_infill" examples per cache winner (0 = none)
  int64_t device_infill_max_bytes = 384;  ///< longest middle of a device_infill example, bytes
};

struct DatasetReport {
  int64_t read = 0;               ///< items read from all sources
  int64_t malformed = 0;          ///< dropped: missing/ill-typed fields
  int64_t no_answer = 0;          ///< a corpus task with an empty cuda_code: dropped, or written as "task" with keep_tasks
  int64_t unverified_winner = 0;  ///< dropped: cache winner never verified
  int64_t failed_verification = 0;  ///< dropped: judged and not correct (verify = judge)
  int64_t verified = 0;             ///< corpus pairs judged correct here
  int64_t below_speedup = 0;      ///< dropped: known speedup < min_speedup
  int64_t not_timed = 0;          ///< kept without a speedup (unverified-here)
  int64_t duplicates = 0;         ///< dropped: same normalised answer
  int64_t written = 0, infill = 0, e2e = 0, device = 0, device_infill = 0, task = 0, heldout = 0, validation = 0;
  /// Examples per split ("train", "validation", "heldout") and kind.
  std::map<std::string, std::map<std::string, int64_t>> split_kinds;
  /// Distinct op-chains per split (examples from cache winners only).
  std::map<std::string, int64_t> split_op_chains;
  int64_t level_counts[3] = {0, 0, 0};
  bool gpu_present = false;
  std::string verification_note;  ///< what was (not) re-verified here and why
};

/// The dedupe key: hex sha256 of `source` with // and /* */ comments
/// removed and every whitespace run collapsed to one space (trimmed).
std::string NormalisedSourceHash(const std::string& source);

/// Builds the dataset. `log` gets human-readable lines (may be null).
/// Errors: kInvalidArgument for no source, no --out, min_speedup < 0,
/// split percentages that CheckSplitOptions (split.h) refuses, an unknown verify mode, verify_jobs < 1; kNotFound / kIoError / kCorrupt naming
/// a source that cannot be read or is not JSON/JSONL at all (a malformed
/// item inside a readable file is counted, not fatal); kIoError for the
/// output.
Expected<DatasetReport> BuildDataset(const DatasetOptions& options, const std::function<void(const std::string&)>& log);

}  // namespace dice::training
