// Extension-form candidates through the real Tuner -> WorkerPool ->
// dice-worker path on a GPU (issue 3 "Extension form", consumer 1): nvcc
// builds each source in the worker, dice_forward is called through the
// dlopen'ed entry point, and the same verifier and timer as device-form
// candidates judge it: a correct relu is verified and timed against a
// measured baseline, a wrong one fails verification, a broken one is a
// compile error, an exception inside dice_forward is a failed attempt.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fixed_generator.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/core/task.h"
#include "dice/runtime/tuner.h"
#include "extension_sources.h"
#include "relu_graph.h"

namespace dice::runtime {
namespace {

TEST(ExtensionGpuTest, KnownGoodExtensionIsVerifiedAndTimedWrongOnesAreRejected) {
  auto drv = CudaDriver::Get();
  if (!drv.ok()) GTEST_SKIP() << "no GPU: " << drv.status().ToString();
  const TargetInfo target = TargetForDevice(0);
  auto task = Task::Make(runtime_test::ReluGraph(), {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {1 << 20})},
                         target);
  ASSERT_TRUE(task.ok()) << task.status().ToString();

  Candidate throws = runtime_test::ExtensionCandidate(
      "ext:throws", "#include <torch/extension.h>\n"
                    "torch::Tensor dice_forward(torch::Tensor in0) {\n"
                    "  TORCH_CHECK(in0.dim() == 7, \"this candidate wants rank 7\");\n  return in0;\n}\n");
  std::vector<Candidate> cands = {runtime_test::GoodReluExtension(), runtime_test::WrongReluExtension(),
                                  runtime_test::BrokenReluExtension(), throws};
  TuneOptions o;
  o.budget_s = 900;
  o.candidate_timeout_s = 60;
  Tuner tuner(nullptr, {std::make_shared<runtime_test::FixedGenerator>(cands)}, o);
  auto report = tuner.Tune(*task);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  std::map<std::string, CandidateOutcome> by;
  for (const auto& out : report->outcomes) by[out.origin] = out;
  EXPECT_GT(report->baseline_us, 0);
  const Outcome good = by["ext:relu"].outcome;
  EXPECT_TRUE(IsVerified(good)) << good << ": " << by["ext:relu"].error;
  EXPECT_GT(by["ext:relu"].time_us, 0);
  EXPECT_GT(by["ext:relu"].compile_ms, 0);
  EXPECT_EQ(by["ext:twice"].outcome, Outcome::kVerifyFailed) << by["ext:twice"].error;
  EXPECT_EQ(by["ext:broken"].outcome, Outcome::kCompileError);
  EXPECT_EQ(by["ext:throws"].outcome, Outcome::kVerifyFailed);
  EXPECT_NE(by["ext:throws"].error.find("rank 7"), std::string::npos) << by["ext:throws"].error;
  EXPECT_EQ(report->verified, 1);
}

}  // namespace
}  // namespace dice::runtime
