// GPU tests of verification and timing (DESIGN.md "Verification", "Timing"):
// hand-written wrong kernels for relu over f32[4099] go through the real
// Tuner -> WorkerPool -> dice-worker path and must each be rejected with the
// right outcome, while this test process survives crashes and hangs; correct
// kernels are accepted and timed against a measured baseline. Skipped
// without a GPU.
#include <stdlib.h>

#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixed_generator.h"
#include "relu_graph.h"
#include "dice/cache/store.h"
#include "dice/generator/templates.h"
#include "dice/runtime/compiler.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/kernel_launcher.h"
#include "dice/core/task.h"
#include "dice/runtime/tuner.h"

namespace dice::runtime {
namespace {

constexpr int kN = 4099;  // not a multiple of any block size: tails matter

#define DICE_REQUIRE_GPU()                                                         \
  do {                                                                             \
    auto _drv = CudaDriver::Get();                                                 \
    if (!_drv.ok()) GTEST_SKIP() << "no GPU: " << _drv.status().ToString();        \
  } while (0)

Expected<TargetInfo> LocalTarget() {
  auto dev = QueryDevice(0);
  if (!dev.ok()) return dev.status();
  return TargetForDevice(0);
}

Task ReluTask(int64_t n) {
  ir::Graph g = runtime_test::ReluGraph();
  auto target = LocalTarget();
  EXPECT_TRUE(target.ok()) << target.status().ToString();
  auto task = Task::Make(g, {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {n})}, *target);
  EXPECT_TRUE(task.ok()) << task.status().ToString();
  return *task;
}

Candidate Kernel(const std::string& origin, const std::string& name, const std::string& body,
                 uint32_t block = 256) {
  Candidate c;
  c.origin = origin;
  c.source = "#include <cuda_fp16.h>\n"
             "extern \"C\" __global__ void " + name + "(const float* __restrict__ x, float* __restrict__ y) {\n"
             "  const int n = " + std::to_string(kN) + ";\n"
             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n" + body + "\n}\n";
  c.plan.launches.push_back(KernelLaunch{name, {(kN + block - 1) / block, 1, 1}, {block, 1, 1}, 0});
  return c;
}

std::vector<Candidate> HandWrittenKernels() {
  std::vector<Candidate> v;
  v.push_back(Kernel("correct", "relu_ok", "  if (i < n) y[i] = fmaxf(x[i], 0.0f);"));
  v.push_back(Kernel("off_by_one", "relu_obo", "  if (i < n) y[i] = fmaxf(x[i + 1 < n ? i + 1 : i], 0.0f);"));
  v.push_back(Kernel("unwritten_tail", "relu_tail", "  if (i < 4096) y[i] = fmaxf(x[i], 0.0f);"));
  v.push_back(Kernel("illegal_address", "relu_wild",
                     "  float* wild = (float*)0xdead00000000ull;\n"
                     "  if (i < n) { y[i] = fmaxf(x[i], 0.0f); wild[i * 4097] = 1.0f; }"));
  // Each block's thread 0 clobbers the previous block's last element, racing
  // with the block that writes it: right or wrong depending on timing.
  v.push_back(Kernel("race", "relu_race",
                     "  if (i < n) y[i] = fmaxf(x[i], 0.0f);\n"
                     "  if (threadIdx.x == 0 && i > 0 && i < n) y[i - 1] = 1.0f;"));
  v.push_back(Kernel("nan_output", "relu_nan",
                     "  if (i < n) y[i] = (i == 77) ? __int_as_float(0x7fc00000) : fmaxf(x[i], 0.0f);"));
  v.push_back(Kernel("endless_loop", "relu_hang",
                     "  volatile const float* vx = x;\n"
                     "  while (vx[0] != 1e30f) { }\n"
                     "  if (i < n) y[i] = fmaxf(x[i], 0.0f);"));
  v.push_back(Kernel("wrong_dtype", "relu_half",
                     "  if (i < n) reinterpret_cast<__half*>(y)[i] = __float2half(fmaxf(x[i], 0.0f));"));
  v.push_back(Kernel("compile_error", "relu_bad", "  if (i < n) y[i] = fmaxf(x[i], 0.0f) this is not C++;"));
  Candidate tf32 = Kernel("reduced_precision", "relu_rp", "  if (i < n) y[i] = fmaxf(x[i], 0.0f);");
  tf32.reduced_precision = true;
  v.push_back(tf32);
  // Right outputs, but it overwrites its input with them: its own repeat
  // run agrees (relu is idempotent), so only the check of the trial data
  // after it ran catches it. In a model it would change a live tensor.
  v.push_back(Kernel("writes_input", "relu_inplace",
                     "  if (i < n) { const float v = fmaxf(x[i], 0.0f); y[i] = v; const_cast<float*>(x)[i] = v; }"));
  v.push_back(Kernel("correct_b128", "relu_ok128", "  if (i < n) y[i] = fmaxf(x[i], 0.0f);", 128));
  return v;
}

std::string TempDir() {
  std::string tmpl = ::testing::TempDir() + "dice-verifier-gpu-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

TEST(VerifierGpu, RejectsEachWrongKernelWithTheRightOutcomeAndAcceptsCorrectOnes) {
  DICE_REQUIRE_GPU();
  const std::string dir = TempDir();
  auto store = cache::Store::Open(cache::DatabasePath(dir));
  ASSERT_TRUE(store.ok()) << store.status().ToString();

  TuneOptions opt;
  opt.trials = 5;
  opt.candidate_timeout_s = 8;
  opt.budget_s = 400;
  opt.max_candidates = 64;
  auto gen = std::make_shared<runtime_test::FixedGenerator>(HandWrittenKernels());
  Tuner tuner(store->get(), {gen}, opt);
  Task task = ReluTask(kN);
  auto report = tuner.Tune(task);
  ASSERT_TRUE(report.ok()) << report.status().ToString();

  std::map<std::string, CandidateOutcome> by_origin;
  for (const auto& o : report->outcomes) by_origin[o.origin] = o;
  auto outcome = [&](const std::string& origin) {
    auto it = by_origin.find(origin);
    return it == by_origin.end() ? std::optional<Outcome>() : std::optional<Outcome>(it->second.outcome);
  };
  auto error = [&](const std::string& origin) { return by_origin[origin].error; };

  EXPECT_EQ(outcome("off_by_one"), Outcome::kVerifyFailed) << error("off_by_one");
  EXPECT_EQ(outcome("unwritten_tail"), Outcome::kVerifyFailed) << error("unwritten_tail");
  EXPECT_EQ(outcome("race"), Outcome::kVerifyFailed) << error("race");
  EXPECT_EQ(outcome("nan_output"), Outcome::kVerifyFailed) << error("nan_output");
  EXPECT_EQ(outcome("wrong_dtype"), Outcome::kVerifyFailed) << error("wrong_dtype");
  EXPECT_EQ(outcome("illegal_address"), Outcome::kCrashed) << error("illegal_address");
  EXPECT_EQ(outcome("endless_loop"), Outcome::kTimeout) << error("endless_loop");
  EXPECT_EQ(outcome("compile_error"), Outcome::kCompileError) << error("compile_error");
  EXPECT_EQ(outcome("reduced_precision"), Outcome::kSkipped) << error("reduced_precision");
  EXPECT_NE(error("unwritten_tail").find("nan"), std::string::npos) << error("unwritten_tail");
  EXPECT_EQ(outcome("writes_input"), Outcome::kVerifyFailed) << error("writes_input");
  EXPECT_NE(error("writes_input").find("wrote outside its outputs: random trial 0 (randn x1): input 0"),
            std::string::npos) << error("writes_input");

  // Candidates after the crash and the hang still ran (worker respawned);
  // correct_b128, after writes_input, on trials rebuilt from their seeds.
  for (const char* ok : {"correct", "correct_b128"}) {
    const std::optional<Outcome> o = outcome(ok);
    EXPECT_TRUE(o && IsVerified(*o)) << ok << ": " << by_origin[ok].outcome << " " << error(ok);
    EXPECT_GT(by_origin[ok].time_us, 0.0) << ok;
  }
  EXPECT_GT(report->baseline_us, 0.0);
  EXPECT_EQ(report->verified, 2);
  EXPECT_EQ(report->tried, 11);  // all but the reduced-precision one

  // Attempts are recorded, so a second run retries nothing (or serves the winner).
  auto attempts = (*store)->ListAttempts(task.Key());
  ASSERT_TRUE(attempts.ok());
  EXPECT_EQ(attempts->size(), 11u);
  auto again = tuner.Tune(task);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  if (!report->winner_origin.empty()) {
    EXPECT_TRUE(again->from_cache);
    EXPECT_EQ(again->winner_origin, report->winner_origin);
    auto w = (*store)->GetWinner(task.Key());
    ASSERT_TRUE(w.ok() && w->has_value());
    EXPECT_FALSE((*w)->cubin.empty());
    EXPECT_GT((*w)->speedup, 1.0);
  } else {
    EXPECT_EQ(again->tried, 0);
  }
}

TEST(VerifierGpu, TemplateCandidatesVerifyAndAreTimedAgainstBaseline) {
  DICE_REQUIRE_GPU();
  TuneOptions opt;
  opt.max_candidates = 4;
  opt.budget_s = 200;
  Tuner tuner(nullptr, {std::make_shared<generator::TemplateGenerator>()}, opt);
  auto report = tuner.Tune(ReluTask(1 << 22));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_GT(report->baseline_us, 0.0);
  EXPECT_GT(report->verified, 0);
  for (const auto& o : report->outcomes) {
    EXPECT_TRUE(IsVerified(o.outcome))
        << o.origin << ": " << o.outcome << " " << o.error;
  }
}

TEST(VerifierGpu, CapturedInputsJoinTheTrials) {
  DICE_REQUIRE_GPU();
  // Wrong only where x == 0.5 exactly: random inputs never hit it, the
  // captured inputs below do.
  std::vector<Candidate> v;
  v.push_back(Kernel("wrong_at_half", "relu_half_bug",
                     "  if (i < n) y[i] = (x[i] == 0.5f) ? 7.0f : fmaxf(x[i], 0.0f);"));
  TuneOptions opt;
  opt.budget_s = 200;
  Tuner tuner(nullptr, {std::make_shared<runtime_test::FixedGenerator>(v)}, opt);
  Task task = ReluTask(kN);

  auto random_only = tuner.Tune(task);
  ASSERT_TRUE(random_only.ok()) << random_only.status().ToString();
  ASSERT_EQ(random_only->outcomes.size(), 1u);
  EXPECT_NE(random_only->outcomes[0].outcome, Outcome::kVerifyFailed) << random_only->outcomes[0].error;

  std::vector<float> host(kN);
  for (int i = 0; i < kN; ++i) host[i] = static_cast<float>(i % 13) * 0.25f - 1.0f;  // includes 0.5
  std::vector<std::string> captured = {std::string(reinterpret_cast<const char*>(host.data()), kN * sizeof(float))};
  auto with_captured = tuner.Tune(task, &captured);
  ASSERT_TRUE(with_captured.ok()) << with_captured.status().ToString();
  ASSERT_EQ(with_captured->outcomes.size(), 1u);
  EXPECT_EQ(with_captured->outcomes[0].outcome, Outcome::kVerifyFailed);
  EXPECT_NE(with_captured->outcomes[0].error.find("captured"), std::string::npos) << with_captured->outcomes[0].error;
}

TEST(LoadedKernelGpu, RejectsPlanNamingAKernelMissingFromTheCubin) {
  DICE_REQUIRE_GPU();
  auto target = LocalTarget();
  ASSERT_TRUE(target.ok());
  Candidate c = Kernel("correct", "relu_ok", "  if (i < n) y[i] = fmaxf(x[i], 0.0f);");
  auto compiled = CompileCandidate(c, target->arch);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  auto ok = LoadedKernel::Load(compiled->cubin, c.plan, 1, 1);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)->plan(), c.plan);
  LaunchPlan wrong = c.plan;
  wrong.launches[0].kernel = "no_such_kernel";
  auto bad = LoadedKernel::Load(compiled->cubin, wrong, 1, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("no_such_kernel"), std::string::npos);
}

}  // namespace
}  // namespace dice::runtime
