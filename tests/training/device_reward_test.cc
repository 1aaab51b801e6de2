// The device-form side of the training data and reward (CPU): input specs
// parsing, cache winners becoming device examples that carry what the
// device-form judge needs (graph, input specs, launch plan), and the
// judge's bad-input errors. The GPU verdicts are in
// device_reward_gpu_test.cc.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
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
// specs and launch plan, which survive the JSONL round trip, and a
// device_infill example (kernel lines to fill in) carrying the same; a
// winner whose input specs do not parse is counted as malformed.
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
  std::vector<std::string> log;
  auto r = BuildDataset(o, [&](const std::string& l) { log.push_back(l); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->read, 2);
  EXPECT_EQ(r->malformed, 1);
  bool named = false;
  for (const auto& l : log) named |= l.find("winner bbbbbbbbbbbbbbbb is malformed: input spec") != std::string::npos;
  EXPECT_TRUE(named) << "no log line names the malformed winner";
  EXPECT_EQ(r->device, 1);
  EXPECT_EQ(r->device_infill, 1);  // the kernel's two body lines make one run
  auto examples = ReadExamples(o.out_path, nullptr);
  ASSERT_TRUE(examples.ok()) << examples.status().ToString();
  ASSERT_EQ(examples->size(), 2u);
  const CukeExample& in = (*examples)[0];
  const CukeExample& e = (*examples)[1];
  EXPECT_EQ(in.kind, "device_infill");
  EXPECT_EQ(in.preamble + in.prefix + in.middle + in.suffix, e.middle);
  EXPECT_TRUE(in.preamble.empty());  // the kernel is the first line
  EXPECT_EQ(in.middle, "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < 4099) y[i] = fmaxf(x[i], 0.f);\n");
  EXPECT_EQ(in.graph, e.graph);
  EXPECT_EQ(in.launch_plan, e.launch_plan);
  EXPECT_EQ(in.task_hash, e.task_hash);  // one task: the same side of the held-out split
  EXPECT_EQ(e.kind, "device");
  EXPECT_EQ(e.graph, ir::Canonical(runtime_test::ReluGraph()));
  EXPECT_EQ(e.input_specs, "f32[4099]");
  EXPECT_NE(e.launch_plan.find("relu_k"), std::string::npos);
  ASSERT_TRUE(LaunchPlan::FromJson(e.launch_plan).ok());
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

// Kernel infilling spans: whole lines of __global__ bodies (never of a
// __device__ helper), 1..3 of them, at most max_bytes, never a comment,
// preprocessor or lone-brace line; the pieces
// rebuild the source; the same source gives the same spans.
TEST(TrainingDataset, KernelInfillSpansAreWholeBodyLines) {
  const std::string source =
      "#include <cuda_fp16.h>\n"
      "// row softmax\n"
      "__device__ float twice(float v) {\n"
      "  return v * 2.f;\n"
      "}\n"
      "extern \"C\" __global__ void k(const float* x, float* y, int n) {\n"
      "  __shared__ float red[32];\n"
      "  int row = blockIdx.x;\n"
      "  // max of the row\n"
      "  float m = -INFINITY;\n"
      "  for (int c = threadIdx.x; c < n; c += blockDim.x) {\n"
      "    m = fmaxf(m, x[row * n + c]);\n"
      "  }\n"
      "  float s = 0.f;\n"
      "  for (int c = threadIdx.x; c < n; c += blockDim.x) s += __expf(x[row * n + c] - m);\n"
      "  y[row] = s;\n"
      "}\n";
  const auto splits = SplitKernelForInfill(source, 3, 120);
  ASSERT_EQ(splits.size(), 3u);
  for (const auto& sp : splits) {
    EXPECT_EQ(sp.preamble + sp.prefix + sp.middle + sp.suffix, source);
    EXPECT_EQ(sp.preamble, "#include <cuda_fp16.h>\n// row softmax\n__device__ float twice(float v) {\n  return v * 2.f;\n}\n");
    EXPECT_EQ(sp.prefix.rfind("extern \"C\" __global__", 0), 0u) << sp.prefix;
    EXPECT_LE(sp.middle.size(), 120u);
    EXPECT_TRUE(sp.prefix.empty() || sp.prefix.back() == '\n');
    EXPECT_EQ(sp.middle.back(), '\n');
    const size_t lines = std::count(sp.middle.begin(), sp.middle.end(), '\n');
    EXPECT_GE(lines, 1u);
    EXPECT_LE(lines, 3u);
    const std::string first = sp.middle.substr(sp.middle.find_first_not_of(' '));
    EXPECT_NE(first.rfind("//", 0), 0u) << sp.middle;
    EXPECT_NE(first[0], '}') << sp.middle;
    EXPECT_NE(first[0], '#') << sp.middle;
    EXPECT_EQ(sp.middle.find("return v * 2.f"), std::string::npos) << "a span in the __device__ helper";
  }
  EXPECT_LE(splits[0].prefix.size() + splits[0].middle.size(), splits[1].prefix.size());  // no overlap
  const auto again = SplitKernelForInfill(source, 3, 120);
  for (size_t i = 0; i < splits.size(); ++i) EXPECT_EQ(again[i].middle, splits[i].middle);
  EXPECT_TRUE(SplitKernelForInfill(source, 0, 120).empty());
  EXPECT_TRUE(SplitKernelForInfill("#define N 4\n// nothing in braces\n", 2, 120).empty());
  EXPECT_TRUE(SplitKernelForInfill(source, 2, 10).empty());  // every body line is longer than 10 bytes
}

// The compile reward of a device_infill task compiles prefix + answer +
// suffix with NVRTC (no GPU needed): the true middle compiles, a middle
// that breaks the kernel does not, naming the compile error.
TEST(TrainingReward, DeviceInfillAnswersCompileInsideTheirKernel) {
  const cache::WinnerRecord w = ReluWinner("f32[4099]", std::string(64, 'c'));
  const auto splits = SplitKernelForInfill(w.source, 1, 384);
  ASSERT_EQ(splits.size(), 1u);
  CukeExample task;
  task.id = "cache:c@1";
  task.kind = "device_infill";
  task.reference = "import torch\n";
  task.preamble = splits[0].preamble;
  task.prefix = splits[0].prefix;
  task.middle = splits[0].middle;
  task.suffix = splits[0].suffix;
  RewardOptions o;
  o.judge = false;
  o.arch = "sm_90";
  const std::vector<std::string> answers = {"```\n" + task.middle + "```", "```\n  y[i] = undefined_name;\n```",
                                            "no code block"};
  auto r = RewardAnswers(task, answers, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_TRUE((*r)[0].compiled) << (*r)[0].why;
  EXPECT_EQ((*r)[0].reward, 1.0);
  EXPECT_FALSE((*r)[1].compiled);
  EXPECT_EQ((*r)[1].reward, 0.0);
  EXPECT_NE((*r)[1].why.find("undefined_name"), std::string::npos) << (*r)[1].why;
  EXPECT_EQ((*r)[2].reward, 0.0);
  // The same answer, read as a whole-kernel "device" task, is not a kernel.
  task.kind = "device";
  auto whole = RewardAnswers(task, {answers[0]}, o);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ((*whole)[0].reward, 0.0);
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

  if (runtime::QueryDevice(0).ok()) GTEST_SKIP() << "a GPU is present: device_reward_gpu_test.cc covers the verdicts";
  task.launch_plan = R"({"launches":[{"kernel":"relu_k","grid":[17,1,1],"block":[256,1,1],"smem":0}],"workspace":0})";
  auto no_gpu = RewardAnswers(task, answers, o);
  ASSERT_FALSE(no_gpu.ok());
  EXPECT_EQ(no_gpu.status().code(), StatusCode::kNoDevice) << no_gpu.status().ToString();
}

}  // namespace
}  // namespace dice::training
