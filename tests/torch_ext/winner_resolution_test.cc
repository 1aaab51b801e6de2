// Tests of winner resolution (torch_ext/src/winner_resolution.h) on CPU: the
// typed form of a stored winner is decided from its versions in one place,
// an empty cache is "no winner" (not a failure), every way a stored
// winner cannot be served is one error naming the cause, and a TF32
// (reduced-precision) winner is served only where PyTorch's switch for its
// op class, as it is at the call, allows it (runtime/precision_policy.h).
#include "../../torch_ext/src/winner_resolution.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "../../torch_ext/src/runtime_state.h"
#include "../runtime/relu_graph.h"
#include "dice/cache/store.h"
#include "dice/core/task.h"

namespace dice::torch_ext {
namespace {

cache::WinnerRecord WithVersions(const std::string& versions) {
  cache::WinnerRecord r;
  r.task_key = "k0";
  r.versions_json = versions;
  return r;
}

TEST(WinnerFormTest, ReadsTheFormTheTunerWrites) {
  EXPECT_EQ(*WinnerForm(WithVersions(R"({"driver":12,"form":"device"})")), CandidateForm::kDevice);
  EXPECT_EQ(*WinnerForm(WithVersions(R"({"driver":12,"form":"extension"})")), CandidateForm::kExtension);
  EXPECT_EQ(*WinnerForm(WithVersions(R"({"form":"library"})")), CandidateForm::kLibrary);
}

TEST(WinnerFormTest, RecordsWithoutAFormAreDeviceForm) {
  EXPECT_EQ(*WinnerForm(WithVersions("")), CandidateForm::kDevice);
  EXPECT_EQ(*WinnerForm(WithVersions(R"({"driver":12,"nvrtc":"12.4"})")), CandidateForm::kDevice);
}

TEST(WinnerFormTest, TheWordExtensionElsewhereInTheVersionsIsNotTheForm) {
  // The old substring test would have read this as an extension.
  EXPECT_EQ(*WinnerForm(WithVersions(R"({"note":"\"form\":\"extension\"","form":"device"})")), CandidateForm::kDevice);
}

TEST(WinnerFormTest, RejectsUnknownFormsAndMalformedVersionsNamingTheKey) {
  for (const char* v : {R"({"form":"tactic"})", R"({"form":1})", "not json", "[1,2]"}) {
    auto f = WinnerForm(WithVersions(v));
    ASSERT_FALSE(f.ok()) << v;
    EXPECT_EQ(f.status().code(), StatusCode::kCorrupt) << v;
    EXPECT_NE(f.status().message().find("k0"), std::string::npos) << f.status().message();
  }
}

// Resolution against a fresh cache dir; each test uses its own task (shape)
// because loaded winners are shared process-wide by key.
class ResolveWinnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RuntimeSettings s;
    s.mode = Mode::kCache;
    s.cache_dir = ::testing::TempDir() + "dice-winner-resolution-test";
    SetRuntimeSettings(s);
    auto store = cache::Store::Open(cache::DatabasePath(s.cache_dir));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }

  Task MakeTask(int64_t n) {
    auto t = Task::Make(runtime_test::ReluGraph(), {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {n})}, TargetInfo{});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return std::move(t).value();
  }

  // Stores a winner for `task` with the given form and payload.
  void Put(const Task& task, const std::string& versions, const std::string& payload, bool verified = true,
           bool reduced_precision = false) {
    cache::WinnerRecord r;
    r.reduced_precision = reduced_precision;
    r.task_key = task.Key();
    r.origin = "test:winner";
    r.cubin = payload;
    r.launch_plan_json = "{}";
    r.versions_json = versions;
    r.speedup = 2;
    r.verified = verified;
    r.pulled_from = verified ? "" : "http://cache.example";
    auto put = store_->PutWinner(r);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
  }

  Expected<LoadedWinner> Resolve(const Task& task) {
    WinnerRequest req;
    req.task = &task;
    req.key = task.Key();
    req.num_inputs = 1;
    req.num_outputs = 1;
    return ResolveWinner(req);
  }

  // The error of resolving `task` (the test fails when it resolves).
  Status ResolveError(const Task& task) {
    auto w = Resolve(task);
    EXPECT_FALSE(w.ok()) << "resolved";
    return w.status();
  }

  std::unique_ptr<cache::Store> store_;
};

TEST_F(ResolveWinnerTest, EmptyCacheIsNoWinnerNotAFailure) {
  Task task = MakeTask(101);
  auto w = Resolve(task);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_FALSE(w->found());
  EXPECT_EQ(w->no_winner, "");
}

TEST_F(ResolveWinnerTest, ExtensionWinnerThatDoesNotLoadFailsWithTheLoadError) {
  Task task = MakeTask(102);
  Put(task, R"({"form":"extension"})", "not a shared object");
  const std::string why = ResolveError(task).message();
  EXPECT_EQ(why.rfind("extension load failed: dlopen", 0), 0u) << why;
}

TEST_F(ResolveWinnerTest, DeviceWinnerWithABadLaunchPlanFailsNamingThePlan) {
  Task task = MakeTask(103);
  Put(task, R"({"form":"device"})", "cubin bytes");
  const std::string why = ResolveError(task).message();
  EXPECT_EQ(why.rfind("bad launch plan: ", 0), 0u) << why;
}

TEST_F(ResolveWinnerTest, LibraryBackedWinnerIsRefusedAsUnsupported) {
  Task task = MakeTask(104);
  Put(task, R"({"form":"library"})", "plan");
  const Status st = ResolveError(task);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("test:winner"), std::string::npos) << st.message();
}

TEST_F(ResolveWinnerTest, UnverifiedWinnerInACompileOnlyRunIsNotServed) {
  RuntimeSettings s = GetRuntimeSettings();
  s.tune.compile_only = true;
  SetRuntimeSettings(s);
  Task task = MakeTask(105);
  Put(task, R"({"form":"device"})", "cubin bytes", /*verified=*/false);
  EXPECT_EQ(ResolveError(task).message(),
            "kernel from http://cache.example not served: re-verification needs a GPU (compile-only run)");
}

// conv2d(x [1, 4, 8, 8], w [8, 4, 3, 3]) -> relu, or linear(x [n, 8],
// w [16, 8]) -> relu: the two op classes with their own TF32 switch.
Task ContractionTask(ir::OpKind kind, int64_t n) {
  ir::Graph g;
  const int rank = kind == ir::OpKind::kConv2d ? 4 : 2;
  g.inputs = {ir::InputDecl{ir::DType::kFloat32, rank}, ir::InputDecl{ir::DType::kFloat32, rank}};
  ir::Op op;
  op.kind = kind;
  op.args = {0, 1};
  if (kind == ir::OpKind::kConv2d) {
    op.dims = {1, 1, 1, 1, 1, 1};
    op.ivalue = 1;
  }
  ir::Op relu;
  relu.kind = ir::OpKind::kRelu;
  relu.args = {2};
  g.ops = {op, relu};
  g.outputs = {3};
  std::vector<ir::TensorSpec> specs =
      kind == ir::OpKind::kConv2d
          ? std::vector<ir::TensorSpec>{ir::TensorSpec::Contiguous(ir::DType::kFloat32, {n, 4, 8, 8}),
                                        ir::TensorSpec::Contiguous(ir::DType::kFloat32, {8, 4, 3, 3})}
          : std::vector<ir::TensorSpec>{ir::TensorSpec::Contiguous(ir::DType::kFloat32, {n, 8}),
                                        ir::TensorSpec::Contiguous(ir::DType::kFloat32, {16, 8})};
  auto t = Task::Make(g, specs, TargetInfo{});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

// PyTorch's defaults: torch.backends.cuda.matmul.allow_tf32 off.
TEST_F(ResolveWinnerTest, Tf32GemmWinnerIsNotServedUnderPyTorchsDefaultMatmulPrecision) {
  Task task = ContractionTask(ir::OpKind::kLinear, 201);
  Put(task, R"({"form":"extension"})", "not a shared object", /*verified=*/true, /*reduced_precision=*/true);
  auto w = Resolve(task);
  ASSERT_TRUE(w.ok()) << "a refused winner is a miss, not a failure: " << w.status().ToString();
  EXPECT_FALSE(w->found());
  EXPECT_EQ(w->no_winner,
            "winner test:winner uses TF32 (reduced precision) and torch.backends.cuda.matmul.allow_tf32 is off");
}

// PyTorch's defaults: torch.backends.cudnn.allow_tf32 on. The payload does
// not load: the error shows the winner was taken to be served.
TEST_F(ResolveWinnerTest, Tf32ConvWinnerIsServedUnderPyTorchsDefaultCudnnPrecision) {
  Task task = ContractionTask(ir::OpKind::kConv2d, 2);
  Put(task, R"({"form":"extension"})", "not a shared object", /*verified=*/true, /*reduced_precision=*/true);
  const std::string why = ResolveError(task).message();
  EXPECT_EQ(why.rfind("extension load failed: dlopen", 0), 0u) << why;
}

TEST_F(ResolveWinnerTest, StrictFp32RefusesATf32ConvWinner) {
  Task task = ContractionTask(ir::OpKind::kConv2d, 3);
  Put(task, R"({"form":"extension"})", "not a shared object", /*verified=*/true, /*reduced_precision=*/true);
  ::setenv("DICE_STRICT_FP32", "1", 1);
  auto w = Resolve(task);
  ::unsetenv("DICE_STRICT_FP32");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_FALSE(w->found());
  EXPECT_EQ(w->no_winner, "winner test:winner uses TF32 (reduced precision) and DICE_STRICT_FP32=1 is set");
}

TEST_F(ResolveWinnerTest, Float32GemmWinnerIsServedWhateverTheSwitches) {
  Task task = ContractionTask(ir::OpKind::kLinear, 204);
  Put(task, R"({"form":"extension"})", "not a shared object");
  ::setenv("DICE_STRICT_FP32", "1", 1);
  auto w = Resolve(task);
  ::unsetenv("DICE_STRICT_FP32");
  ASSERT_FALSE(w.ok()) << "refused a winner that is not reduced precision";
  EXPECT_EQ(w.status().message().rfind("extension load failed: dlopen", 0), 0u) << w.status().message();
}

}  // namespace
}  // namespace dice::torch_ext
