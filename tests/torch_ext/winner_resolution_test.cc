// Tests of winner resolution (torch_ext/src/winner_resolution.h) on CPU: the
// typed form of a stored winner is decided from its versions in one place,
// an empty cache is "no winner" (not a failure), and every way a stored
// winner cannot be served is one error naming the cause.
#include "../../torch_ext/src/winner_resolution.h"

#include <gtest/gtest.h>

#include <cstdint>
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
  void Put(const Task& task, const std::string& versions, const std::string& payload, bool verified = true) {
    cache::WinnerRecord r;
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

}  // namespace
}  // namespace dice::torch_ext
