// program_judge.h — whole KernelBench-format programs judged from C++.
//
// The second consumer of extension-form code (issue 3): an end-to-end DICE
// generation, or an infilling item assembled with its prefix and suffix, is a
// Python program whose `ModelNew` builds its CUDA with
// torch.utils.cpp_extension.load_inline. JudgeProgram runs it against the
// reference program's `Model` by KernelBench's protocol in a child Python
// process (runtime/python/dice_kb_judge.py): compile, `trials` seeded
// correctness trials (allclose atol/rtol 1e-2), then both timed (median ms).
// The child is killed at the deadline; a crash, a hang, a compile error or a
// wrong answer is a ProgramVerdict with the cause, never an error of the host.
// Used by the training module's stage-2 (end-to-end) reward and by
// `dice judge`.
#pragma once

#include <string>

#include "dice/core/status.h"

namespace dice::runtime {

/// How JudgeProgram runs the judge.
struct ProgramJudgeOptions {
  std::string python = "python3";  ///< interpreter with torch installed (PATH searched)
  /// dice_kb_judge.py; empty: $DICE_KB_JUDGE, else the source tree's
  /// runtime/python/dice_kb_judge.py, else <prefix>/share/dice/dice_kb_judge.py.
  std::string judge_script;
  std::string device = "cuda";     ///< "cuda", "cuda:N" or "cpu" (a CPU run judges pure-PyTorch ModelNew only)
  int trials = 5;                  ///< correctness trials (KernelBench: 5)
  int reps = 20;                   ///< timed runs per model (median)
  long long seed = 42;             ///< torch.manual_seed for init (seed) and trial t (seed + 1 + t)
  double atol = 1e-2;              ///< KernelBench's tolerance
  double rtol = 1e-2;
  double timeout_s = 300.0;        ///< whole child (load_inline build + trials + timing), seconds
  /// Directory for the programs, the log and TORCH_EXTENSIONS_DIR; empty: a
  /// fresh mkdtemp under $TMPDIR (or /tmp), removed afterwards unless keep_files.
  std::string work_dir;
  bool keep_files = false;
  std::string cuda_arch_list = "9.0";  ///< TORCH_CUDA_ARCH_LIST for load_inline, unless already set
};

/// What happened to one candidate program.
struct ProgramVerdict {
  /// correct | incorrect | parse_error | bad_program | compile_error |
  /// runtime_error | no_device | crashed | timeout
  std::string outcome;
  bool compiled = false;  ///< the program imported (its extension built)
  bool correct = false;   ///< every trial within tolerance
  double ref_ms = 0.0;    ///< reference Model, median ms (when correct)
  double new_ms = 0.0;    ///< candidate ModelNew, median ms (when correct)
  double speedup = 0.0;   ///< ref_ms / new_ms (when correct)
  double compile_s = 0.0; ///< import/build time of the candidate, seconds
  double wall_s = 0.0;    ///< the whole child, seconds
  std::string phase;      ///< last phase the child reached (compile | correctness | timing)
  std::string error;      ///< the cause when not correct (tail of the log for crashes)
  std::string log_path;   ///< child's stdout+stderr (kept only with keep_files)
};

/// Judges `candidate_source` (defines ModelNew) against `reference_source`
/// (defines Model, get_inputs, get_init_inputs), both Python source text.
/// Errors (the host side only): kNotFound (no judge script), kIoError (work
/// directory or files cannot be written, the interpreter cannot be spawned).
/// A bad candidate is never an error: see ProgramVerdict::outcome.
Expected<ProgramVerdict> JudgeProgram(const std::string& reference_source, const std::string& candidate_source,
                                      const ProgramJudgeOptions& options = {});

/// The judge script JudgeProgram would use for `configured` (see
/// ProgramJudgeOptions::judge_script), or kNotFound naming the places looked at.
Expected<std::string> ResolveJudgeScript(const std::string& configured);

}  // namespace dice::runtime
