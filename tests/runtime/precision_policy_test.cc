// The precision policy per op class (runtime/precision_policy.h), on CPU:
// a conv group follows tf32_conv, a GEMM group tf32_matmul, a group with
// both needs both, any other group only the explicit override, and
// DICE_STRICT_FP32=1 refuses always; a stored TF32 winner the policy
// refuses is not served by the Tuner (a miss: tuned again, which needs a GPU
// here), one it allows is.
#include "dice/runtime/precision_policy.h"
#include "dice/runtime/winner_versions.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fixed_generator.h"
#include "relu_graph.h"
#include "dice/cache/store.h"
#include "dice/core/task.h"
#include "dice/generator/templates.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/extension_compiler.h"
#include "dice/runtime/tuner.h"

namespace dice::runtime {
namespace {

// conv2d(x [1, 4, 8, 8], w [8, 4, 3, 3]) -> relu; stride 1, padding 1.
ir::Graph ConvReluGraph() {
  ir::Graph g;
  g.inputs = {ir::InputDecl{ir::DType::kFloat32, 4}, ir::InputDecl{ir::DType::kFloat32, 4}};
  ir::Op conv;
  conv.kind = ir::OpKind::kConv2d;
  conv.args = {0, 1};
  conv.dims = {1, 1, 1, 1, 1, 1};
  conv.ivalue = 1;
  ir::Op relu;
  relu.kind = ir::OpKind::kRelu;
  relu.args = {2};
  g.ops = {conv, relu};
  g.outputs = {3};
  return g;
}

// linear(x [*, K], w [N, K]) -> relu.
ir::Graph LinearReluGraph() {
  ir::Graph g;
  g.inputs = {ir::InputDecl{ir::DType::kFloat32, 2}, ir::InputDecl{ir::DType::kFloat32, 2}};
  ir::Op linear;
  linear.kind = ir::OpKind::kLinear;
  linear.args = {0, 1};
  ir::Op relu;
  relu.kind = ir::OpKind::kRelu;
  relu.args = {2};
  g.ops = {linear, relu};
  g.outputs = {3};
  return g;
}

// A conv whose output feeds a linear (the policy reads op kinds only).
ir::Graph ConvAndLinearGraph() {
  ir::Graph g = ConvReluGraph();
  ir::Op linear;
  linear.kind = ir::OpKind::kLinear;
  linear.args = {3, 1};
  g.ops.push_back(linear);
  g.outputs = {4};
  return g;
}

TuneOptions Switches(bool tf32_conv, bool tf32_matmul) {
  TuneOptions o;
  o.tf32_conv = tf32_conv;
  o.tf32_matmul = tf32_matmul;
  return o;
}

// Sets DICE_STRICT_FP32 for one test and restores what was there.
class StrictFp32 {
 public:
  explicit StrictFp32(const char* value) {
    const char* old = std::getenv("DICE_STRICT_FP32");
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv("DICE_STRICT_FP32", value, 1);
  }
  ~StrictFp32() {
    if (had_) {
      ::setenv("DICE_STRICT_FP32", old_.c_str(), 1);
    } else {
      ::unsetenv("DICE_STRICT_FP32");
    }
  }

 private:
  bool had_ = false;
  std::string old_;
};

TEST(PrecisionPolicyTest, ConvGroupFollowsTheCudnnSwitch) {
  EXPECT_TRUE(AllowsReducedPrecision(Switches(/*tf32_conv=*/true, false), ConvReluGraph()));
  EXPECT_FALSE(AllowsReducedPrecision(Switches(/*tf32_conv=*/false, true), ConvReluGraph()))
      << "the matmul switch does not govern convolutions";
  EXPECT_EQ(ReducedPrecisionRefusal(Switches(false, true), ConvReluGraph()), "torch.backends.cudnn.allow_tf32 is off");
}

TEST(PrecisionPolicyTest, GemmGroupFollowsTheMatmulSwitch) {
  EXPECT_TRUE(AllowsReducedPrecision(Switches(false, /*tf32_matmul=*/true), LinearReluGraph()));
  EXPECT_FALSE(AllowsReducedPrecision(Switches(/*tf32_conv=*/true, false), LinearReluGraph()))
      << "the cudnn switch does not govern GEMMs";
  EXPECT_EQ(ReducedPrecisionRefusal(Switches(true, false), LinearReluGraph()),
            "torch.backends.cuda.matmul.allow_tf32 is off");
}

TEST(PrecisionPolicyTest, GroupWithAConvAndAGemmNeedsBothSwitches) {
  EXPECT_TRUE(AllowsReducedPrecision(Switches(true, true), ConvAndLinearGraph()));
  EXPECT_FALSE(AllowsReducedPrecision(Switches(true, false), ConvAndLinearGraph()));
  EXPECT_FALSE(AllowsReducedPrecision(Switches(false, true), ConvAndLinearGraph()));
  EXPECT_EQ(ReducedPrecisionRefusal(Switches(false, false), ConvAndLinearGraph()),
            "torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32 are off");
}

TEST(PrecisionPolicyTest, ElementwiseGroupIsRefusedUnlessTheOverrideAllowsIt) {
  const ir::Graph relu = runtime_test::ReluGraph();
  EXPECT_FALSE(AllowsReducedPrecision(Switches(true, true), relu)) << "no conv or GEMM: the switches say nothing";
  EXPECT_NE(ReducedPrecisionRefusal(Switches(true, true), relu).find("no convolution or GEMM"), std::string::npos);
  TuneOptions override_all;
  override_all.allow_reduced_precision = true;
  EXPECT_TRUE(AllowsReducedPrecision(override_all, relu));
  EXPECT_TRUE(AllowsReducedPrecision(override_all, ConvReluGraph())) << "the override allows every task";
}

TEST(PrecisionPolicyTest, StrictFp32RefusesEvenWithEverySwitchOnAndTheOverride) {
  TuneOptions all = Switches(true, true);
  all.allow_reduced_precision = true;
  {
    StrictFp32 strict("1");
    EXPECT_FALSE(AllowsReducedPrecision(all, ConvReluGraph()));
    EXPECT_FALSE(AllowsReducedPrecision(all, LinearReluGraph()));
    EXPECT_FALSE(AllowsReducedPrecision(all, runtime_test::ReluGraph()));
    EXPECT_EQ(ReducedPrecisionRefusal(all, ConvReluGraph()), "DICE_STRICT_FP32=1 is set");
  }
  StrictFp32 not_strict("0");  // only "1" means strict, as the templates read it
  EXPECT_TRUE(AllowsReducedPrecision(all, ConvReluGraph()));
}

TEST(PrecisionPolicyTest, OnlyAReducedPrecisionWinnerCanBeRefused) {
  cache::WinnerRecord w;
  w.origin = "template:conv/tf32/128x128x16/s3";
  w.reduced_precision = false;
  EXPECT_EQ(RefusedWinnerReason(Switches(false, false), ConvReluGraph(), w), "") << "a float32 winner always serves";
  w.reduced_precision = true;
  EXPECT_EQ(RefusedWinnerReason(Switches(false, false), ConvReluGraph(), w),
            "winner template:conv/tf32/128x128x16/s3 uses TF32 (reduced precision) and "
            "torch.backends.cudnn.allow_tf32 is off");
  EXPECT_EQ(RefusedWinnerReason(Switches(true, false), ConvReluGraph(), w), "");
}

TEST(WinnerVersionsTest, AnExtensionWinnerBuiltAgainstOtherLibrariesIsStale) {
  // Issue 18 item 5: a binary built against another torch or CUTLASS is re-tuned, never served blind.
  cache::WinnerRecord w;
  w.origin = "template:gemm/3xtf32/128x128x16/s4";
  w.versions_json = R"({"torch": "2.10.0", "cutlass": "4.2.0", "form": "extension"})";
  EXPECT_EQ(StaleBuildReason(w, "2.11.0", "4.2.0"),
            "winner template:gemm/3xtf32/128x128x16/s4 was built against torch 2.10.0; this process runs 2.11.0");
  EXPECT_EQ(StaleBuildReason(w, "2.10.0", "4.3.0"),
            "winner template:gemm/3xtf32/128x128x16/s4 was built against cutlass 4.2.0; this process runs 4.3.0");
  EXPECT_EQ(StaleBuildReason(w, "2.10.0", "4.2.0"), "") << "same versions: served";
  EXPECT_EQ(StaleBuildReason(w, "", ""), "") << "versions this process does not know are not compared";
  // A row from before CUTLASS versions were recorded, or a candidate without CUTLASS.
  w.versions_json = R"({"torch": "2.11.0", "cutlass": "", "form": "extension"})";
  EXPECT_EQ(StaleBuildReason(w, "2.11.0", "4.3.0"), "");
  w.versions_json = R"({"torch": "2.11.0", "form": "extension"})";
  EXPECT_EQ(StaleBuildReason(w, "2.11.0", "4.3.0"), "");
  // A device-form (NVRTC) winner holds no library: never stale here.
  w.versions_json = R"({"torch": "2.10.0", "cutlass": "4.2.0", "form": "device"})";
  EXPECT_EQ(StaleBuildReason(w, "2.11.0", "4.3.0"), "");
  w.versions_json = "";
  EXPECT_EQ(StaleBuildReason(w, "2.11.0", "4.3.0"), "");
  w.versions_json = "not json";
  EXPECT_EQ(StaleBuildReason(w, "2.11.0", "4.3.0"), "") << "WinnerForm reports a corrupt row";
  // RefusedWinnerReason applies it with the options' torch version.
  w.versions_json = R"({"torch": "2.10.0", "form": "extension"})";
  TuneOptions o = Switches(true, true);
  o.torch_version = "2.11.0";
  EXPECT_EQ(RefusedWinnerReason(o, LinearReluGraph(), w),
            "winner template:gemm/3xtf32/128x128x16/s4 was built against torch 2.10.0; this process runs 2.11.0");
  o.torch_version = "2.10.0";
  EXPECT_EQ(RefusedWinnerReason(o, LinearReluGraph(), w), "");
  TuneOptions other = o;
  other.torch_version = "2.11.0";
  EXPECT_FALSE(o == other) << "the torch extension rebuilds its tuners when the options differ";
}

// A gemm_lt winner links cuBLASLt: it records "cublas" and is re-tuned when
// the toolkit's cuBLAS differs.
TEST(WinnerVersionsTest, ACublasLtWinnerBuiltAgainstAnotherCublasIsStale) {
  cache::WinnerRecord w;
  w.origin = "template:gemm_lt/bias_gelu/a0";
  w.versions_json = R"({"torch": "2.11.0", "cutlass": "", "cublas": "13.0.2", "form": "extension"})";
  EXPECT_EQ(StaleBuildReason(w, "2.11.0", "4.2.0", "13.1.0"),
            "winner template:gemm_lt/bias_gelu/a0 was built against cublas 13.0.2; this process runs 13.1.0");
  EXPECT_EQ(StaleBuildReason(w, "2.11.0", "4.2.0", "13.0.2"), "");
  EXPECT_EQ(StaleBuildReason(w, "2.11.0", "4.2.0"), "") << "a process that does not know its cuBLAS does not compare";
  const std::string now = CublasVersion();
  if (now.empty()) GTEST_SKIP() << "no cublas_api.h beside nvcc";
  EXPECT_EQ(std::count(now.begin(), now.end(), '.'), 2) << now;
}

TEST(WinnerVersionsTest, CutlassVersionIsReadFromTheHeadersNvccUses) {
  if (CutlassIncludeDir().empty()) {
    EXPECT_EQ(CutlassVersion(), "");
    GTEST_SKIP() << "no CUTLASS headers (scripts/setup.sh unpacks the pinned nvidia-cutlass wheel)";
  }
  // scripts/setup.sh pins nvidia-cutlass 4.2.0.0, whose cutlass/version.h says 4.2.0.
  EXPECT_EQ(CutlassVersion(), "4.2.0");
}

TEST(PrecisionPolicyTest, OptionsWithOtherSwitchesCompareUnequal) {
  // The torch extension rebuilds its tuners when the options differ.
  EXPECT_TRUE(Switches(true, false) == Switches(true, false));
  EXPECT_FALSE(Switches(true, false) == Switches(false, false));
  EXPECT_FALSE(Switches(false, true) == Switches(false, false));
}

// The Tuner's cache lookup: a verified TF32 conv winner in a fresh cache.
class TunerPrecisionServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "dice-precision-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    auto store = cache::Store::Open(cache::DatabasePath(tmpl));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    auto task = Task::Make(ConvReluGraph(),
                           {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {1, 4, 8, 8}),
                            ir::TensorSpec::Contiguous(ir::DType::kFloat32, {8, 4, 3, 3})},
                           TargetInfo{});
    ASSERT_TRUE(task.ok()) << task.status().ToString();
    task_ = *task;
    cache::WinnerRecord w;
    w.task_key = task_.Key();
    w.graph_canonical = ir::Canonical(task_.graph);
    w.arch = task_.target.arch;
    w.origin = "template:conv/tf32/test";
    w.candidate_hash = "tf32";
    w.source = "// tf32 conv";
    w.cubin = "so";
    w.launch_plan_json = R"({"launches":[]})";
    w.baseline_us = 10;
    w.best_us = 5;
    w.speedup = 2;
    w.reduced_precision = true;
    ASSERT_TRUE(*store_->PutWinner(w));
  }

  Expected<TuneReport> Tune(const TuneOptions& options) {
    Tuner tuner(store_.get(), {std::make_shared<generator::TemplateGenerator>()}, options);
    return tuner.Tune(task_);
  }

  std::unique_ptr<cache::Store> store_;
  Task task_;
};

TEST_F(TunerPrecisionServeTest, Tf32WinnerIsServedWhenTheConvSwitchIsOn) {
  auto report = Tune(Switches(/*tf32_conv=*/true, false));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->from_cache);
  EXPECT_EQ(report->winner_origin, "template:conv/tf32/test");
}

TEST_F(TunerPrecisionServeTest, Tf32WinnerIsNotServedWhenTheConvSwitchIsOff) {
  if (CudaDriver::Get().ok()) GTEST_SKIP() << "a GPU is present: the re-tune would run there";
  auto report = Tune(Switches(/*tf32_conv=*/false, true));
  // Not served: the Tune goes on to tune the task again, which needs a GPU here.
  ASSERT_FALSE(report.ok()) << "served the refused TF32 winner: from_cache " << report->from_cache;
  EXPECT_EQ(report.status().code(), StatusCode::kNoDevice) << report.status().ToString();
  auto row = store_->GetWinner(task_.Key());
  ASSERT_TRUE(row.ok() && row->has_value()) << "the refused row stays until a new winner replaces it";
  EXPECT_EQ((**row).origin, "template:conv/tf32/test");
}

TEST_F(TunerPrecisionServeTest, StrictFp32RefusesACachedTf32WinnerDespiteTheOverride) {
  if (CudaDriver::Get().ok()) GTEST_SKIP() << "a GPU is present: the re-tune would run there";
  StrictFp32 strict("1");
  TuneOptions all = Switches(true, true);
  all.allow_reduced_precision = true;
  auto report = Tune(all);
  ASSERT_FALSE(report.ok()) << "DICE_STRICT_FP32=1 served a TF32 winner";
  EXPECT_EQ(report.status().code(), StatusCode::kNoDevice) << report.status().ToString();
}

TEST_F(TunerPrecisionServeTest, AnExtensionWinnerBuiltAgainstAnotherTorchIsNotServed) {
  if (CudaDriver::Get().ok()) GTEST_SKIP() << "a GPU is present: the re-tune would run there";
  auto row = store_->GetWinner(task_.Key());
  ASSERT_TRUE(row.ok() && row->has_value());
  cache::WinnerRecord w = **row;
  w.versions_json = R"({"torch": "2.10.0", "form": "extension"})";
  w.speedup = 3;  // PutWinner keeps the existing row unless the new one is faster
  ASSERT_TRUE(*store_->PutWinner(w));
  TuneOptions same = Switches(/*tf32_conv=*/true, false);
  same.torch_version = "2.10.0";
  auto served = Tune(same);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_TRUE(served->from_cache) << "built against this torch: served";
  TuneOptions newer = same;
  newer.torch_version = "2.11.0";
  auto report = Tune(newer);
  // Not served: the Tune goes on to tune the task again, which needs a GPU here.
  ASSERT_FALSE(report.ok()) << "served a winner built against torch 2.10.0 to torch 2.11.0";
  EXPECT_EQ(report.status().code(), StatusCode::kNoDevice) << report.status().ToString();
}

TEST_F(TunerPrecisionServeTest, ARefusedWinnerLeavesTheFloat32CandidatesToBuild) {
  auto gen = [] {
    Candidate f32, tf32;
    f32.origin = "test:conv/f32";
    tf32.origin = "test:conv/tf32";
    f32.form = tf32.form = CandidateForm::kExtension;
    f32.source = "// f32";
    tf32.source = "// tf32";
    tf32.reduced_precision = true;
    return std::make_shared<runtime_test::FixedGenerator>(std::vector<Candidate>{f32, tf32});
  };
  Tuner allowed(store_.get(), {gen()}, Switches(/*tf32_conv=*/true, false));
  auto none = allowed.PendingExtensionCandidates(task_);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty()) << "a servable winner: nothing to build ahead";
  // Refused: a Tune would tune the task again, without TF32 candidates.
  Tuner refused(store_.get(), {gen()}, Switches(/*tf32_conv=*/false, false));
  auto pending = refused.PendingExtensionCandidates(task_);
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  ASSERT_EQ(pending->size(), 1u);
  EXPECT_EQ((*pending)[0].origin, "test:conv/f32");
}

}  // namespace
}  // namespace dice::runtime
