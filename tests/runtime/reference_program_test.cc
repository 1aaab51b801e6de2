// Tests of ir::RenderReferenceProgram: the KernelBench-style program has the
// expected lines, and (where python3 with torch is available) it runs and
// produces the output shapes and dtypes InferOutputSpecs predicts.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "dice/core/ir.h"

namespace dice::ir {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Op MakeOp(OpKind kind, std::vector<int32_t> args, std::vector<double> scalars = {}, int64_t ivalue = 0,
          std::vector<int64_t> dims = {}, bool keepdim = false) {
  Op op;
  op.kind = kind;
  op.args = std::move(args);
  op.scalars = std::move(scalars);
  op.ivalue = ivalue;
  op.dims = std::move(dims);
  op.keepdim = keepdim;
  return op;
}

Op Const(double v) { return MakeOp(OpKind::kConstant, {}, {v}); }

void ExpectContains(const std::string& text, const std::string& line) {
  EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\n--- program ---\n" << text;
}

TEST(ReferenceProgramTest, RendersKernelBenchSkeletonWithOneLinePerOp) {
  Graph g;
  g.inputs = {{DType::kFloat32, 2}, {DType::kFloat32, 2}};
  g.ops = {MakeOp(OpKind::kAdd, {0, 1}), MakeOp(OpKind::kGelu, {2}, {}, 1),
           MakeOp(OpKind::kSum, {3}, {}, 0, {1}, true)};
  g.outputs = {4};
  const std::string p = RenderReferenceProgram(
      g, {TensorSpec::Contiguous(DType::kFloat32, {1024, 8192}), TensorSpec::Contiguous(DType::kFloat32, {1024, 8192})});
  ExpectContains(p, "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n");
  ExpectContains(p, "class Model(nn.Module):\n    \"\"\"DICE fusion group: " + Summary(g) + "\"\"\"");
  ExpectContains(p, "    def __init__(self):\n        super().__init__()\n");
  ExpectContains(p, "    def forward(self, x0, x1):\n");
  ExpectContains(p, "        v2 = x0 + x1\n");
  ExpectContains(p, "        v3 = F.gelu(v2, approximate=\"tanh\")\n");
  ExpectContains(p, "        v4 = torch.sum(v3, dim=(1,), keepdim=True)\n");
  ExpectContains(p, "        return v4\n");
  ExpectContains(p,
                 "def get_inputs():\n    return [torch.randn(1024, 8192, dtype=torch.float32, device=\"cuda\"), "
                 "torch.randn(1024, 8192, dtype=torch.float32, device=\"cuda\")]\n");
  ExpectContains(p, "def get_init_inputs():\n    return []\n");
}

TEST(ReferenceProgramTest, InlinesConstantsAsRoundTrippingPythonFloats) {
  Graph g;
  g.inputs = {{DType::kFloat16, 2}};
  g.ops = {Const(0.1), MakeOp(OpKind::kMul, {0, 1}),                // 2
           Const(-0.5), MakeOp(OpKind::kSub, {3, 2}),               // 4: -0.5 - v2
           MakeOp(OpKind::kClamp, {4}, {-kInf, 6.0}),               // 5
           MakeOp(OpKind::kClamp, {5}, {-1.0, 2.0}),                // 6
           MakeOp(OpKind::kNorm, {6}, {kInf}, 0, {}, false),        // 7
           Const(1.0 / 3.0), MakeOp(OpKind::kPow, {0, 8}),          // 9
           MakeOp(OpKind::kCast, {9}, {}, static_cast<int64_t>(DType::kFloat32))};  // 10
  g.outputs = {7, 10};
  const std::string p = RenderReferenceProgram(g, {TensorSpec::Contiguous(DType::kFloat16, {8, 3})});
  ExpectContains(p, "        v2 = x0 * 0.1\n");
  ExpectContains(p, "        v4 = (-0.5) - v2\n");
  ExpectContains(p, "        v5 = torch.clamp(v4, max=6.0)\n");
  ExpectContains(p, "        v6 = torch.clamp(v5, min=(-1.0), max=2.0)\n");
  ExpectContains(p, "        v7 = torch.linalg.vector_norm(v6, ord=float(\"inf\"), dim=(0, 1), keepdim=False)\n");
  ExpectContains(p, "        v9 = torch.pow(x0, 0.3333333333333333)\n");
  ExpectContains(p, "        v10 = v9.to(torch.float32)\n");
  ExpectContains(p, "        return v7, v10\n");
  ExpectContains(p, "torch.randn(8, 3, dtype=torch.float16, device=\"cuda\")");
}

TEST(ReferenceProgramTest, SpellsLinearWithTorchFunctional) {
  Graph g;
  g.inputs = {{DType::kFloat32, 2}, {DType::kFloat32, 2}, {DType::kFloat32, 1}};
  g.ops = {MakeOp(OpKind::kLinear, {0, 1, 2}), MakeOp(OpKind::kLinear, {3, 1})};
  g.outputs = {4};
  const std::string p = RenderReferenceProgram(g, {TensorSpec::Contiguous(DType::kFloat32, {8, 16}),
                                                   TensorSpec::Contiguous(DType::kFloat32, {16, 16}),
                                                   TensorSpec::Contiguous(DType::kFloat32, {16})},
                                               "cpu");
  ExpectContains(p, "        v3 = F.linear(x0, x1, x2)\n");
  ExpectContains(p, "        v4 = F.linear(v3, x1)\n");
}

TEST(ReferenceProgramTest, SpellsConv2dWithItsAttributes) {
  Graph g;
  g.inputs = {{DType::kFloat32, 4}, {DType::kFloat32, 4}, {DType::kFloat32, 1}};
  g.ops = {MakeOp(OpKind::kConv2d, {0, 1, 2}, {}, 2, {2, 1, 1, 0, 1, 3}), MakeOp(OpKind::kConv2d, {3, 1}, {}, 1, {1, 1, 0, 0, 1, 1})};
  g.outputs = {4};
  const std::string p = RenderReferenceProgram(g, {TensorSpec::Contiguous(DType::kFloat32, {2, 8, 16, 16}),
                                                   TensorSpec::Contiguous(DType::kFloat32, {8, 4, 3, 3}),
                                                   TensorSpec::Contiguous(DType::kFloat32, {8})},
                                               "cpu");
  ExpectContains(p, "        v3 = F.conv2d(x0, x1, x2, stride=(2, 1), padding=(1, 0), dilation=(1, 3), groups=2)\n");
  ExpectContains(p, "        v4 = F.conv2d(v3, x1, None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)\n");
}

TEST(ReferenceProgramTest, SpellsNormalisationsWithTorchFunctional) {
  Graph g;
  g.inputs = {{DType::kFloat32, 3}, {DType::kFloat32, 1}, {DType::kFloat32, 1}};
  g.ops = {MakeOp(OpKind::kLayerNorm, {0, 1, 2}, {1e-5}, 1), MakeOp(OpKind::kGroupNorm, {3}, {1e-6}, 2),
           MakeOp(OpKind::kSoftmax, {4}, {}, 0, {2}), MakeOp(OpKind::kElu, {5}, {1.0, 2.0, 0.5})};
  g.outputs = {6};
  const std::string p = RenderReferenceProgram(g, {TensorSpec::Contiguous(DType::kFloat32, {2, 4, 8}),
                                                   TensorSpec::Contiguous(DType::kFloat32, {8}),
                                                   TensorSpec::Contiguous(DType::kFloat32, {8})},
                                               "cpu");
  ExpectContains(p, "        v3 = F.layer_norm(x0, x0.shape[-1:], x1, x2, 1e-05)\n");
  ExpectContains(p, "        v4 = F.group_norm(v3, 2, None, None, 1e-06)\n");
  ExpectContains(p, "        v5 = F.softmax(v4, dim=2)\n");
  ExpectContains(p, "        v6 = torch.ops.aten.elu(v5, 1.0, 2.0, 0.5)\n");
  ExpectContains(p, "device=\"cpu\"");
  EXPECT_EQ(p.find("cuda"), std::string::npos);
}

TEST(ReferenceProgramTest, InvalidGraphRendersARaisingProgram) {
  Graph g;
  g.inputs = {{DType::kFloat32, 2}};
  g.ops = {MakeOp(OpKind::kAdd, {0, 7})};
  g.outputs = {1};
  const std::string p = RenderReferenceProgram(g, {TensorSpec::Contiguous(DType::kFloat32, {2, 2})});
  ExpectContains(p, "raise ValueError(\"invalid DICE IR graph: ");
  EXPECT_EQ(p.find("class Model"), std::string::npos);
}

// ---------------------------------------------------------------- python ----

bool PythonTorchAvailable(std::string* why) {
  if (std::system("python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    *why = "python3 cannot import torch here";
    return false;
  }
  return true;
}

std::string TorchDTypeName(DType d) {
  switch (d) {
    case DType::kFloat32: return "torch.float32";
    case DType::kFloat16: return "torch.float16";
    case DType::kBFloat16: return "torch.bfloat16";
  }
  return "?";
}

/// Renders `g` for the CPU, runs Model()(*get_inputs()) in python3 and
/// returns one "shape dtype" line per output (or the failure text).
std::string RunRenderedProgram(const Graph& g, const std::vector<TensorSpec>& inputs, int* exit_code) {
  char dir_template[] = "/tmp/dice_refprog_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    *exit_code = -1;
    return "mkdtemp failed";
  }
  const std::string base = dir;
  std::ofstream(base + "/model.py") << RenderReferenceProgram(g, inputs, "cpu");
  std::ofstream(base + "/driver.py")
      << "import importlib.util, sys, warnings\n"
         "warnings.simplefilter('ignore')\n"
         "import torch\n"
         "spec = importlib.util.spec_from_file_location('model', sys.argv[1])\n"
         "m = importlib.util.module_from_spec(spec)\n"
         "spec.loader.exec_module(m)\n"
         "torch.manual_seed(0)\n"
         "out = m.Model(*m.get_init_inputs())(*m.get_inputs())\n"
         "out = out if isinstance(out, tuple) else (out,)\n"
         "for o in out:\n"
         "    print(list(o.shape), o.dtype)\n";
  const std::string cmd = "python3 " + base + "/driver.py " + base + "/model.py > " + base + "/out.txt 2>&1";
  const int rc = std::system(cmd.c_str());
  *exit_code = rc;
  std::ifstream in(base + "/out.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string out = ss.str();
  std::system(("rm -rf " + base).c_str());
  // Drop lines torch prints on import (e.g. a NumPy warning) that are not results.
  std::string kept;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '[') kept += line + "\n";
  }
  return rc == 0 ? kept : out;
}

std::string ExpectedShapeLines(const Graph& g, const std::vector<TensorSpec>& inputs) {
  auto specs = InferOutputSpecs(g, inputs);
  EXPECT_TRUE(specs.ok()) << specs.status().ToString();
  if (!specs.ok()) return "";
  std::string want;
  for (const TensorSpec& s : *specs) {
    want += "[";
    for (size_t i = 0; i < s.shape.size(); ++i) want += (i ? ", " : "") + std::to_string(s.shape[i]);
    want += "] " + TorchDTypeName(s.dtype) + "\n";
  }
  return want;
}

TEST(ReferenceProgramPythonTest, EveryOpRunsInPyTorchWithPredictedShapes) {
  std::string why;
  if (!PythonTorchAvailable(&why)) GTEST_SKIP() << why;
  // x0 f32 [4,6,8], x1 f32 [4,1,8], x2 f16 [4,6,8], x3 f32 [8], x4 f32 [6]
  Graph g;
  g.inputs = {{DType::kFloat32, 3}, {DType::kFloat32, 3}, {DType::kFloat16, 3}, {DType::kFloat32, 1},
              {DType::kFloat32, 1}};
  std::vector<Op>& ops = g.ops;
  auto add = [&](Op op) {
    ops.push_back(std::move(op));
    return g.op_value(ops.size() - 1);
  };
  std::vector<int32_t> outs;
  const int32_t half = add(Const(0.5));
  const int32_t neg = add(Const(-2.0));
  for (OpKind k : {OpKind::kNeg, OpKind::kAbs, OpKind::kExp, OpKind::kLog, OpKind::kSqrt, OpKind::kRsqrt,
                   OpKind::kReciprocal, OpKind::kTanh, OpKind::kSigmoid, OpKind::kErf, OpKind::kRelu, OpKind::kSilu,
                   OpKind::kMish, OpKind::kSoftsign, OpKind::kSelu, OpKind::kHardswish, OpKind::kHardsigmoid}) {
    outs.push_back(add(MakeOp(k, {0})));
  }
  outs.push_back(add(MakeOp(OpKind::kGelu, {0}, {}, 0)));
  outs.push_back(add(MakeOp(OpKind::kGelu, {2}, {}, 1)));
  outs.push_back(add(MakeOp(OpKind::kSoftplus, {0}, {1.0, 20.0})));
  outs.push_back(add(MakeOp(OpKind::kElu, {0}, {1.0, 1.0, 1.0})));
  outs.push_back(add(MakeOp(OpKind::kElu, {0}, {1.5, 2.0, 0.5})));
  outs.push_back(add(MakeOp(OpKind::kLeakyRelu, {0}, {0.01})));
  outs.push_back(add(MakeOp(OpKind::kClamp, {0}, {-1.0, 1.0})));
  outs.push_back(add(MakeOp(OpKind::kClamp, {0}, {-kInf, 1.0})));
  outs.push_back(add(MakeOp(OpKind::kClamp, {0}, {-kInf, kInf})));
  outs.push_back(add(MakeOp(OpKind::kPowScalar, {0}, {2.0})));
  outs.push_back(add(MakeOp(OpKind::kCast, {0}, {}, static_cast<int64_t>(DType::kBFloat16))));
  for (OpKind k : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kMaximum, OpKind::kMinimum,
                   OpKind::kPow}) {
    outs.push_back(add(MakeOp(k, {0, 1})));     // broadcasting [4,6,8] with [4,1,8]
    outs.push_back(add(MakeOp(k, {2, half})));  // f16 tensor with a weak scalar: stays f16
    outs.push_back(add(MakeOp(k, {neg, 2})));   // scalar on the left
  }
  outs.push_back(add(MakeOp(OpKind::kAdd, {0, 2})));  // f32 + f16 -> f32
  const int32_t folded = add(MakeOp(OpKind::kExp, {neg}));  // folded weak scalar
  outs.push_back(add(MakeOp(OpKind::kMul, {2, folded})));
  for (OpKind k : {OpKind::kSum, OpKind::kMean, OpKind::kAmax, OpKind::kAmin, OpKind::kLogSumExp}) {
    outs.push_back(add(MakeOp(k, {0}, {}, 0, {1}, true)));
    outs.push_back(add(MakeOp(k, {0}, {}, 0, {0, 2}, false)));
    outs.push_back(add(MakeOp(k, {0}, {}, 0, {}, false)));
  }
  outs.push_back(add(MakeOp(OpKind::kNorm, {0}, {2.0}, 0, {2}, false)));
  outs.push_back(add(MakeOp(OpKind::kNorm, {0}, {kInf}, 0, {}, true)));
  outs.push_back(add(MakeOp(OpKind::kSoftmax, {0}, {}, 0, {2})));
  outs.push_back(add(MakeOp(OpKind::kLogSoftmax, {2}, {}, 0, {1})));
  outs.push_back(add(MakeOp(OpKind::kLayerNorm, {0, 3, 3}, {1e-5}, 1)));
  outs.push_back(add(MakeOp(OpKind::kLayerNorm, {0}, {1e-5}, 2)));
  outs.push_back(add(MakeOp(OpKind::kGroupNorm, {0, 4, 4}, {1e-5}, 3)));
  outs.push_back(add(MakeOp(OpKind::kGroupNorm, {0}, {1e-5}, 2)));
  g.outputs = outs;
  ASSERT_TRUE(Validate(g).ok()) << Validate(g).ToString();

  const std::vector<TensorSpec> inputs = {
      TensorSpec::Contiguous(DType::kFloat32, {4, 6, 8}), TensorSpec::Contiguous(DType::kFloat32, {4, 1, 8}),
      TensorSpec::Contiguous(DType::kFloat16, {4, 6, 8}), TensorSpec::Contiguous(DType::kFloat32, {8}),
      TensorSpec::Contiguous(DType::kFloat32, {6})};
  int rc = 0;
  const std::string got = RunRenderedProgram(g, inputs, &rc);
  ASSERT_EQ(rc, 0) << got << "\n--- program ---\n" << RenderReferenceProgram(g, inputs, "cpu");
  EXPECT_EQ(got, ExpectedShapeLines(g, inputs));
}

TEST(ReferenceProgramPythonTest, StridedAndRankZeroInputsRun) {
  std::string why;
  if (!PythonTorchAvailable(&why)) GTEST_SKIP() << why;
  Graph g;
  g.inputs = {{DType::kFloat32, 2}, {DType::kFloat32, 0}};
  g.ops = {MakeOp(OpKind::kMul, {0, 1}), MakeOp(OpKind::kAmax, {2}, {}, 0, {0}, false)};
  g.outputs = {2, 3};
  TensorSpec transposed = TensorSpec::Contiguous(DType::kFloat32, {5, 3});
  transposed.strides = {1, 5};
  const std::vector<TensorSpec> inputs = {transposed, TensorSpec::Contiguous(DType::kFloat32, {})};
  const std::string program = RenderReferenceProgram(g, inputs, "cpu");
  ExpectContains(program, ".as_strided((5, 3), (1, 5))");
  ExpectContains(program, "torch.randn((), dtype=torch.float32, device=\"cpu\")");
  int rc = 0;
  const std::string got = RunRenderedProgram(g, inputs, &rc);
  ASSERT_EQ(rc, 0) << got << "\n--- program ---\n" << program;
  EXPECT_EQ(got, ExpectedShapeLines(g, inputs));
}

}  // namespace
}  // namespace dice::ir
