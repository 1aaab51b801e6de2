// program_judge.cc — JudgeProgram: write the two programs, run dice_kb_judge.py
// through RunProcess, read its RESULT line (program_judge.h).
#include "dice/runtime/program_judge.h"

#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "dice/runtime/process.h"
#include "text_files.h"

#ifndef DICE_KB_JUDGE_SOURCE
#define DICE_KB_JUDGE_SOURCE ""
#endif
#ifndef DICE_KB_JUDGE_INSTALLED
#define DICE_KB_JUDGE_INSTALLED ""
#endif

namespace dice::runtime {
namespace {

// The last `max_lines` lines of `text`, for a crash report.
std::string Tail(const std::string& text, int max_lines) {
  size_t pos = text.size();
  int lines = 0;
  while (pos > 0 && lines <= max_lines) {
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos) return text;
    ++lines;
  }
  return text.substr(pos + 1);
}

// rm -rf `path` (nftw, depth first, no symlink following). Not
// std::filesystem::remove_all: in processes that load LibTorch (the CLI, the
// trainer) LibTorch's exported copy of it gets interposed and crashes.
void RemoveTree(const std::string& path) {
  auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) {
    ::remove(p);  // best effort: a leftover file in $TMPDIR is not an error
    return 0;
  };
  ::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

std::string Fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

Expected<std::string> ResolveJudgeScript(const std::string& configured) {
  std::vector<std::string> tried;
  auto pick = [&](const std::string& p) {
    if (p.empty()) return false;
    tried.push_back(p);
    return text_files::IsFile(p);
  };
  if (!configured.empty()) {
    if (pick(configured)) return configured;
    return Status(StatusCode::kNotFound, "judge script '" + configured + "' does not exist");
  }
  if (const char* env = std::getenv("DICE_KB_JUDGE"); env != nullptr && env[0] != '\0') {
    if (pick(env)) return std::string(env);
    return Status(StatusCode::kNotFound, std::string("DICE_KB_JUDGE='") + env + "' does not exist");
  }
  for (const char* p : {DICE_KB_JUDGE_SOURCE, DICE_KB_JUDGE_INSTALLED}) {
    if (pick(p)) return std::string(p);
  }
  std::string list;
  for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t;
  return Status(StatusCode::kNotFound, "dice_kb_judge.py not found (looked at: " + list +
                                           "); set ProgramJudgeOptions::judge_script or DICE_KB_JUDGE");
}

Expected<ProgramVerdict> JudgeProgram(const std::string& reference_source, const std::string& candidate_source,
                                      const ProgramJudgeOptions& options) {
  auto script = ResolveJudgeScript(options.judge_script);
  if (!script.ok()) return script.status();

  std::string dir = options.work_dir;
  bool made_dir = false;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") + "/dice-judge-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      return Status(StatusCode::kIoError, "mkdtemp '" + tmpl + "': " + strerror(errno));
    }
    dir = tmpl;
    made_dir = true;
  } else if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status(StatusCode::kIoError, "mkdir '" + dir + "': " + strerror(errno));
  }
  const std::string ref = dir + "/reference.py", prog = dir + "/program.py", log = dir + "/judge.log";
  DICE_RETURN_IF_ERROR(text_files::WriteText(ref, reference_source));
  DICE_RETURN_IF_ERROR(text_files::WriteText(prog, candidate_source));

  std::vector<std::string> argv = {options.python, *script, "--reference", ref, "--program", prog,
                                   "--device", options.device, "--trials", std::to_string(options.trials),
                                   "--reps", std::to_string(options.reps), "--seed", std::to_string(options.seed),
                                   "--atol", Fmt(options.atol), "--rtol", Fmt(options.rtol)};
  ProcessOptions po;
  po.timeout_s = options.timeout_s;
  po.output_path = log;
  // load_inline caches builds by extension name under TORCH_EXTENSIONS_DIR:
  // one directory per judged program, so two candidates never share a build.
  po.env = {"TORCH_EXTENSIONS_DIR=" + dir + "/ext", "PYTHONUNBUFFERED=1", "MAX_JOBS=1"};
  if (std::getenv("TORCH_CUDA_ARCH_LIST") == nullptr) po.env.push_back("TORCH_CUDA_ARCH_LIST=" + options.cuda_arch_list);
  auto run = RunProcess(argv, po);
  if (!run.ok()) return run.status().WithContext("running the KernelBench judge");

  ProgramVerdict v;
  v.wall_s = run->wall_ms / 1e3;
  const std::string text = text_files::ReadText(log);
  std::string result_line;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("PHASE ", 0) == 0) v.phase = line.substr(6);
    if (line.rfind("RESULT ", 0) == 0) result_line = line.substr(7);
  }
  if (!result_line.empty()) {
    auto j = nlohmann::json::parse(result_line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) {
      v.outcome = j.value("outcome", "runtime_error");
      v.compiled = j.value("compiled", false);
      v.correct = j.value("correct", false);
      v.ref_ms = j.value("ref_ms", 0.0);
      v.new_ms = j.value("new_ms", 0.0);
      v.speedup = j.value("speedup", 0.0);
      v.compile_s = j.value("compile_s", 0.0);
      v.error = j.value("error", "");
    } else {
      v.outcome = "runtime_error";
      v.error = "the judge printed an unreadable RESULT line: " + result_line.substr(0, 200);
    }
  } else {
    // No verdict: the child died or was killed in the phase it last announced.
    v.outcome = run->timed_out ? "timeout" : "crashed";
    v.compiled = v.phase == "correctness" || v.phase == "timing";
    // SIGKILL that we did not send is most often the kernel's out-of-memory
    // killer (a KernelBench task's full-size inputs on a small machine).
    const bool sigkill = !run->timed_out && !run->exited && run->signal == 9;
    v.error = "judge " + run->Describe(options.timeout_s) + (v.phase.empty() ? "" : " during " + v.phase) +
              (sigkill ? " (SIGKILL: likely out of memory; try a machine with more memory or smaller task sizes)"
                       : "") +
              "; log tail:\n" + Tail(text, 12);
  }
  if (options.keep_files) {
    v.log_path = log;
  } else {
    if (made_dir) {
      RemoveTree(dir);
    } else {
      for (const auto& p : {ref, prog, log}) ::unlink(p.c_str());
      RemoveTree(dir + "/ext");
    }
  }
  return v;
}

}  // namespace dice::runtime
