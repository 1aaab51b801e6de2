// Tests for dice/generator/completion_parser.h: a DICE answer to the
// runtime's infilling prompt becomes the CUDA source of an extension-form
// candidate, and every answer that does not is an error saying why.
#include "dice/generator/completion_parser.h"

#include <gtest/gtest.h>

#include <string>

namespace dice::generator {
namespace {

const std::string kCuda =
    "#include <torch/extension.h>\n"
    "__global__ void k(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = x[i]; }\n"
    "torch::Tensor dice_forward(torch::Tensor in0) { auto y = torch::empty_like(in0); return y; }\n";

TEST(CompletionParserTest, TakesTheSourceStringOfAPythonMiddle) {
  const std::string answer = "Here is the kernel.\n```python\nimport os\nsource = \"\"\"\n" + kCuda +
                             "\"\"\"\n```\nDone.";
  auto c = ParseExtensionCandidate(answer, "dice:sample0");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->source, "\n" + kCuda);
  EXPECT_EQ(c->form, CandidateForm::kExtension);
  EXPECT_EQ(c->origin, "dice:sample0");
}

TEST(CompletionParserTest, PrefersTheStringAssignedToSourceOverAnEarlierDocstring) {
  const std::string answer = "```python\n'''helper module'''\nsource = r'''" + kCuda + "'''\n```";
  auto s = ParseExtensionSource(answer);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, kCuda);
}

TEST(CompletionParserTest, AcceptsABareCudaBlock) {
  auto s = ParseExtensionSource("```cuda\n" + kCuda + "```\n");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, kCuda);
}

TEST(CompletionParserTest, AnswerWithoutCodeIsNotFound) {
  auto s = ParseExtensionSource("I cannot write this kernel.");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("no code block"), std::string::npos) << s.status().message();
}

TEST(CompletionParserTest, CutOffSourceStringSaysSo) {
  auto s = ParseExtensionSource("```python\nsource = \"\"\"\n" + kCuda);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("cut off"), std::string::npos) << s.status().message();
}

TEST(CompletionParserTest, SourceWithoutDiceForwardIsRejected) {
  auto s = ParseExtensionSource("```cuda\n__global__ void k(float* y) { y[0] = 0; }\n```");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("dice_forward"), std::string::npos) << s.status().message();
}

TEST(CompletionParserTest, EmptySourceStringIsRejected) {
  auto s = ParseExtensionSource("```python\nsource = \"\"\"   \n\"\"\"\n```");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("empty"), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace dice::generator
