// `dice judge` (cli/judge.h).
#include "judge.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/program_judge.h"

namespace dice::cli {
namespace {

struct JudgeArgs {
  std::string reference, candidate, keep_dir;
  runtime::ProgramJudgeOptions options;
};

// Picks the device the judge runs on from --device. "auto" (the default):
// cuda when the driver reports a device, else the CPU with a notice on
// stderr. "cuda" / "cuda:N" without that device: exit 3 (as `dice generate
// --device cuda`); any other value but "cpu": exit 2. Returns kExitOk when
// a.options.device is set to what the child should use.
int ResolveDevice(JudgeArgs& a) {
  std::string& device = a.options.device;
  if (device == "cpu") return kExitOk;
  int ordinal = 0;
  if (device != "auto" && device != "cuda") {
    const std::string digits = device.rfind("cuda:", 0) == 0 ? device.substr(5) : std::string();
    if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) {
      return Fail(kExitBadInput, "--device '" + device + "' is not a device (auto, cpu, cuda, cuda:N)");
    }
    ordinal = std::stoi(digits);
  }
  auto found = runtime::QueryDevice(ordinal);
  if (found.ok()) {
    if (device == "auto") device = "cuda";
    return kExitOk;
  }
  if (device != "auto") {
    return Fail(kExitNoGpu, "--device " + device + " asked for but no CUDA device is present (" +
                                found.status().message() + ")");
  }
  std::fprintf(stderr, "dice judge: no CUDA device present (%s); judging on the CPU (only a pure-PyTorch ModelNew "
               "runs there; --device cuda makes this an error, exit 3)\n", found.status().message().c_str());
  device = "cpu";
  return kExitOk;
}

// A time or ratio the judge did not measure (0) is null in the verdict, as
// in `dice tune --json`.
nlohmann::json Measured(double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); }

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// Exit codes in judge.h.
int RunJudge(JudgeArgs& a) {
  std::string reference, candidate;
  if (!ReadFile(a.reference, &reference)) {
    std::fprintf(stderr, "dice judge: cannot read the reference program '%s'\n", a.reference.c_str());
    return 2;
  }
  if (!ReadFile(a.candidate, &candidate)) {
    std::fprintf(stderr, "dice judge: cannot read the candidate program '%s'\n", a.candidate.c_str());
    return 2;
  }
  if (const int rc = ResolveDevice(a); rc != kExitOk) return rc;
  if (!a.keep_dir.empty()) {
    a.options.work_dir = a.keep_dir;
    a.options.keep_files = true;
  }
  auto v = runtime::JudgeProgram(reference, candidate, a.options);
  if (!v.ok()) {
    std::fprintf(stderr, "dice judge: %s\n", v.status().message().c_str());
    return 1;
  }
  nlohmann::json j = {{"outcome", v->outcome}, {"compiled", v->compiled}, {"correct", v->correct},
                      {"ref_ms", Measured(v->ref_ms)}, {"new_ms", Measured(v->new_ms)},
                      {"speedup", Measured(v->speedup)},
                      {"compile_s", v->compile_s}, {"wall_s", v->wall_s}, {"phase", v->phase},
                      {"error", v->error}};
  if (!v->log_path.empty()) j["log"] = v->log_path;
  std::printf("%s\n", j.dump().c_str());
  // The child's torch saw no GPU although one was asked for (or found by the
  // driver): like a missing device up front, exit 3, not "judged not correct".
  if (v->outcome == "no_device") return kExitNoGpu;
  return v->correct ? 0 : 4;
}

}  // namespace

void RegisterJudge(CLI::App& app, CommandTable& table) {
  auto args = std::make_shared<JudgeArgs>();
  JudgeArgs& a = *args;
  a.options.device = "auto";
  auto* cmd = app.add_subcommand("judge", "run a KernelBench-format program (ModelNew) against its reference "
                                          "Model: compile, correctness trials, timing; prints the verdict as JSON");
  cmd->add_option("--reference", a.reference, "reference program (Model, get_inputs, get_init_inputs)")->required();
  cmd->add_option("--candidate", a.candidate, "candidate program defining ModelNew")->required();
  cmd->add_option("--device", a.options.device, "auto (default: cuda when a GPU is present, else cpu with a notice), cuda, cuda:N (exit 3 without "
                  "that GPU), or cpu (pure-PyTorch ModelNew only)");
  cmd->add_option("--trials", a.options.trials, "correctness trials (KernelBench: 5)")->check(CLI::Range(1, 1000));
  cmd->add_option("--reps", a.options.reps, "timed runs per model (median)")->check(CLI::Range(1, 100000));
  cmd->add_option("--seed", a.options.seed, "seed of init (seed) and trial t (seed + 1 + t)");
  cmd->add_option("--atol", a.options.atol, "absolute tolerance (default 1e-2)")->check(CLI::PositiveNumber);
  cmd->add_option("--rtol", a.options.rtol, "relative tolerance (default 1e-2)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--timeout-s", a.options.timeout_s, "limit for the whole judge process, seconds (default 300)")
      ->check(CLI::Range(1.0, 86400.0));
  cmd->add_option("--python", a.options.python, "python interpreter with torch (default python3)");
  cmd->add_option("--keep-files", a.keep_dir, "keep the programs, the judge's log and the build in this directory");
  table.Add(cmd, [args] { return RunJudge(*args); });
}

}  // namespace dice::cli
