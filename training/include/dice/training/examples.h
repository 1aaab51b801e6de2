// dice/training/examples.h — the CuKe example schema (one JSON object per
// line; documented in training/README.md), reading it back, turning an
// example into the prompt/completion text the model trains on, the
// device-form view of a completion that RL rewards compile, and the data
// schedule of BiC-RL. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dice/generator/prompts.h"
#include "dice/core/candidate.h"
#include "dice/core/ir.h"
#include "dice/core/status.h"

namespace dice::training {

/// One CuKe example (a JSONL line). Fields as in training/README.md.
struct CukeExample {
  std::string id;          ///< stable id ("corpus:6995", "cache:<task key>")
  std::string kind;        ///< "infill" | "e2e" | "device" | "device_infill" | "task" (an e2e task without an answer: RL only)
  int level = 1;           ///< KernelBench level 1..3
  std::string difficulty;  ///< "single_op" | "fused_chain" | "network"
  std::string source;      ///< where it came from ("cache:<db>", "corpus:<file>")
  std::string reference;   ///< the PyTorch reference program
  std::string prefix, middle, suffix;  ///< infill/device: the program around and the CUDA middle
  std::string program;     ///< e2e: the whole CUDA program (answer)
  std::optional<double> speedup;  ///< over eager, when timed
  std::string verified;    ///< "gpu:<name>" | "cache" | "unverified-here"
  std::string hash;        ///< sha256 of the normalised answer source (dedupe key)
  std::string task_hash;   ///< sha256 of the normalised reference (split key)
  std::string split;       ///< "train" | "validation" | "heldout" (split.h; "" in old datasets = train)
  std::string op_chain;    ///< device kinds: the group's op-chain (split.h OpChainKey), the split key; "" otherwise
  /// device and device_infill (from a cache winner): the fusion group's ir::Canonical
  /// text, its input specs ("f32[1024,8192];f32[8192]") and the winner's
  /// LaunchPlan JSON; the device-form judge (reward.h) verifies an answer
  /// against them. Empty in datasets written before they existed.
  std::string graph, input_specs, launch_plan;
  /// device_infill only: the source before `prefix` that the prompt leaves
  /// out (InfillSplit::preamble); AnswerSource puts it back.
  std::string preamble;

  /// The JSON line (no trailing newline).
  std::string ToJsonLine() const;
  /// Parses one line. `where` ("file:line") prefixes errors.
  /// Errors: kCorrupt naming `where` and the field (not JSON, not an object,
  /// a missing/ill-typed required field: id, kind, reference and, per kind,
  /// middle (infill, device) or program (e2e; a task needs none); an
  /// unknown kind; a level outside 1..3).
  static Expected<CukeExample> FromJsonLine(const std::string& line, const std::string& where);
};

/// "f32[1024,8192];f32[8192]" (cache WinnerRecord::input_specs) -> one
/// contiguous ir::TensorSpec per item. Errors: kInvalidArgument naming the
/// item that has no "[...]" shape, an unknown dtype or a non-integer dim.
Expected<std::vector<ir::TensorSpec>> ParseInputSpecs(const std::string& text);

/// Reads a JSONL file of CukeExamples. A malformed line is skipped and its
/// error ("file:line: ...") appended to `skipped` (when not null); blank
/// lines are ignored. Errors: kNotFound / kIoError for the file;
/// kInvalidArgument when no line is valid (naming the file and the first
/// error).
Expected<std::vector<CukeExample>> ReadExamples(const std::string& path, std::vector<std::string>* skipped);

/// The chat prompt (ChatPrompt with `templates`.system) and the answer text
/// the model is trained to produce: a fenced code block holding the middle
/// (infill, device, device_infill) or the program (e2e); a task has the end-to-end prompt
/// and an empty answer. Errors: those of
/// BuildInfillingPrompt / BuildEndToEndPrompt.
struct PromptAndAnswer {
  std::string prompt;
  std::string answer;
};
Expected<PromptAndAnswer> ExamplePromptAndAnswer(const CukeExample& example, const generator::PromptTemplates& templates);

/// A span of a kernel source to infill: source = preamble + prefix +
/// middle + suffix. The preamble (includes and the __device__ helpers before
/// the first __global__ function: ~9 KB in a template kernel, more than a
/// byte-level model's context) is left out of the prompt and put back when
/// the answer is compiled.
struct InfillSplit {
  std::string preamble, prefix, middle, suffix;
};
/// Kernel infilling spans of a device-form source (a cache winner's
/// kernels), as DICE's stage-1 tasks mask part of a kernel: up to `spans`
/// runs of 1..3 whole lines inside the bodies of `__global__` functions
/// (not the shared __device__ helpers every template kernel carries; blank
/// lines, lone braces, comments and preprocessor lines are never in a run), each at
/// most `max_bytes` long, their starts spread evenly over the candidate
/// lines and never overlapping (deterministic: the same source gives the
/// same spans). Fewer spans when the source has fewer candidate lines; none
/// for spans <= 0 or max_bytes <= 0.
std::vector<InfillSplit> SplitKernelForInfill(const std::string& source, int64_t spans, int64_t max_bytes);

/// The whole source an answer's code stands for: prefix + code + suffix for
/// a "device_infill" task, the code itself for every other kind.
/// ("device_infill": preamble + prefix + code + suffix.)
std::string AnswerSource(const CukeExample& task, const std::string& code);

/// True for the kinds made from a cache winner ("device", "device_infill"):
/// they carry graph/input_specs/launch_plan and are judged in the device form.
inline bool IsDeviceKind(const std::string& kind) { return kind == "device" || kind == "device_infill"; }

/// The device form (runtime/candidate.h) of CUDA text taken from a model's
/// answer, for NVRTC: the text inside a Python `source = """..."""` when
/// present; includes other than the toolkit's device headers (cuda_fp16.h,
/// cuda_bf16.h, cuda_fp8.h, cuda/, cub/, cooperative_groups, math_constants.h,
/// mma.h) dropped — NVRTC has no C library, C++ standard library or torch
/// headers — and a prelude defining the <cstdint> integer types (as glibc
/// does), size_t, INFINITY, NAN and FLT_MAX put first; top-level items that use
/// torch host types (torch::, at::, TORCH_, PYBIND11) dropped (they need
/// nvcc + LibTorch: the extension form); non-template `__global__` kernels
/// given C linkage; one launch (grid 1, block 1) per kernel so the compiler
/// checks every kernel exists. Errors: kNotFound when no `__global__` kernel
/// remains.
Expected<Candidate> DeviceFormCandidate(const std::string& code, const std::string& origin);

/// BiC-RL data scheduling over tasks of levels 1..3 (DICE: single operators,
/// then fused chains, then networks, taken in order).
///   kOrdered: tasks sorted by level (stable), `per_step` taken per step in
///     that order, wrapping around at the end.
///   kAdaptive: only the current level's tasks are taken (in order, wrapping
///     within the level) until the running success rate over the last
///     `window` rewards reaches `advance_at`, then the next level.
class TaskSchedule {
 public:
  enum class Mode { kOrdered, kAdaptive };
  /// REQUIRES: levels non-empty, per_step >= 1, window >= 1.
  TaskSchedule(std::vector<int> levels, Mode mode, int64_t per_step, double advance_at = 0.5, int64_t window = 16);
  /// Indices (into `levels`) of the next step's tasks.
  std::vector<size_t> Next();
  /// Feeds the rewards of the last step (adaptive: may advance the level).
  void Report(const std::vector<double>& rewards);
  /// The level now drawn from (adaptive), or the level of the next task.
  int current_level() const;

 private:
  std::vector<int> levels_;
  std::vector<size_t> order_;
  Mode mode_;
  int64_t per_step_;
  double advance_at_;
  int64_t window_;
  size_t cursor_ = 0;
  int level_ = 0;
  std::vector<double> recent_;
};

}  // namespace dice::training
