// Tests of the dice::run_group machinery (dice/torch_ext/run_group.h) on CPU:
// the fallback equals ATen, groups are registered once per canonical text,
// a new input shape is a new task key, the meta kernel's shapes equal
// ir::InferOutputSpecs, and bad inputs are errors naming the cause.
#include "dice/torch_ext/run_group.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdlib>

#include "dice/cache/store.h"
#include "dice/reference/reference_executor.h"
#include "dice/core/ir.h"
#include "dice/core/task.h"
#include "dice/torch_ext/fusion_pass.h"
#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {
namespace {

// gelu((x + b) * 0.5) and x + b; x [*, *, N], b [N].
const char* kBroadcastIr =
    "dice-ir v1\n"
    "input %0 f32 rank=3\n"
    "input %1 f32 rank=1\n"
    "%2 = add(%0, %1)\n"
    "%3 = const(0.5)\n"
    "%4 = mul(%2, %3)\n"
    "%5 = gelu(%4)\n"
    "output %5, %2\n";

const char* kReduceIr =
    "dice-ir v1\n"
    "input %0 f16 rank=3\n"
    "%1 = sum(%0) dims=[0,2] keepdim=1\n"
    "%2 = log_softmax(%0) dims=[1]\n"
    "%3 = cast(%1) i=0\n"
    "output %3, %2\n";

// Cache mode (DICE_MODE unset reads as off): on CPU every call falls back with "no GPU".
class RunGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Options o;
    o.mode = Mode::kCache;
    o.cache_dir = ::testing::TempDir() + "dice-run-group-test";
    SetRuntimeOptions(o);
  }
};

const GroupStats* FindStats(const std::vector<GroupStats>& all, int id) {
  for (const auto& s : all)
    if (s.id == id) return &s;
  return nullptr;
}

TEST_F(RunGroupTest, FallbackOnCpuEqualsAtenAndSaysNoGpu) {
  auto id = RegisterIrGroup(kBroadcastIr, {"aten.add.Tensor", "aten.mul.Tensor", "aten.gelu.default"});
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  at::Tensor x = at::randn({2, 5, 7}), b = at::randn({7});
  auto outs = RunGroup(kBroadcastIr, {x, b});
  ASSERT_TRUE(outs.ok()) << outs.status().ToString();
  ASSERT_EQ(outs->size(), 2u);
  EXPECT_TRUE(at::equal((*outs)[0], at::gelu((x + b) * 0.5)));
  EXPECT_TRUE(at::equal((*outs)[1], x + b));
  const GroupStats* s = nullptr;
  auto all = GetGroupStats();
  s = FindStats(all, *id);
  ASSERT_NE(s, nullptr);
  EXPECT_GE(s->calls, 1);
  EXPECT_EQ(s->hits, 0);
  ASSERT_FALSE(s->fallback_reasons.empty());
  EXPECT_EQ(s->fallback_reasons[0].first, "no GPU");
}

TEST_F(RunGroupTest, SameCanonicalTextIsOneGroup) {
  auto a = RegisterIrGroup(kReduceIr, {});
  auto graph = ir::Parse(kReduceIr);
  ASSERT_TRUE(a.ok() && graph.ok());
  auto b = RegisterIrGroup(ir::Canonical(*graph), {});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
}

TEST_F(RunGroupTest, NewShapeIsNewTaskKey) {
  auto id = RegisterIrGroup(kReduceIr, {});
  ASSERT_TRUE(id.ok());
  for (int64_t n : {3, 4, 3}) {
    auto outs = RunGroup(kReduceIr, {at::randn({n, 6, 8}).to(at::kHalf)});
    ASSERT_TRUE(outs.ok()) << outs.status().ToString();
  }
  auto all = GetGroupStats();
  const GroupStats* s = FindStats(all, *id);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->task_keys.size(), 2u);  // batch 3 and 4; the repeat of 3 is the same key
  EXPECT_EQ(s->task_key, s->task_keys[1]);  // the newest signature
  EXPECT_NE(GroupStatsJson().find(s->task_keys[1]), std::string::npos);
}

TEST_F(RunGroupTest, MetaShapesMatchIrShapeInference) {
  auto graph = ir::Parse(kReduceIr);
  ASSERT_TRUE(graph.ok());
  at::Tensor x = at::empty({3, 6, 8}, at::TensorOptions().dtype(at::kHalf).device(at::kMeta));
  auto meta = MetaOutputs(kReduceIr, {x});
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  auto specs = ir::InferOutputSpecs(*graph, {ir::TensorSpec::Contiguous(ir::DType::kFloat16, {3, 6, 8})});
  ASSERT_TRUE(specs.ok());
  ASSERT_EQ(meta->size(), specs->size());
  for (size_t i = 0; i < specs->size(); ++i) {
    EXPECT_EQ((*meta)[i].sizes().vec(), (*specs)[i].shape) << "output " << i;
    EXPECT_EQ((*meta)[i].scalar_type(), reference::ToScalarType((*specs)[i].dtype)) << "output " << i;
    EXPECT_TRUE((*meta)[i].is_meta());
  }
  // The real kernel produces the same shapes.
  auto outs = RunGroup(kReduceIr, {at::randn({3, 6, 8}).to(at::kHalf)});
  ASSERT_TRUE(outs.ok());
  for (size_t i = 0; i < outs->size(); ++i) EXPECT_EQ((*outs)[i].sizes(), (*meta)[i].sizes());
}

TEST_F(RunGroupTest, WrongInputsAreErrorsNamingTheCause) {
  auto count = RunGroup(kBroadcastIr, {at::randn({2, 5, 7})});
  ASSERT_FALSE(count.ok());
  EXPECT_NE(count.status().message().find("declares 2 inputs, got 1"), std::string::npos) << count.status().message();
  auto dtype = RunGroup(kBroadcastIr, {at::zeros({2, 5, 7}, at::kLong), at::randn({7})});
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find("input 0 is int64 rank 3, the IR declares f32 rank 3"), std::string::npos)
      << dtype.status().message();
  auto shapes = MetaOutputs(kBroadcastIr, {at::empty({2, 5, 7}, at::kMeta), at::empty({6}, at::kMeta)});
  ASSERT_FALSE(shapes.ok());
  EXPECT_NE(shapes.status().message().find("op 0 (add)"), std::string::npos) << shapes.status().message();
  auto bad = RegisterIrGroup("dice-ir v1\ninput %0 f32 rank=1\n%1 = nope(%0)\noutput %1\n", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("IR line 3"), std::string::npos) << bad.status().message();
}

TEST_F(RunGroupTest, OperatorIsRegisteredWithTheDispatcher) {
  auto op = c10::Dispatcher::singleton().findSchema({"dice::run_group", ""});
  ASSERT_TRUE(op.has_value());
  EXPECT_TRUE(op->hasKernelForDispatchKey(c10::DispatchKey::CPU));
  EXPECT_TRUE(op->hasKernelForDispatchKey(c10::DispatchKey::CUDA));
  EXPECT_TRUE(op->hasKernelForDispatchKey(c10::DispatchKey::Meta));
}

// optimize() twice in one process with different cache dirs: the second
// tune reads the second cache; with other tune options, the new options. (The tuner once kept the first, freed store:
// a segfault in Store::GetWinner on the H200.) Each cache holds a verified
// winner for the task, so each tune is a cache hit and needs no GPU: the
// origin says which cache the tuner read.
TEST(TunerCacheDir, EachCacheDirAndOptionsAreTheOnesTheTunerUses) {
  auto graph = ir::Parse(kBroadcastIr);
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  CapturedCall call;
  call.graph = *graph;
  call.inputs = {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {2, 5, 64}),
                 ir::TensorSpec::Contiguous(ir::DType::kFloat32, {64})};
  std::vector<std::string> dirs;
  for (const char* name : {"dice-tuner-dir-a", "dice-tuner-dir-b"}) {
    const std::string dir = ::testing::TempDir() + name;
    (void)!std::system(("rm -rf '" + dir + "'").c_str());
    dirs.push_back(dir);
    Options o;
    o.mode = Mode::kTuneSync;
    o.cache_dir = dir;
    auto task = Task::Make(call.graph, call.inputs, CurrentTarget(o.tune.device));
    ASSERT_TRUE(task.ok()) << task.status().ToString();
    {
      auto store = cache::Store::Open(cache::DatabasePath(dir));
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      cache::WinnerRecord w;
      w.task_key = task->Key();
      w.origin = std::string("winner-in-") + name;
      w.verified = true;
      auto put = (*store)->PutWinner(w);
      ASSERT_TRUE(put.ok()) << put.status().ToString();
    }
    auto rep = TuneCapturedCall(call, o);
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    EXPECT_TRUE(rep->from_cache) << dir;
    EXPECT_EQ(rep->winner_origin, std::string("winner-in-") + name) << "the tune into " << dir << " read another cache";
  }
  // Same cache dir, other tune options: a compile-only tune there first
  // (it never reads the cache), then a full one, which must read it (a tuner
  // kept from the first would compile again and say nothing of the winner).
  Options o;
  o.mode = Mode::kTuneSync;
  o.cache_dir = dirs.back();
  o.tune.compile_only = true;
  o.tune.max_candidates = 1;
  auto compiled = TuneCapturedCall(call, o);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  EXPECT_FALSE(compiled->from_cache);
  o.tune.compile_only = false;
  auto served = TuneCapturedCall(call, o);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_TRUE(served->from_cache) << "the tune with compile_only off ran with the first tune's options";
  EXPECT_EQ(served->winner_origin, "winner-in-dice-tuner-dir-b");
  for (const auto& d : dirs) (void)!std::system(("rm -rf '" + d + "'").c_str());
  // Later tests in this binary use the fixture's options again.
  o = Options();
  o.mode = Mode::kCache;
  o.cache_dir = ::testing::TempDir() + "dice-run-group-test";
  SetRuntimeOptions(o);
}

}  // namespace
}  // namespace dice::torch_ext
