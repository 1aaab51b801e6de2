// Integer and bool `--input` specs (cli/input_spec.h; docs/CLI.md "Input
// specs"; issue 20, the user's first hour): a model that takes int64 token
// ids (an embedding) and a bool mask is tuned, profiled and warmed up
// compile-only with `8x16:i64:0..100` and `8x16:b8`; integers without a
// range are drawn from 0..2, a model those values do not fit is one line
// with the hint; a malformed or out-of-range spec is exit 2 with one line
// naming the flag. The grammar is also checked on its own (ParseInputFlag,
// torch-free). The models are written by python3's torch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "input_spec.h"
#include "run_dice.h"

namespace {

using ::dice::cli::InputElement;
using ::dice::cli::InputSpec;
using ::dice::cli::ParseInputFlag;
using ::dice::cli_test::DiceResult;
using ::dice::cli_test::RunDice;
using ::dice::cli_test::ScratchDir;

// Lines of `text` that contain `needle`.
int CountLines(const std::string& text, const std::string& needle) {
  int n = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    n += text.substr(begin, end - begin).find(needle) != std::string::npos;
    begin = end + 1;
  }
  return n;
}

TEST(IntInputSpecTest, IntegerAndBoolDtypesParseWithTheirShapeRangeAndBytes) {
  auto ids = ParseInputFlag("8x128:i64:0..50257", "8x128:i64:0..50257");
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(ids->element, InputElement::kInt64);
  EXPECT_EQ(ids->shape(), (std::vector<int64_t>{8, 128}));
  EXPECT_EQ(ids->low, 0);
  EXPECT_EQ(ids->high, 50257);
  EXPECT_TRUE(ids->range_given);
  EXPECT_EQ(ids->nbytes(), 8 * 128 * 8);

  auto plain = ParseInputFlag("4x4:int64", "4x4:int64");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->element, InputElement::kInt64);
  EXPECT_FALSE(plain->range_given);
  EXPECT_EQ(plain->low, 0) << "the default range is 0..2";
  EXPECT_EQ(plain->high, 2);

  auto i32 = ParseInputFlag("16:i32:-5..5", "16:i32:-5..5");
  ASSERT_TRUE(i32.ok()) << i32.status().ToString();
  EXPECT_EQ(i32->element, InputElement::kInt32);
  EXPECT_EQ(i32->low, -5);
  EXPECT_EQ(i32->high, 5);
  EXPECT_EQ(i32->nbytes(), 16 * 4);
  EXPECT_TRUE(ParseInputFlag("16:i32:-2147483648..2147483648", "x").ok()) << "the whole of i32";

  auto mask = ParseInputFlag("2x1x8x8:b8", "2x1x8x8:b8");
  ASSERT_TRUE(mask.ok()) << mask.status().ToString();
  EXPECT_EQ(mask->element, InputElement::kBool);
  EXPECT_EQ(mask->nbytes(), 128);
  EXPECT_EQ(ParseInputFlag("scalar:bool", "scalar:bool")->shape().size(), 0u);

  auto f = ParseInputFlag("8x8:bf16", "8x8:bf16");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->element, InputElement::kFloat);
  EXPECT_EQ(f->tensor.dtype, dice::ir::DType::kBFloat16);
  EXPECT_EQ(f->nbytes(), 128);
}

TEST(IntInputSpecTest, MalformedOrOutOfRangeSpecsNameTheFlagAndWhatIsWrong) {
  const std::pair<std::string, std::string> cases[] = {
      {"8:i64:5..5", "value range 5..5 is empty"},
      {"8:i64:9..2", "is empty"},
      {"8:i64:0-5", "value range '0-5' is not two integers (expected LOW..HIGH"},
      {"8:i64:a..b", "is not two integers"},
      {"8:i64:0..", "is not two integers"},
      {"8:i64:0..99999999999999999999", "is not two integers"},
      {"8:i32:0..2147483649", "does not fit i32"},
      {"8:i32:-2147483649..0", "does not fit i32"},
      {"8:b8:0..2", "is for integer inputs (i64, i32) only; b8 inputs are random true/false"},
      {"8:f32:0..2", "is for integer inputs (i64, i32) only; float inputs are randn"},
      {"8:u8", "unknown dtype 'u8' (expected f32, f16, bf16, i64, i32 or b8)"},
      {"8x:i64", "dimension 1 is empty"},
      {"0x8:b8", "size 0 in dimension 0"},
      {"1500000000x1500000000:i64", "the sizes overflow int64"},  // as f32 it would fit: 8 bytes each
  };
  for (const auto& [spec, why] : cases) {
    auto r = ParseInputFlag(spec, spec);
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_EQ(r.status().message().rfind("--input '" + spec + "': ", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find(why), std::string::npos) << spec << ": " << r.status().message();
  }
  EXPECT_TRUE(ParseInputFlag("1500000000x1500000000:f32", "x").ok()) << "4 bytes each: 9e18 fits int64";
  // In a warmup set the spec is named after the whole value.
  auto in_set = ParseInputFlag("8:i64:1..1", "8:f32,8:i64:1..1");
  ASSERT_FALSE(in_set.ok());
  EXPECT_EQ(in_set.status().message().rfind("--input '8:f32,8:i64:1..1': '8:i64:1..1': value range", 0), 0u)
      << in_set.status().message();
}

TEST(IntInputSpecTest, ADtypeNoOpTakesGetsTheDtypeHintNotTheRangeHint) {
  std::vector<dice::cli::InputSpec> specs;
  specs.push_back(*dice::cli::ParseInputFlag("4x4:i64", "--input"));
  const std::string dtype = dice::cli::RunFailureHint(
      specs, "RuntimeError: \"softmax_lastdim_kernel_impl\" not implemented for 'Long'");
  EXPECT_EQ(dtype, "an op of the model does not take this dtype: check the :dtype of each --input");
  EXPECT_EQ(dice::cli::RunFailureHint(specs, "RuntimeError: index out of range in self"),
            dice::cli::DefaultRangeHint(specs));
  EXPECT_NE(dice::cli::DefaultRangeHint(specs), "");
}

TEST(IntInputSpecTest, TheDefaultRangeHintAppearsOnlyForAnIntegerInputWithoutARange) {
  std::vector<InputSpec> specs = {*ParseInputFlag("8:f32", "8:f32"), *ParseInputFlag("8:b8", "8:b8"),
                                  *ParseInputFlag("8:i64:0..9", "8:i64:0..9")};
  EXPECT_EQ(dice::cli::DefaultRangeHint(specs), "");
  specs.push_back(*ParseInputFlag("8:i32", "8:i32"));
  const std::string hint = dice::cli::DefaultRangeHint(specs);
  EXPECT_NE(hint.find("drawn from 0..2"), std::string::npos) << hint;
  EXPECT_NE(hint.find("8x128:i64:0..50257"), std::string::npos) << hint;
}

// Models with integer and bool inputs, written once for the suite.
class IntInputCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir("dice_int_inputs");
    std::ofstream(dir_->path() + "/make.py")
        << "import sys, torch\n"
           "d = sys.argv[1]\n"
           "class Emb(torch.nn.Module):\n"
           "    def __init__(self, vocab):\n"
           "        super().__init__()\n"
           "        self.emb = torch.nn.Embedding(vocab, 32)\n"
           "    def forward(self, ids, mask):\n"
           "        h = self.emb(ids) * mask.unsqueeze(-1).to(torch.float32)\n"
           "        return torch.relu(h * 2.0 + 1.0).sum(-1)\n"
           "torch.jit.script(Emb(100)).save(d + '/emb.pt')\n"
           "torch.jit.script(Emb(1)).save(d + '/emb1.pt')\n";
    ASSERT_EQ(std::system(("python3 '" + dir_->path() + "/make.py' '" + dir_->path() + "'").c_str()), 0);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Model(const std::string& name) { return dir_->path() + "/" + name; }
  static std::string Cache() { return " --cache " + dir_->path() + "/cache"; }
  static ScratchDir* dir_;
};
ScratchDir* IntInputCliTest::dir_ = nullptr;

TEST_F(IntInputCliTest, AnEmbeddingModelTunesAndProfilesWithTokenIdsAndAMask) {
  const std::string inputs = " --input 8x16:i64:0..100 --input 8x16:b8";
  DiceResult tune = RunDice("tune " + Model("emb.pt") + inputs + Cache());
  EXPECT_EQ(tune.code, 0) << tune.output;
  EXPECT_NE(tune.output.find("fusion group(s) formed"), std::string::npos) << tune.output;
  EXPECT_NE(tune.output.find("outputs match eager"), std::string::npos) << tune.output;
  EXPECT_EQ(tune.output.find("dice: error"), std::string::npos) << tune.output;

  DiceResult profile = RunDice("profile " + Model("emb.pt") + inputs + Cache());
  EXPECT_EQ(profile.code, 0) << profile.output;
  EXPECT_NE(profile.output.find("aten::embedding"), std::string::npos) << "left with PyTorch:\n" << profile.output;

  DiceResult i32 = RunDice("run " + Model("emb.pt") + " --input 8x16:i32:0..100 --input 8x16:bool" + Cache());
  EXPECT_EQ(i32.code, 0) << i32.output;

  DiceResult warmup = RunDice("warmup " + Model("emb.pt") + " --input 4x16:i64:0..100,4x16:b8 --input "
                              "8x16:i64:0..100,8x16:b8" + Cache());
  EXPECT_EQ(warmup.code, 0) << warmup.output;
  EXPECT_NE(warmup.output.find("0 set(s) failed"), std::string::npos) << warmup.output;
}

// Token ids beyond the vocabulary are the model's own refusal, one line;
// with the default range (0..2) on a 1-token vocabulary the line also says
// how to give the range.
TEST_F(IntInputCliTest, IdsTheModelDoesNotTakeAreOneLineWithTheRangeHintWhenNoneWasGiven) {
  DiceResult beyond = RunDice("tune " + Model("emb.pt") + " --input 8x16:i64:0..1000 --input 8x16:b8" + Cache());
  EXPECT_EQ(beyond.code, 2) << beyond.output;
  EXPECT_EQ(CountLines(beyond.output, "dice: error"), 1) << beyond.output;
  EXPECT_NE(beyond.output.find("dice: error: --input '8x16:i64:0..1000' --input '8x16:b8': the model does not run "
                               "on these inputs: RuntimeError: index out of range"),
            std::string::npos)
      << beyond.output;
  EXPECT_EQ(beyond.output.find("drawn from 0..2"), std::string::npos) << "a range was given:\n" << beyond.output;

  for (const std::string cmd : {"tune", "warmup"}) {
    const std::string inputs = cmd == "tune" ? " --input 8x16:i64 --input 8x16:b8" : " --input 8x16:i64,8x16:b8";
    DiceResult fallback = RunDice(cmd + " " + Model("emb1.pt") + inputs + Cache());
    EXPECT_EQ(fallback.code, 2) << cmd << "\n" << fallback.output;
    EXPECT_EQ(CountLines(fallback.output, "dice: error"), 1) << fallback.output;
    EXPECT_NE(fallback.output.find("index out of range"), std::string::npos) << fallback.output;
    EXPECT_NE(fallback.output.find("(integer inputs without a range are drawn from 0..2; give the values the model "
                                   "takes, e.g. 8x128:i64:0..50257)"),
              std::string::npos)
        << cmd << "\n" << fallback.output;
  }
}

TEST_F(IntInputCliTest, AMalformedIntegerSpecExitsTwoWithOneLineNamingTheFlag) {
  for (const std::string spec : {"8x16:i64:5..5", "8x16:i64:0-100", "8x16:i32:0..3000000000", "8x16:b8:0..2",
                                 "8x16:u8"}) {
    DiceResult r = RunDice("tune " + Model("emb.pt") + " --input " + spec + " --input 8x16:b8" + Cache());
    EXPECT_EQ(r.code, 2) << spec << "\n" << r.output;
    EXPECT_EQ(CountLines(r.output, "dice: error"), 1) << spec << "\n" << r.output;
    EXPECT_NE(r.output.find("dice: error: --input '" + spec + "': "), std::string::npos) << r.output;
  }
}

}  // namespace
