// CPU tests of RunProcess (process.h) and JudgeProgram (program_judge.h):
// the KernelBench protocol on pure-PyTorch ModelNew programs run on the CPU,
// and every way a candidate can fail, each recorded with its cause while the
// host goes on. Needs python3 with torch (scripts/setup.sh installs it).
#include <signal.h>

#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/process.h"
#include "dice/runtime/program_judge.h"

namespace dice::runtime {
namespace {

// KernelBench-format reference: y = relu(x) * 2 on a [64, 128] input.
constexpr const char* kReference = R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
    def forward(self, x):
        return torch.relu(x) * self.scale

def get_inputs():
    return [torch.randn(64, 128)]

def get_init_inputs():
    return [2.0]
)";

std::string Candidate(const std::string& forward_body, const std::string& preamble = "") {
  return "import torch\nimport torch.nn as nn\n" + preamble +
         "\nclass ModelNew(nn.Module):\n"
         "    def __init__(self, scale):\n"
         "        super().__init__()\n"
         "        self.scale = scale\n"
         "    def forward(self, x):\n" +
         forward_body + "\n";
}

ProgramJudgeOptions CpuOptions() {
  ProgramJudgeOptions o;
  o.device = "cpu";
  o.trials = 2;
  o.reps = 3;
  o.timeout_s = 120;
  return o;
}

ProgramVerdict Judge(const std::string& candidate, ProgramJudgeOptions o = CpuOptions()) {
  auto v = JudgeProgram(kReference, candidate, o);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  return v.ok() ? *v : ProgramVerdict{};
}

TEST(RunProcessTest, ReportsExitStatusSignalAndTimeout) {
  auto exit3 = RunProcess({"sh", "-c", "exit 3"}, {});
  ASSERT_TRUE(exit3.ok()) << exit3.status().ToString();
  EXPECT_TRUE(exit3->exited);
  EXPECT_EQ(exit3->exit_code, 3);
  EXPECT_FALSE(exit3->ok());

  auto segv = RunProcess({"sh", "-c", "kill -SEGV $$"}, {});
  ASSERT_TRUE(segv.ok());
  EXPECT_FALSE(segv->exited);
  EXPECT_EQ(segv->signal, SIGSEGV);
  EXPECT_NE(segv->Describe(1).find("signal 11"), std::string::npos) << segv->Describe(1);

  ProcessOptions quick;
  quick.timeout_s = 0.5;
  const auto t0 = std::chrono::steady_clock::now();
  // The grandchild `sleep` is in the child's process group: killed with it.
  auto hang = RunProcess({"sh", "-c", "sleep 30; sleep 30"}, quick);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(hang.ok());
  EXPECT_TRUE(hang->timed_out);
  EXPECT_LT(s, 5.0);
  EXPECT_NE(hang->Describe(0.5).find("0.5 s limit"), std::string::npos);
}

TEST(RunProcessTest, CapturesOutputAndAppliesEnvironment) {
  const std::string log = ::testing::TempDir() + "/run_process_env.log";
  ProcessOptions o;
  o.output_path = log;
  o.env = {"DICE_PROCESS_TEST=hello", "HOME=/nonexistent-home"};
  auto r = RunProcess({"sh", "-c", "echo out:$DICE_PROCESS_TEST; echo err:$HOME >&2"}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ok());
  FILE* f = std::fopen(log.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char buf[256] = {0};
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  EXPECT_EQ(std::string(buf, n), "out:hello\nerr:/nonexistent-home\n");
}

TEST(RunProcessTest, MissingProgramAndEmptyArgvAreErrors) {
  auto missing = RunProcess({"/nonexistent/dice-no-such-tool"}, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  EXPECT_NE(missing.status().message().find("dice-no-such-tool"), std::string::npos);
  EXPECT_EQ(RunProcess({}, {}).status().code(), StatusCode::kInvalidArgument);
}

TEST(ProgramJudgeTest, CorrectProgramIsTimedAgainstTheReference) {
  ProgramVerdict v = Judge(Candidate("        return torch.clamp_min(x, 0) * self.scale"));
  EXPECT_EQ(v.outcome, "correct") << v.error;
  EXPECT_TRUE(v.compiled);
  EXPECT_TRUE(v.correct);
  EXPECT_GT(v.ref_ms, 0.0);
  EXPECT_GT(v.new_ms, 0.0);
  EXPECT_NEAR(v.speedup, v.ref_ms / v.new_ms, 1e-6 * v.speedup);
  EXPECT_EQ(v.phase, "timing");
}

TEST(ProgramJudgeTest, WrongValuesAndWrongShapesAreIncorrect) {
  ProgramVerdict off = Judge(Candidate("        return torch.relu(x) * self.scale + 0.05"));
  EXPECT_EQ(off.outcome, "incorrect");
  EXPECT_TRUE(off.compiled);
  EXPECT_FALSE(off.correct);
  EXPECT_NE(off.error.find("max abs diff 0.05"), std::string::npos) << off.error;

  // Within KernelBench's 1e-2 tolerance: correct.
  ProgramVerdict close = Judge(Candidate("        return torch.relu(x) * self.scale + 0.005"));
  EXPECT_EQ(close.outcome, "correct") << close.error;

  ProgramVerdict shape = Judge(Candidate("        return (torch.relu(x) * self.scale)[:, :64]"));
  EXPECT_EQ(shape.outcome, "incorrect");
  EXPECT_NE(shape.error.find("shape (64, 64), want (64, 128)"), std::string::npos) << shape.error;
}

TEST(ProgramJudgeTest, BadProgramsAreRecordedWithTheirCause) {
  ProgramVerdict syntax = Judge("import torch\nclass ModelNew(:\n");
  EXPECT_EQ(syntax.outcome, "parse_error");
  EXPECT_NE(syntax.error.find("SyntaxError"), std::string::npos);

  ProgramVerdict none = Judge("import torch\nclass Model2:\n    pass\n");
  EXPECT_EQ(none.outcome, "bad_program");
  EXPECT_NE(none.error.find("no ModelNew"), std::string::npos);

  ProgramVerdict import_fails = Judge(Candidate("        return x", "raise RuntimeError('Error building extension custom_ops')\n"));
  EXPECT_EQ(import_fails.outcome, "compile_error");
  EXPECT_FALSE(import_fails.compiled);
  EXPECT_NE(import_fails.error.find("Error building extension"), std::string::npos);

  ProgramVerdict raises = Judge(Candidate("        raise ValueError('kernel launch failed')"));
  EXPECT_EQ(raises.outcome, "runtime_error");
  EXPECT_TRUE(raises.compiled);
  EXPECT_NE(raises.error.find("kernel launch failed"), std::string::npos);
}

TEST(ProgramJudgeTest, CrashAndHangCostOnlyTheCandidate) {
  ProgramVerdict crash = Judge(Candidate("        import os\n        os.abort()"));
  EXPECT_EQ(crash.outcome, "crashed");
  EXPECT_EQ(crash.phase, "correctness");
  EXPECT_TRUE(crash.compiled);
  EXPECT_NE(crash.error.find("signal 6"), std::string::npos) << crash.error;

  ProgramJudgeOptions o = CpuOptions();
  o.timeout_s = 20;
  ProgramVerdict hang = Judge(Candidate("        while True:\n            pass"), o);
  EXPECT_EQ(hang.outcome, "timeout");
  EXPECT_EQ(hang.phase, "correctness");
  EXPECT_LT(hang.wall_s, 30.0);
  EXPECT_NE(hang.error.find("20 s limit"), std::string::npos) << hang.error;

  // The host goes on: the next candidate is judged normally.
  EXPECT_EQ(Judge(Candidate("        return torch.relu(x) * self.scale")).outcome, "correct");
}

TEST(ProgramJudgeTest, CudaDeviceWithoutAGpuIsNoDevice) {
  if (CudaDriver::Get().ok()) GTEST_SKIP() << "a CUDA device is present (ProgramJudgeGpuTest covers it)";
  ProgramJudgeOptions o = CpuOptions();
  o.device = "cuda";
  ProgramVerdict v = Judge(Candidate("        return torch.relu(x) * self.scale"), o);
  EXPECT_EQ(v.outcome, "no_device");
  EXPECT_NE(v.error.find("no CUDA device"), std::string::npos) << v.error;
}

TEST(ProgramJudgeTest, KeepFilesLeavesTheLogAndMissingScriptIsNotFound) {
  ProgramJudgeOptions o = CpuOptions();
  o.keep_files = true;
  o.work_dir = ::testing::TempDir() + "/dice_judge_keep";
  ProgramVerdict v = Judge(Candidate("        return torch.relu(x) * self.scale"), o);
  EXPECT_EQ(v.outcome, "correct") << v.error;
  EXPECT_EQ(v.log_path, o.work_dir + "/judge.log");
  FILE* f = std::fopen(v.log_path.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::fclose(f);

  ProgramJudgeOptions bad = CpuOptions();
  bad.judge_script = "/nonexistent/dice_kb_judge.py";
  auto r = JudgeProgram(kReference, Candidate("        return x"), bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/dice_kb_judge.py"), std::string::npos);
}

}  // namespace
}  // namespace dice::runtime
