// The device-form judge on the GPU (issue 4: rollouts for our own models are
// judged in the device form, NVRTC + the runtime's worker, so an RL step
// takes seconds): answers to a relu f32[4099] device task — right, wrong,
// not compiling, without code — each get the runtime verifier's verdict.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "../runtime/relu_graph.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/training/examples.h"
#include "dice/training/reward.h"

namespace dice::training {
namespace {

std::string Answer(const std::string& body) {
  return "```cuda\nextern \"C\" __global__ void relu_k(const float* __restrict__ x, float* __restrict__ y) {\n"
         "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n" + body + "\n}\n```\n";
}

TEST(DeviceFormRewardGpu, RightWrongBrokenAndMissingAnswersGetTheVerifiersVerdict) {
  if (!runtime::QueryDevice(0).ok()) GTEST_SKIP() << "no GPU: " << runtime::QueryDevice(0).status().ToString();
  CukeExample task;
  task.id = "cache:relu4099";
  task.kind = "device";
  task.reference = "import torch\n";
  task.graph = ir::Canonical(runtime_test::ReluGraph());
  task.input_specs = "f32[4099]";
  task.launch_plan = R"({"launches":[{"kernel":"relu_k","grid":[17,1,1],"block":[256,1,1],"smem":0}],"workspace":0})";
  DeviceFormJudge judge("cuda", 20);
  RewardOptions o;
  o.judge = true;
  o.device_judge = &judge;
  const std::vector<std::string> answers = {
      Answer("  if (i < 4099) y[i] = fmaxf(x[i], 0.0f);"),
      Answer("  if (i < 4096) y[i] = fmaxf(x[i], 0.0f);"),  // tail never written
      Answer("  if (i < 4099) y[i] = fmaxf(x[i], 0.0f) + undeclared;"),
      "I cannot write this kernel.",
      Answer("  if (i < 4099) y[i] = fmaxf(x[i], 0.0f);"),  // the right one again: same verdict
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto r = RewardAnswers(task, answers, o);
  const double first_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), answers.size());
  EXPECT_DOUBLE_EQ((*r)[0].reward, 1.0) << (*r)[0].why;
  EXPECT_TRUE((*r)[0].correct);
  EXPECT_GT((*r)[0].speedup, 0.0);
  EXPECT_DOUBLE_EQ((*r)[1].reward, 0.0);
  EXPECT_TRUE((*r)[1].compiled);
  EXPECT_NE((*r)[1].why.find("verify_failed"), std::string::npos) << (*r)[1].why;
  EXPECT_DOUBLE_EQ((*r)[2].reward, 0.0);
  EXPECT_FALSE((*r)[2].compiled);
  EXPECT_NE((*r)[2].why.find("compile_error"), std::string::npos) << (*r)[2].why;
  EXPECT_DOUBLE_EQ((*r)[3].reward, 0.0);
  EXPECT_NE((*r)[3].why.find("no code block"), std::string::npos) << (*r)[3].why;
  EXPECT_DOUBLE_EQ((*r)[4].reward, 1.0) << (*r)[4].why;

  // A second task reuses the judge's worker: no start-up this time.
  const auto t1 = std::chrono::steady_clock::now();
  auto again = RewardAnswers(task, {answers[0]}, o);
  const double second_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_DOUBLE_EQ((*again)[0].reward, 1.0);
  std::printf("device-form judge: 5 answers in %.2f s (worker start included), 1 answer in %.2f s\n", first_s,
              second_s);
}

}  // namespace
}  // namespace dice::training
