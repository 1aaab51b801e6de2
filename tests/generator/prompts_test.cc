// Tests for dice/generator/prompts.h: Qwen chat format, end-to-end and
// infilling prompts, template overrides from a file, answer parsing.
#include "dice/generator/prompts.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <cstdlib>
#include <string>

#include "dice/core/ir.h"
#include "dice/core/task.h"

namespace dice::generator {
namespace {

const std::string kReference =
    "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
    "        return torch.relu(x)\n";

std::string WriteTemp(const std::string& text) {
  char path[] = "/tmp/dice_prompt_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  ::close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(PromptsTest, ChatPromptUsesQwenTurnsAndOpensTheAssistantTurn) {
  EXPECT_EQ(ChatPrompt("S", "U"),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ChatPrompt("", "U"), "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
}

TEST(PromptsTest, EndToEndPromptCarriesTheReferenceInACodeBlockAndAsksForModelNew) {
  auto p = BuildEndToEndPrompt(PromptTemplates::Default(), kReference);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->rfind("<|im_start|>system\n", 0), 0u);
  EXPECT_NE(p->find("```python\n" + kReference + "```"), std::string::npos);
  EXPECT_NE(p->find("ModelNew"), std::string::npos);
  EXPECT_NE(p->find("load_inline"), std::string::npos);
  EXPECT_EQ(p->substr(p->size() - 22), "<|im_start|>assistant\n");
  EXPECT_EQ(p->find("{reference}"), std::string::npos);
}

TEST(PromptsTest, InfillingPromptCarriesReferencePrefixAndSuffixInOrder) {
  const std::string prefix = "import torch\nfrom torch.utils.cpp_extension import load_inline\n";
  const std::string suffix = "cpp_src = \"torch::Tensor relu_cuda(torch::Tensor x);\"\n";
  auto p = BuildInfillingPrompt(PromptTemplates::Default(), kReference, prefix, suffix);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const size_t r = p->find(kReference), a = p->find(prefix, r + kReference.size()), b = p->find(suffix);
  ASSERT_NE(r, std::string::npos);
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  EXPECT_LT(r, a);
  EXPECT_LT(a, b);
}

TEST(PromptsTest, PlaceholdersInsideTheCodeAreNotExpandedAgain) {
  const std::string tricky = "class Model:\n    s = '{prefix} {suffix} {reference}'\n";
  auto p = BuildInfillingPrompt(PromptTemplates::Default(), tricky, "P = 1\n", "S = 2\n");
  ASSERT_TRUE(p.ok());
  EXPECT_NE(p->find(tricky), std::string::npos);
  EXPECT_EQ(p->find("P = 1"), p->rfind("P = 1"));  // the prefix appears once
}

TEST(PromptsTest, RejectsEmptyReferenceOrSuffix) {
  auto e2e = BuildEndToEndPrompt(PromptTemplates::Default(), " \n");
  ASSERT_FALSE(e2e.ok());
  EXPECT_EQ(e2e.status().code(), StatusCode::kInvalidArgument);
  auto inf = BuildInfillingPrompt(PromptTemplates::Default(), kReference, "x", "");
  ASSERT_FALSE(inf.ok());
  EXPECT_NE(inf.status().message().find("suffix"), std::string::npos);
}

TEST(PromptsTest, TemplateFileOverridesOnlyTheGivenKeys) {
  const std::string path = WriteTemp(R"({"system": "", "end_to_end": "Make this fast:\n{reference}"})");
  auto t = PromptTemplates::Load(path);
  std::remove(path.c_str());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->infilling, PromptTemplates::Default().infilling);
  auto p = BuildEndToEndPrompt(*t, "print(1)\n");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, "<|im_start|>user\nMake this fast:\nprint(1)\n<|im_end|>\n<|im_start|>assistant\n");
}

TEST(PromptsTest, TemplateFileErrorsNameFileKeyAndPlaceholder) {
  auto missing = PromptTemplates::Load("/nonexistent/prompts.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  struct Case {
    std::string text;
    StatusCode code;
    std::string needle;
  };
  for (const Case& c : {Case{"{not json", StatusCode::kCorrupt, "not JSON"},
                        Case{"[1]", StatusCode::kCorrupt, "object"},
                        Case{R"({"sytem": "x"})", StatusCode::kCorrupt, "unknown key \"sytem\""},
                        Case{R"({"system": 3})", StatusCode::kCorrupt, "\"system\" is not a string"},
                        Case{R"({"infilling": "{reference} {prefix}"})", StatusCode::kInvalidArgument,
                             "\"infilling\" lacks the placeholder {suffix}"}}) {
    const std::string path = WriteTemp(c.text);
    auto t = PromptTemplates::Load(path);
    std::remove(path.c_str());
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), c.code) << c.text;
    EXPECT_NE(t.status().message().find(c.needle), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find(path), std::string::npos) << t.status().message();
  }
}

TEST(PromptsTest, ExtractsTheFirstFencedBlock) {
  auto code = ExtractCodeBlock("Here it is:\n```python\nx = 1\ny = '```'\n```\nmore ```cpp\nz\n```");
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, "x = 1\ny = '```'\n");
  auto bare = ExtractCodeBlock("```\nint a;\n```");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(*bare, "int a;\n");
}

TEST(PromptsTest, CutOffBlockYieldsTheTextSoFarAndNoBlockIsAnError) {
  auto cut = ExtractCodeBlock("```python\nimport torch\nclass ModelNew");
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(*cut, "import torch\nclass ModelNew");
  auto none = ExtractCodeBlock("I cannot help with that.");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("no code block"), std::string::npos);
  EXPECT_NE(none.status().message().find("I cannot help"), std::string::npos);
}

// relu(x0 + x1) over two f32 [64, 128] inputs.
Task AddReluTask() {
  ir::Graph g;
  g.inputs.push_back(ir::InputDecl{ir::DType::kFloat32, 2});
  g.inputs.push_back(ir::InputDecl{ir::DType::kFloat32, 2});
  ir::Op add;
  add.kind = ir::OpKind::kAdd;
  add.args = {0, 1};
  g.ops.push_back(add);
  ir::Op relu;
  relu.kind = ir::OpKind::kRelu;
  relu.args = {g.op_value(0)};
  g.ops.push_back(relu);
  g.outputs.push_back(g.op_value(1));
  const auto spec = ir::TensorSpec::Contiguous(ir::DType::kFloat32, {64, 128});
  auto t = Task::Make(g, {spec, spec}, TargetInfo{});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

TEST(PromptsTest, InfillingSkeletonDeclaresDiceForwardWithOneArgumentPerInput) {
  auto s = BuildInfillingSkeleton(AddReluTask());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_NE(s->reference.find("class Model"), std::string::npos) << s->reference;
  EXPECT_NE(s->reference.find("def get_inputs"), std::string::npos) << s->reference;
  EXPECT_NE(s->prefix.find("from torch.utils.cpp_extension import load_inline"), std::string::npos);
  EXPECT_NE(s->suffix.find("torch::Tensor dice_forward(torch::Tensor in0, torch::Tensor in1);"), std::string::npos)
      << s->suffix;
  EXPECT_NE(s->suffix.find("def forward(self, in0, in1):"), std::string::npos) << s->suffix;
  EXPECT_NE(s->suffix.find("return dice_ext.dice_forward(in0, in1)"), std::string::npos) << s->suffix;
  auto prompt = BuildInfillingPrompt(PromptTemplates::Default(), s->reference, s->prefix, s->suffix);
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_NE(prompt->find("dice_forward"), std::string::npos);
}

// prefix + a middle defining `source` + suffix is a Python program that parses.
TEST(PromptsTest, InfillingSkeletonWithAMiddleIsValidPython) {
  auto s = BuildInfillingSkeleton(AddReluTask());
  ASSERT_TRUE(s.ok());
  const std::string program = s->prefix + "source = \"\"\"\n__global__ void k() {}\n\"\"\"\n" + s->suffix;
  const std::string path = WriteTemp(program);
  const std::string ref_path = WriteTemp(s->reference);
  const int rc = std::system(("python3 -c 'import ast, sys; [ast.parse(open(p).read()) for p in sys.argv[1:]]' " +
                              path + " " + ref_path).c_str());
  std::remove(path.c_str());
  std::remove(ref_path.c_str());
  EXPECT_EQ(rc, 0) << program;
}

}  // namespace
}  // namespace dice::generator
