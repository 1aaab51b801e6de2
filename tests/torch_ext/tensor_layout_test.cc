// tensor_layout_test.cc — the layouts the kernel path serves
// (dice/core/tensor_layout.h, run_group.cc; issue 18 item 2), on real
// PyTorch tensors: they are classified as contiguous / channels_last /
// channels_last_3d (served) or strided / overlapping (refused with the
// reason), canonical strides and output specs are eager's, and a
// channels_last call gets its own task key with channels_last outputs while
// a contiguous call keeps the key it always had. Serving and the worker
// (runtime/worker/verifier.cc) derive output specs with the same core
// function; tests/runtime/tensor_layout_rule_test.cc checks it torch-free.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "dice/core/tensor_layout.h"
#include "dice/reference/reference_executor.h"
#include "dice/torch_ext/group_stats.h"
#include "dice/torch_ext/optimize.h"
#include "dice/torch_ext/run_group.h"

namespace dice::torch_ext {
namespace {

TensorLayout LayoutOf(const at::Tensor& t) {
  return ClassifyLayout(t.sizes().data(), t.strides().data(), static_cast<size_t>(t.dim()));
}

ir::TensorSpec SpecOf(const at::Tensor& t) {
  auto s = reference::SpecOf(t);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return ServedInputSpec(*s, LayoutOf(t));
}

// relu(x + b): the bias-add + ReLU epilogue of a convolution.
ir::Graph BiasAddRelu() {
  auto g = ir::Parse(
      "dice-ir v1\n"
      "input %0 f32 rank=4\n"
      "input %1 f32 rank=3\n"
      "%2 = add(%0, %1)\n"
      "%3 = relu(%2)\n"
      "output %3\n");
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : ir::Graph{};
}

TEST(TensorLayout, ServesContiguousAndChannelsLastTensors) {
  at::Tensor x = at::empty({8, 64, 56, 56});
  EXPECT_EQ(LayoutOf(x), TensorLayout::kContiguous);
  EXPECT_EQ(LayoutOf(x.contiguous(at::MemoryFormat::ChannelsLast)), TensorLayout::kChannelsLast);
  EXPECT_EQ(LayoutOf(at::empty({2, 16, 4, 8, 8}, at::MemoryFormat::ChannelsLast3d)), TensorLayout::kChannelsLast3d);
  // Both at once (C == 1): contiguous wins, as in PyTorch's suggest_memory_format.
  EXPECT_EQ(LayoutOf(at::empty({2, 1, 4, 4}, at::MemoryFormat::ChannelsLast)), TensorLayout::kContiguous);
  EXPECT_EQ(LayoutOf(at::empty({0, 3, 4, 4})), TensorLayout::kContiguous);
}

TEST(TensorLayout, RefusesExpandedAndStridedTensorsWithTheReason) {
  at::Tensor bias = at::empty({64, 1, 1});
  at::Tensor expanded = bias.expand({64, 56, 56});
  EXPECT_EQ(LayoutOf(expanded), TensorLayout::kOverlapping);
  EXPECT_FALSE(Servable(LayoutOf(expanded)));
  EXPECT_EQ(LayoutRefusal(LayoutOf(expanded), 1), "non-contiguous input 1 (overlapping: expanded or stride 0)");
  at::Tensor sliced = at::empty({8, 64, 56, 56}).narrow(3, 0, 28);
  EXPECT_EQ(LayoutOf(sliced), TensorLayout::kStrided);
  EXPECT_EQ(LayoutRefusal(LayoutOf(sliced), 0), "non-contiguous input 0");
  at::Tensor transposed = at::empty({32, 16}).t();
  EXPECT_EQ(LayoutOf(transposed), TensorLayout::kStrided);
  EXPECT_EQ(LayoutOf(at::empty({8, 8}).as_strided({8, 8}, {4, 1})), TensorLayout::kOverlapping);
}

TEST(TensorLayout, CanonicalStridesMatchPyTorchs) {
  for (auto shape : {std::vector<int64_t>{8, 64, 56, 56}, std::vector<int64_t>{2, 3, 1, 5}, std::vector<int64_t>{4, 0, 2, 2}}) {
    at::Tensor t = at::empty(shape, at::MemoryFormat::ChannelsLast);
    EXPECT_EQ(LayoutStrides(shape, TensorLayout::kChannelsLast), t.strides().vec());
    EXPECT_EQ(LayoutStrides(shape, TensorLayout::kContiguous), at::empty(shape).strides().vec());
  }
  std::vector<int64_t> s5 = {2, 16, 4, 8, 8};
  EXPECT_EQ(LayoutStrides(s5, TensorLayout::kChannelsLast3d), at::empty(s5, at::MemoryFormat::ChannelsLast3d).strides().vec());
  // A size-1 dim's stride is PyTorch's choice; the served spec names the layout canonically.
  at::Tensor odd = at::empty({2, 8, 1, 4}, at::MemoryFormat::ChannelsLast).as_strided({2, 8, 1, 4}, {32, 1, 7, 8});
  ASSERT_EQ(LayoutOf(odd), TensorLayout::kChannelsLast);
  EXPECT_EQ(SpecOf(odd).strides, LayoutStrides({2, 8, 1, 4}, TensorLayout::kChannelsLast));
}

TEST(TensorLayout, ContiguousAndChannelsLastCallsGetDifferentTaskKeys) {
  at::Tensor x = at::empty({8, 64, 56, 56});
  at::Tensor b = at::empty({64, 1, 1});
  auto contiguous = MakeServedTask(BiasAddRelu(), {SpecOf(x), SpecOf(b)}, TargetInfo{});
  auto channels_last =
      MakeServedTask(BiasAddRelu(), {SpecOf(x.contiguous(at::MemoryFormat::ChannelsLast)), SpecOf(b)}, TargetInfo{});
  ASSERT_TRUE(contiguous.ok()) << contiguous.status().ToString();
  ASSERT_TRUE(channels_last.ok()) << channels_last.status().ToString();
  EXPECT_NE(contiguous->Key(), channels_last->Key());
  // The contiguous key is the one Task::Make always gave (cached winners stay valid).
  auto plain = Task::Make(BiasAddRelu(), {SpecOf(x), SpecOf(b)}, TargetInfo{});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(contiguous->Key(), plain->Key());
  EXPECT_TRUE(contiguous->outputs[0].is_contiguous());
  // Eager's result layout: relu(x_cl + b) is channels_last.
  at::Tensor eager = at::relu(x.contiguous(at::MemoryFormat::ChannelsLast) + b);
  EXPECT_EQ(channels_last->outputs[0].strides, eager.strides().vec());
  EXPECT_NE(channels_last->outputs[0].ToString().find("{s="), std::string::npos);
}

// The output specs serving builds, and the worker derives from a tune
// request (the same core function), are eager's.
TEST(TensorLayout, ServedOutputSpecsAreEagers) {
  const std::vector<std::vector<at::Tensor>> calls = {
      {at::empty({8, 64, 56, 56}, at::MemoryFormat::ChannelsLast), at::empty({64, 1, 1})},
      {at::empty({8, 64, 56, 56}), at::empty({64, 1, 1})},
      {at::empty({2, 16, 4, 8, 8}, at::MemoryFormat::ChannelsLast3d), at::empty({1, 16, 1, 1, 1})},
      {at::empty({2, 1, 4, 4}, at::MemoryFormat::ChannelsLast), at::empty({2, 1, 4, 4})},
      {at::empty({8, 64, 56, 56}), at::empty({8, 64, 56, 56}, at::MemoryFormat::ChannelsLast)},
  };
  for (const auto& call : calls) {
    std::vector<ir::TensorSpec> inputs;
    for (const auto& t : call) inputs.push_back(SpecOf(t));
    std::vector<ir::TensorSpec> serving = {ir::TensorSpec::Contiguous(ir::DType::kFloat32, call[0].sizes().vec())};
    FollowInputLayout(inputs, &serving);
    // Eager's: add of these inputs.
    EXPECT_EQ(serving[0].strides, (call[0] + call[1]).strides().vec()) << inputs[0].ToString();
  }
}

// On CPU every call falls back ("no GPU") but still records its task key:
// the same shapes in two layouts are two signatures with two keys, and the
// channels_last key is the served task's (channels_last outputs).
TEST(TensorLayout, RunGroupKeysContiguousAndChannelsLastCallsApart) {
  Options o;
  o.mode = Mode::kCache;
  o.cache_dir = ::testing::TempDir() + "dice-tensor-layout-test";
  SetRuntimeOptions(o);
  const char* ir =
      "dice-ir v1\n"
      "input %0 f32 rank=4\n"
      "input %1 f32 rank=3\n"
      "%2 = add(%0, %1)\n"
      "%3 = sigmoid(%2)\n"
      "output %3\n";
  auto id = RegisterIrGroup(ir, {});
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  at::Tensor x = at::randn({2, 8, 3, 5});
  at::Tensor xcl = x.contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor b = at::randn({8, 1, 1});
  for (const at::Tensor& in : {x, xcl, x, xcl}) {
    auto outs = RunGroup(ir, {in, b});
    ASSERT_TRUE(outs.ok()) << outs.status().ToString();
    EXPECT_TRUE(at::allclose((*outs)[0], at::sigmoid(x + b)));
  }
  std::vector<std::string> keys;
  for (const auto& s : GetGroupStats())
    if (s.id == *id) keys = s.task_keys;
  ASSERT_EQ(keys.size(), 2u) << "one task key per layout";
  auto graph = ir::Parse(ir);
  ASSERT_TRUE(graph.ok());
  auto served = MakeServedTask(*graph, {SpecOf(xcl), SpecOf(b)}, CurrentTarget(0));
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(keys[1], served->Key());
  EXPECT_NE(keys[0], keys[1]);
}

}  // namespace
}  // namespace dice::torch_ext
