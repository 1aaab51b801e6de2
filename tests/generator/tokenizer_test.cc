// dice::generator::Tokenizer against reference ids from the Hugging Face tokenizer built
// from the same files (tests/data/tokenizer_fixture.json, written by
// scripts/make_tokenizer_fixture.py), plus special tokens and load errors.
#include "dice/generator/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace dice::generator {
namespace {

namespace fs = std::filesystem;

const std::string kDataDir = std::string(DICE_SOURCE_DIR) + "/tests/data";
const std::string kSdarDir = kDataDir + "/sdar";

const Tokenizer& Sdar() {
  static const Tokenizer* tok = [] {
    auto t = Tokenizer::Load(kSdarDir);
    if (!t.ok()) {
      ADD_FAILURE() << t.status().ToString();
      std::abort();
    }
    return new Tokenizer(std::move(t).value());
  }();
  return *tok;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A scratch directory with copies of (some of) the SDAR files.
class ScratchDir {
 public:
  ScratchDir() {
    path_ = fs::temp_directory_path() / ("dice_tok_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  void Copy(const std::string& name) { fs::copy_file(kSdarDir + "/" + name, path_ / name); }
  void Write(const std::string& name, const std::string& text) { std::ofstream(path_ / name, std::ios::binary) << text; }
  std::string str() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

TEST(Tokenizer, MatchesHuggingFaceReferenceOnFixture) {
  const auto fixture = nlohmann::json::parse(Slurp(kDataDir + "/tokenizer_fixture.json"));
  const auto& cases = fixture.at("cases");
  ASSERT_GE(cases.size(), 200u);
  size_t equal = 0, decoded_equal = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const std::vector<int32_t> want = c.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = Sdar().Encode(text);
    EXPECT_EQ(got, want) << "text: " << nlohmann::json(text).dump();
    equal += got == want;
    const std::string dec = Sdar().Decode(want);
    EXPECT_EQ(dec, c.at("decoded").get<std::string>()) << "text: " << nlohmann::json(text).dump();
    decoded_equal += dec == c.at("decoded").get<std::string>();
  }
  EXPECT_EQ(equal, cases.size());
  EXPECT_EQ(decoded_equal, cases.size());
  std::printf("[tokenizer] %zu/%zu strings encode equal, %zu decode equal\n", equal, cases.size(), decoded_equal);
}

TEST(Tokenizer, FixtureMetaMatchesIdsOfSpecialRoles) {
  const auto meta = nlohmann::json::parse(Slurp(kDataDir + "/tokenizer_fixture.json")).at("meta");
  EXPECT_EQ(Sdar().mask_id(), meta.at("mask_token_id").get<int32_t>());
  EXPECT_EQ(Sdar().eos_id(), meta.at("eos_token_id").get<int32_t>());
  EXPECT_EQ(Sdar().pad_id(), meta.at("pad_token_id").get<int32_t>());
  EXPECT_EQ(Sdar().vocab_size(), meta.at("vocab_size").get<int32_t>());
}

TEST(Tokenizer, MaskTokenIsAtomicAndPlainMaskIsText) {
  EXPECT_EQ(Sdar().mask_id(), 151669);
  EXPECT_EQ(Sdar().Encode("<|MASK|>"), std::vector<int32_t>{151669});
  const auto plain = Sdar().Encode("<MASK>");
  EXPECT_GT(plain.size(), 1u);
  for (int32_t id : plain) EXPECT_LT(id, 151643);
  EXPECT_EQ(Sdar().Decode(plain), "<MASK>");
  // Four masks in a row stay four tokens (a masked block of size 4).
  EXPECT_EQ(Sdar().Encode("<|MASK|><|MASK|><|MASK|><|MASK|>"), std::vector<int32_t>(4, 151669));
}

TEST(Tokenizer, ChatTemplateTokensAreAtomicAndEosSetIsQwens) {
  const auto ids = Sdar().Encode("<|im_start|>user\nhi<|im_end|>\n");
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 151644);
  EXPECT_NE(std::find(ids.begin(), ids.end(), 151645), ids.end());
  EXPECT_EQ(Sdar().Decode(ids), "<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_EQ(Sdar().eos_ids(), (std::vector<int32_t>{151643, 151645}));
  EXPECT_TRUE(Sdar().IsSpecial(151643));
  EXPECT_TRUE(Sdar().IsSpecial(151669));
  EXPECT_FALSE(Sdar().IsSpecial(151667));  // <think> is an added token, not special
  EXPECT_EQ(Sdar().TokenToId("<think>"), 151667);
}

TEST(Tokenizer, NormalisesToNfcBeforeSplitting) {
  // "e" + COMBINING ACUTE ACCENT encodes exactly as the precomposed "é".
  EXPECT_EQ(Sdar().Encode("caf\x65\xCC\x81"), Sdar().Encode("caf\xC3\xA9"));
  EXPECT_EQ(Sdar().Decode(Sdar().Encode("caf\x65\xCC\x81")), "caf\xC3\xA9");
}

TEST(Tokenizer, InvalidUtf8BecomesReplacementCharacter) {
  EXPECT_EQ(Sdar().Encode("a\xFF" "b"), Sdar().Encode("a\xEF\xBF\xBD" "b"));
}

TEST(Tokenizer, DecodeOfSplitMultibyteCharacterReplacesOnlyTheBrokenPart) {
  // The bytes of U+1F600 spread over several tokens decode whole when joined.
  const auto ids = Sdar().Encode("\xF0\x9F\x98\x80");
  EXPECT_EQ(Sdar().Decode(ids), "\xF0\x9F\x98\x80");
  std::string bytes;
  for (int32_t id : ids) bytes += Sdar().TokenBytes(id);
  EXPECT_EQ(bytes, "\xF0\x9F\x98\x80");
}

TEST(Tokenizer, EncodesVeryLongWordsAndRoundTrips) {
  // One pre-tokenizer word of 200k bytes: a quadratic BPE would not finish.
  for (const std::string& text : {std::string(200000, 'a'), std::string(200000, '='), std::string(100000, ' ') + "x"}) {
    const auto ids = Sdar().Encode(text);
    EXPECT_LT(ids.size(), text.size() / 2);
    EXPECT_EQ(Sdar().Decode(ids), text);
  }
}

TEST(Tokenizer, LoadFailsOnMissingDirectoryNamingTheFile) {
  auto t = Tokenizer::Load("/nonexistent/dice/tokenizer");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("vocab.json"), std::string::npos) << t.status().ToString();
}

TEST(Tokenizer, LoadFailsOnTruncatedVocabJson) {
  ScratchDir d;
  d.Write("vocab.json", Slurp(kSdarDir + "/vocab.json").substr(0, 100000));
  d.Copy("merges.txt");
  d.Copy("tokenizer_config.json");
  auto t = Tokenizer::Load(d.str());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(t.status().message().find("vocab.json"), std::string::npos) << t.status().ToString();
}

TEST(Tokenizer, LoadFailsOnMalformedMergesLineNamingTheLine) {
  ScratchDir d;
  d.Copy("vocab.json");
  d.Copy("tokenizer_config.json");
  d.Write("merges.txt", "#version: 0.2\n\xC4\xA0 \xC4\xA0\nnospace\n");
  auto t = Tokenizer::Load(d.str());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(t.status().message().find("merges.txt:3"), std::string::npos) << t.status().ToString();
}

TEST(Tokenizer, LoadFailsOnMergeOfUnknownToken) {
  ScratchDir d;
  d.Copy("vocab.json");
  d.Copy("tokenizer_config.json");
  d.Write("merges.txt", "#version: 0.2\nzzqqxx_not_a_token yy\n");
  auto t = Tokenizer::Load(d.str());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("merges.txt:2"), std::string::npos) << t.status().ToString();
}

TEST(Tokenizer, LoadFailsOnMissingConfig) {
  ScratchDir d;
  d.Copy("vocab.json");
  d.Copy("merges.txt");
  auto t = Tokenizer::Load(d.str());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("tokenizer_config.json"), std::string::npos) << t.status().ToString();
}

TEST(Tokenizer, HonoursLstripAndRstripFlagsFromTokenizerJson) {
  // A tokenizer.json added token with lstrip/rstrip swallows the whitespace around it.
  ScratchDir d;
  d.Copy("vocab.json");
  d.Copy("merges.txt");
  d.Copy("tokenizer_config.json");
  d.Write("tokenizer.json", R"({"added_tokens": [{"id": 151670, "content": "<|hole|>", "lstrip": true,
      "rstrip": true, "normalized": false, "special": true, "single_word": false}]})");
  auto t = Tokenizer::Load(d.str());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->vocab_size(), 151671);
  EXPECT_EQ(t->Encode("a  <|hole|>  b"), (std::vector<int32_t>{t->Encode("a")[0], 151670, t->Encode("b")[0]}));
}

}  // namespace
}  // namespace dice::generator
