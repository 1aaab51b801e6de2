// The device-form side of the training data and reward (CPU): input specs
// parsing, cache winners becoming device examples that carry what the
// device-form judge needs (graph, input specs, launch plan), and the
// judge's bad-input errors. The GPU verdicts are in
// device_reward_gpu_test.cc.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "../runtime/relu_graph.h"
#include "dice/cache/store.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/training/dataset.h"
#include "dice/training/examples.h"
#include "dice/training/reward.h"

namespace dice::training {
namespace {

TEST(TrainingInputSpecs, ParsesTheCacheFormatAndNamesBadItems) {
  auto specs = ParseInputSpecs("f32[1024,8];bf16[8]");
  ASSERT_TRUE(specs.ok()) << specs.status().ToString();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ((*specs)[0].dtype, ir::DType::kFloat32);
  EXPECT_EQ((*specs)[0].shape, (std::vector<int64_t>{1024, 8}));
  EXPECT_EQ((*specs)[1].dtype, ir::DType::kBFloat16);
  for (const char* bad : {"f32[1x2]", "q99[3]", "f32", "f32[-4]"}) {
    auto r = ParseInputSpecs(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

cache::WinnerRecord ReluWinner(const std::string& specs, const std::string& key) {
  cache::WinnerRecord w;
  w.task_key = key;
  w.graph_canonical = ir::Canonical(runtime_test::ReluGraph());
  w.input_specs = specs;
  w.arch = "sm_90";
  w.gpu_name = "NVIDIA H200";
  w.origin = "template:elementwise/b256";
  w.candidate_hash = key;
  w.source = "extern \"C\" __global__ void relu_k(const float* x, float* y) {\n"
             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < 4099) y[i] = fmaxf(x[i], 0.f);\n}\n";
  w.cubin = "not-a-cubin";
  w.launch_plan_json = R"({"launches":[{"kernel":"relu_k","grid":[17,1,1],"block":[256,1,1],"smem":0}],"workspace":0})";
  w.baseline_us = 6.0;
  w.best_us = 2.0;
  w.speedup = 3.0;
  w.versions_json = "{}";
  return w;
}

// A verified cache winner becomes a device example with its graph, input
// specs and launch plan, which survive the JSONL round trip; a winner whose
// input specs do not parse is counted as malformed.
TEST(TrainingDataset, CacheWinnersBecomeDeviceExamplesTheJudgeCanVerify) {
  char tmpl[] = "/tmp/dice_devds_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    auto store = cache::Store::Open(dir + "/cache.db");
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->PutWinner(ReluWinner("f32[4099]", std::string(64, 'a'))).ok());
    ASSERT_TRUE((*store)->PutWinner(ReluWinner("f32[oops]", std::string(64, 'b'))).ok());
  }
  DatasetOptions o;
  o.cache_dbs = {dir + "/cache.db"};
  o.out_path = dir + "/cuke.jsonl";
  o.heldout_percent = 0;
  auto r = BuildDataset(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->read, 2);
  EXPECT_EQ(r->malformed, 1);
  EXPECT_EQ(r->device, 1);
  auto examples = ReadExamples(o.out_path, nullptr);
  ASSERT_TRUE(examples.ok()) << examples.status().ToString();
  ASSERT_EQ(examples->size(), 1u);
  const CukeExample& e = (*examples)[0];
  EXPECT_EQ(e.kind, "device");
  EXPECT_EQ(e.graph, ir::Canonical(runtime_test::ReluGraph()));
  EXPECT_EQ(e.input_specs, "f32[4099]");
  EXPECT_NE(e.launch_plan.find("relu_k"), std::string::npos);
  ASSERT_TRUE(LaunchPlan::FromJson(e.launch_plan).ok());
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(TrainingReward, JudgedDeviceTasksNeedTheJudgeAndItsFields) {
  CukeExample task;
  task.id = "cache:x";
  task.kind = "device";
  task.reference = "import torch\n";
  RewardOptions o;
  o.judge = true;
  const std::vector<std::string> answers = {"```cuda\nextern \"C\" __global__ void relu_k(const float* x, float* y) {}\n```"};
  auto no_judge = RewardAnswers(task, answers, o);
  ASSERT_FALSE(no_judge.ok());
  EXPECT_EQ(no_judge.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_judge.status().message().find("device_judge"), std::string::npos);

  DeviceFormJudge judge("cuda", 20);
  o.device_judge = &judge;
  auto no_fields = RewardAnswers(task, answers, o);  // a dataset written before the fields existed
  ASSERT_FALSE(no_fields.ok());
  EXPECT_EQ(no_fields.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_fields.status().message().find("rebuild the dataset"), std::string::npos);

  task.graph = ir::Canonical(runtime_test::ReluGraph());
  task.input_specs = "f32[4099]";
  task.launch_plan = "{not json";
  auto bad_plan = RewardAnswers(task, answers, o);
  ASSERT_FALSE(bad_plan.ok());
  EXPECT_NE(bad_plan.status().message().find("launch_plan"), std::string::npos) << bad_plan.status().ToString();

  if (QueryDevice(0).ok()) GTEST_SKIP() << "a GPU is present: device_reward_gpu_test.cc covers the verdicts";
  task.launch_plan = R"({"launches":[{"kernel":"relu_k","grid":[17,1,1],"block":[256,1,1],"smem":0}],"workspace":0})";
  auto no_gpu = RewardAnswers(task, answers, o);
  ASSERT_FALSE(no_gpu.ok());
  EXPECT_EQ(no_gpu.status().code(), StatusCode::kNoDevice) << no_gpu.status().ToString();
}

}  // namespace
}  // namespace dice::training
