// tensor_layout_rule_test.cc — core's layout vocabulary and eager's
// output-layout rule (dice/core/tensor_layout.h) on hand-written sizes and
// strides, without LibTorch: classification, canonical strides, the
// refusal reasons, and which outputs follow a channels_last input. Serving
// (torch_ext) and the worker (runtime/worker/verifier.cc) both call these
// functions; tests/torch_ext/tensor_layout_test.cc checks them against real
// PyTorch tensors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dice/core/task.h"
#include "dice/core/tensor_layout.h"

namespace dice {
namespace {

ir::TensorSpec Spec(std::vector<int64_t> shape, std::vector<int64_t> strides) {
  ir::TensorSpec s = ir::TensorSpec::Contiguous(ir::DType::kFloat32, std::move(shape));
  s.strides = std::move(strides);
  return s;
}

// [8, 64, 56, 56] in channels_last: C innermost, then W, H, N.
ir::TensorSpec ChannelsLastActivation() { return Spec({8, 64, 56, 56}, {64 * 56 * 56, 1, 56 * 64, 64}); }

TEST(TensorLayoutRule, ClassifiesDenseLayoutsFromSizesAndStrides) {
  EXPECT_EQ(ClassifyLayout(ir::TensorSpec::Contiguous(ir::DType::kFloat32, {8, 64, 56, 56})), TensorLayout::kContiguous);
  EXPECT_EQ(ClassifyLayout(ChannelsLastActivation()), TensorLayout::kChannelsLast);
  EXPECT_EQ(ClassifyLayout(Spec({2, 16, 4, 8, 8}, {4 * 8 * 8 * 16, 1, 8 * 8 * 16, 8 * 16, 16})),
            TensorLayout::kChannelsLast3d);
  // Both at once (C == 1): contiguous wins; size-1 strides are ignored.
  EXPECT_EQ(ClassifyLayout(Spec({2, 1, 4, 4}, {16, 1, 4, 1})), TensorLayout::kContiguous);
  EXPECT_EQ(ClassifyLayout(Spec({0, 3, 4, 4}, {0, 0, 0, 0})), TensorLayout::kContiguous);
  // channels_last strides on a rank-3 tensor are just strided.
  EXPECT_EQ(ClassifyLayout(Spec({64, 56, 56}, {1, 56 * 64, 64})), TensorLayout::kStrided);
}

TEST(TensorLayoutRule, TellsOverlappingFromStridedTensors) {
  EXPECT_EQ(ClassifyLayout(Spec({64, 56, 56}, {1, 0, 0})), TensorLayout::kOverlapping);   // expand
  EXPECT_EQ(ClassifyLayout(Spec({8, 8}, {4, 1})), TensorLayout::kOverlapping);            // rows overlap
  EXPECT_EQ(ClassifyLayout(Spec({8, 64, 56, 28}, {64 * 56 * 56, 56 * 56, 56, 1})), TensorLayout::kStrided);  // narrow
  EXPECT_EQ(ClassifyLayout(Spec({16, 32}, {1, 16})), TensorLayout::kStrided);             // transpose
  // A spec without one stride per dim is not classified further.
  EXPECT_EQ(ClassifyLayout(Spec({4, 4}, {1})), TensorLayout::kStrided);
}

TEST(TensorLayoutRule, ServesDenseLayoutsAndNamesWhyOthersFallBack) {
  EXPECT_TRUE(Servable(TensorLayout::kContiguous));
  EXPECT_TRUE(Servable(TensorLayout::kChannelsLast));
  EXPECT_TRUE(Servable(TensorLayout::kChannelsLast3d));
  EXPECT_FALSE(Servable(TensorLayout::kStrided));
  EXPECT_FALSE(Servable(TensorLayout::kOverlapping));
  EXPECT_EQ(LayoutRefusal(TensorLayout::kChannelsLast, 0), "");
  EXPECT_EQ(LayoutRefusal(TensorLayout::kStrided, 2), "non-contiguous input 2");
  EXPECT_EQ(LayoutRefusal(TensorLayout::kOverlapping, 1), "non-contiguous input 1 (overlapping: expanded or stride 0)");
}

TEST(TensorLayoutRule, CanonicalStridesAreC10s) {
  EXPECT_EQ(LayoutStrides({2, 3, 1, 5}, TensorLayout::kChannelsLast), (std::vector<int64_t>{15, 1, 15, 3}));
  EXPECT_EQ(LayoutStrides({4, 0, 2, 2}, TensorLayout::kChannelsLast), (std::vector<int64_t>{0, 1, 0, 0}));
  EXPECT_EQ(LayoutStrides({4, 0, 2, 2}, TensorLayout::kContiguous), (std::vector<int64_t>{4, 4, 2, 1}));
  EXPECT_EQ(LayoutStrides({2, 16, 4, 8, 8}, TensorLayout::kChannelsLast3d),
            (std::vector<int64_t>{4096, 1, 1024, 128, 16}));
  // The wrong rank for the layout, and the refused layouts: contiguous strides.
  EXPECT_EQ(LayoutStrides({3, 4, 5}, TensorLayout::kChannelsLast), (std::vector<int64_t>{20, 5, 1}));
  EXPECT_EQ(LayoutStrides({3, 4}, TensorLayout::kOverlapping), (std::vector<int64_t>{4, 1}));
  // A size-1 dim's stride is PyTorch's choice; the served spec names the layout canonically.
  ir::TensorSpec odd = Spec({2, 8, 1, 4}, {32, 1, 7, 8});
  ASSERT_EQ(ClassifyLayout(odd), TensorLayout::kChannelsLast);
  EXPECT_EQ(ServedInputSpec(odd, TensorLayout::kChannelsLast).strides, LayoutStrides({2, 8, 1, 4}, TensorLayout::kChannelsLast));
  EXPECT_EQ(ServedInputSpec(Spec({2, 1}, {1, 5}), TensorLayout::kContiguous).strides, (std::vector<int64_t>{1, 5}));
}

TEST(TensorLayoutRule, OnlyOutputsOfTheChannelsLastInputsShapeFollowIt) {
  std::vector<ir::TensorSpec> inputs = {Spec({4, 8, 3, 3}, LayoutStrides({4, 8, 3, 3}, TensorLayout::kChannelsLast)),
                                        ir::TensorSpec::Contiguous(ir::DType::kFloat32, {8, 1, 1})};
  std::vector<ir::TensorSpec> outputs = {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4, 8, 3, 3}),
                                         ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4, 1, 3, 3}),
                                         ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4, 8})};
  std::vector<ir::TensorSpec> served = outputs;
  FollowInputLayout(inputs, &served);
  EXPECT_EQ(served[0].strides, LayoutStrides({4, 8, 3, 3}, TensorLayout::kChannelsLast));
  EXPECT_EQ(served[1].strides, outputs[1].strides);  // a reduced keepdim output: contiguous
  EXPECT_EQ(served[2].strides, outputs[2].strides);
  // The first input of the output's shape decides: contiguous first -> contiguous.
  std::vector<ir::TensorSpec> mixed = {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4, 8, 3, 3}), inputs[0]};
  std::vector<ir::TensorSpec> m = outputs;
  FollowInputLayout(mixed, &m);
  EXPECT_TRUE(m[0].is_contiguous());
  // A channels_last input that is also contiguous (C == 1) leaves the output contiguous.
  std::vector<ir::TensorSpec> both = {Spec({2, 1, 4, 4}, {16, 1, 4, 1})};
  std::vector<ir::TensorSpec> b = {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {2, 1, 4, 4})};
  FollowInputLayout(both, &b);
  EXPECT_EQ(b[0].strides, (std::vector<int64_t>{16, 16, 4, 1}));
}

// relu(x + b) then a layout copy to `format` (ir.h kContiguous), x [4, 8, 3, 3], b [8, 1, 1].
ir::Graph EpilogueWithLayoutCopy(int64_t format) {
  ir::Graph g;
  g.inputs = {{ir::DType::kFloat32, 4}, {ir::DType::kFloat32, 3}};
  ir::Op add; add.kind = ir::OpKind::kAdd; add.args = {0, 1};
  ir::Op relu; relu.kind = ir::OpKind::kRelu; relu.args = {2};
  ir::Op copy; copy.kind = ir::OpKind::kContiguous; copy.args = {3}; copy.ivalue = format;
  g.ops = {add, relu, copy};
  g.outputs = {3, 4};  // relu's value (follows the input) and the copy (its stated format)
  return g;
}

TEST(TensorLayoutRule, ALayoutCopyOutputTakesItsStatedFormatTheOthersFollowTheInputs) {
  const ir::Graph g = EpilogueWithLayoutCopy(0);
  ASSERT_TRUE(ir::Validate(g).ok()) << ir::Validate(g).ToString();
  EXPECT_EQ(StatedOutputLayout(g, 0), TensorLayout::kStrided);  // relu: no stated layout
  EXPECT_EQ(StatedOutputLayout(g, 1), TensorLayout::kContiguous);
  EXPECT_EQ(StatedOutputLayout(g, 7), TensorLayout::kStrided);  // out of range
  std::vector<ir::TensorSpec> inputs = {Spec({4, 8, 3, 3}, LayoutStrides({4, 8, 3, 3}, TensorLayout::kChannelsLast)),
                                        ir::TensorSpec::Contiguous(ir::DType::kFloat32, {8, 1, 1})};
  auto task = MakeServedTask(g, inputs, TargetInfo{});
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  EXPECT_EQ(task->outputs[0].strides, LayoutStrides({4, 8, 3, 3}, TensorLayout::kChannelsLast));
  EXPECT_TRUE(task->outputs[1].is_contiguous());  // the region's exit: NCHW, as eager's x.contiguous()
  // The entry direction: a contiguous input copied to channels_last.
  ir::Graph entry;
  entry.inputs = {{ir::DType::kFloat32, 4}};
  ir::Op copy; copy.kind = ir::OpKind::kContiguous; copy.args = {0}; copy.ivalue = 1;
  entry.ops = {copy};
  entry.outputs = {1};
  std::vector<ir::TensorSpec> out = {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4, 8, 3, 3})};
  ApplyOutputLayouts(entry, {out[0]}, &out);
  EXPECT_EQ(out[0].strides, LayoutStrides({4, 8, 3, 3}, TensorLayout::kChannelsLast));
}

TEST(TensorLayoutRule, APoolsOutputKeepsItsChannelsLastInputsFormatOtherGroupsAreUnchanged) {
  // relu(x) pooled 2x2, plus relu(x) itself: eager's max_pool2d of a
  // channels_last tensor is channels_last, so both outputs are.
  ir::Graph g;
  g.inputs = {{ir::DType::kFloat32, 4}};
  ir::Op relu; relu.kind = ir::OpKind::kRelu; relu.args = {0};
  ir::Op pool; pool.kind = ir::OpKind::kMaxPool; pool.args = {1}; pool.dims = {2, 2};
  g.ops = {relu, pool};
  g.outputs = {2, 1};
  const std::vector<int64_t> shape = {4, 8, 6, 6}, pooled = {4, 8, 3, 3};
  auto cl = MakeServedTask(g, {Spec(shape, LayoutStrides(shape, TensorLayout::kChannelsLast))}, TargetInfo{});
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  EXPECT_EQ(cl->outputs[0].shape, pooled);
  EXPECT_EQ(cl->outputs[0].strides, LayoutStrides(pooled, TensorLayout::kChannelsLast));
  EXPECT_EQ(cl->outputs[1].strides, LayoutStrides(shape, TensorLayout::kChannelsLast));
  // Contiguous input: contiguous outputs.
  auto nchw = MakeServedTask(g, {ir::TensorSpec::Contiguous(ir::DType::kFloat32, shape)}, TargetInfo{});
  ASSERT_TRUE(nchw.ok()) << nchw.status().ToString();
  EXPECT_TRUE(nchw->outputs[0].is_contiguous());
  // Without a pool, an output of another shape than the channels_last input stays as given (a keepdim sum).
  ir::Graph sum;
  sum.inputs = {{ir::DType::kFloat32, 4}};
  ir::Op s; s.kind = ir::OpKind::kSum; s.args = {0}; s.dims = {3}; s.keepdim = true;
  sum.ops = {s};
  sum.outputs = {1};
  auto red = MakeServedTask(sum, {Spec(shape, LayoutStrides(shape, TensorLayout::kChannelsLast))}, TargetInfo{});
  ASSERT_TRUE(red.ok()) << red.status().ToString();
  EXPECT_TRUE(red->outputs[0].is_contiguous());
}

TEST(TensorLayoutRule, LayoutCopyIsValidatedAndRoundTripsThroughCanonicalText) {
  const ir::Graph g = EpilogueWithLayoutCopy(1);
  const std::string text = ir::Canonical(g);
  EXPECT_NE(text.find("%4 = contiguous(%3) i=1"), std::string::npos) << text;
  auto parsed = ir::Parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, g);
  const std::vector<ir::TensorSpec> specs = {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4, 8, 3, 3}),
                                             ir::TensorSpec::Contiguous(ir::DType::kFloat32, {8, 1, 1})};
  const std::string program = ir::RenderReferenceProgram(g, specs);
  EXPECT_NE(program.find(".contiguous(memory_format=torch.channels_last)"), std::string::npos) << program;
  ir::Graph bad = EpilogueWithLayoutCopy(2);  // channels_last_3d of a rank-4 value
  EXPECT_NE(ir::Validate(bad).message().find("channels_last_3d needs rank 5"), std::string::npos)
      << ir::Validate(bad).ToString();
  bad = EpilogueWithLayoutCopy(3);
  EXPECT_NE(ir::Validate(bad).message().find("memory format must be 0, 1 or 2"), std::string::npos);
}

TEST(TensorLayoutRule, ServedTaskOfContiguousInputsIsTaskMakes) {
  ir::Graph g;
  g.inputs = {{ir::DType::kFloat32, 4}};
  ir::Op relu;
  relu.kind = ir::OpKind::kRelu;
  relu.args = {0};
  g.ops = {relu};
  g.outputs = {1};
  const ir::TensorSpec x = ir::TensorSpec::Contiguous(ir::DType::kFloat32, {8, 64, 56, 56});
  auto served = MakeServedTask(g, {x}, TargetInfo{});
  auto plain = Task::Make(g, {x}, TargetInfo{});
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(served->Key(), plain->Key());  // cached winners of contiguous calls stay valid
  auto cl = MakeServedTask(g, {ChannelsLastActivation()}, TargetInfo{});
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  EXPECT_EQ(cl->outputs[0].strides, ChannelsLastActivation().strides);
  EXPECT_NE(cl->Key(), served->Key());
  // Specs that do not fit the graph: Task::Make's error.
  EXPECT_FALSE(MakeServedTask(g, {}, TargetInfo{}).ok());
}

}  // namespace
}  // namespace dice
