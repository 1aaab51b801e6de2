// Tests for dice/generator/checkpoint.h: SDAR config parsing, safetensors
// mapping and validation, single-file and sharded checkpoints, bad input.
// Checkpoints are written here by test code in the safetensors format (and,
// when Python with torch + safetensors is available, by safetensors itself).
#include "dice/generator/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace dice::generator {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kDataDir = std::string(DICE_SOURCE_DIR) + "/tests/data";

// A tiny SDAR shape: hidden 64, 2 layers, 4 query / 2 KV heads of 16, MLP 128,
// vocabulary 300 (the mask token must lie inside it).
const char* kTinyConfig = R"({
  "architectures": ["SDARForCausalLM"], "model_type": "sdar",
  "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
  "vocab_size": 300, "max_position_embeddings": 512, "rope_theta": 1000000,
  "rms_norm_eps": 1e-06, "tie_word_embeddings": false, "block_size": 4,
  "mask_token_id": 299, "torch_dtype": "bfloat16"
})";

struct FakeTensor {
  std::string name;
  std::string dtype;  // safetensors spelling
  std::vector<int64_t> shape;
  std::string bytes;
};

size_t DtypeBytes(const std::string& dtype) { return dtype == "F32" || dtype == "I32" ? 4 : dtype == "I64" ? 8 : 2; }

// The tiny config's tensors, written out from the Hugging Face Qwen3 naming
// independently of SdarConfig::ExpectedTensors(). Norms F32, embedding F16,
// everything else BF16; random bytes from a fixed seed.
std::vector<FakeTensor> TinyTensors(bool tied = false) {
  const int64_t h = 64, q = 4 * 16, kv = 2 * 16, inter = 128, vocab = 300, hd = 16;
  std::vector<FakeTensor> t;
  t.push_back({"model.embed_tokens.weight", "F16", {vocab, h}, ""});
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.push_back({p + "input_layernorm.weight", "F32", {h}, ""});
    t.push_back({p + "post_attention_layernorm.weight", "F32", {h}, ""});
    t.push_back({p + "self_attn.q_proj.weight", "BF16", {q, h}, ""});
    t.push_back({p + "self_attn.k_proj.weight", "BF16", {kv, h}, ""});
    t.push_back({p + "self_attn.v_proj.weight", "BF16", {kv, h}, ""});
    t.push_back({p + "self_attn.o_proj.weight", "BF16", {h, q}, ""});
    t.push_back({p + "self_attn.q_norm.weight", "F32", {hd}, ""});
    t.push_back({p + "self_attn.k_norm.weight", "F32", {hd}, ""});
    t.push_back({p + "mlp.gate_proj.weight", "BF16", {inter, h}, ""});
    t.push_back({p + "mlp.up_proj.weight", "BF16", {inter, h}, ""});
    t.push_back({p + "mlp.down_proj.weight", "BF16", {h, inter}, ""});
  }
  t.push_back({"model.norm.weight", "F32", {h}, ""});
  if (!tied) t.push_back({"lm_head.weight", "BF16", {vocab, h}, ""});
  std::mt19937 rng(1234);
  for (auto& x : t) {
    size_t n = DtypeBytes(x.dtype);
    for (int64_t d : x.shape) n *= static_cast<size_t>(d);
    x.bytes.resize(n);
    for (auto& c : x.bytes) c = static_cast<char>(rng() & 0xFF);
  }
  return t;
}

// Writes `tensors` in the safetensors layout, data in the given order.
// `edit` may rewrite the header JSON before it is serialised.
void WriteSafetensors(const fs::path& path, const std::vector<FakeTensor>& tensors,
                      const std::function<void(json&)>& edit = nullptr) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  std::string data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
    data += t.bytes;
  }
  if (edit) edit(header);
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
  out << text << data;
}

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

const FakeTensor& Find(const std::vector<FakeTensor>& ts, const std::string& name) {
  for (const auto& t : ts) {
    if (t.name == name) return t;
  }
  static FakeTensor none;
  ADD_FAILURE() << "test bug: no fake tensor " << name;
  return none;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dice_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    WriteText(dir_ / "config.json", kTinyConfig);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the tiny model as two shards plus model.safetensors.index.json:
  // layer 0 and the embedding in shard 1, the rest in shard 2.
  void WriteSharded(const std::vector<FakeTensor>& ts) {
    std::vector<FakeTensor> a, b;
    json map = json::object();
    for (const auto& t : ts) {
      const bool first = t.name.rfind("model.layers.0.", 0) == 0 || t.name == "model.embed_tokens.weight";
      (first ? a : b).push_back(t);
      map[t.name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
    WriteSafetensors(dir_ / "model-00001-of-00002.safetensors", a);
    WriteSafetensors(dir_ / "model-00002-of-00002.safetensors", b);
    json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", map}};
    WriteText(dir_ / "model.safetensors.index.json", index.dump(2));
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

void ExpectBytesEqual(const Checkpoint& ck, const FakeTensor& t) {
  auto v = ck.Get(t.name);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->name, t.name);
  EXPECT_STREQ(WeightDtypeName(v->dtype), t.dtype.c_str());
  EXPECT_EQ(v->shape, t.shape);
  ASSERT_EQ(v->nbytes, t.bytes.size());
  EXPECT_EQ(0, std::memcmp(v->data, t.bytes.data(), t.bytes.size())) << t.name;
}

// ------------------------------------------------------------ config ----

TEST(SdarConfigTest, ParsesTinyConfigFields) {
  auto c = SdarConfig::Parse(kTinyConfig);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->num_hidden_layers, 2);
  EXPECT_EQ(c->num_attention_heads, 4);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->intermediate_size, 128);
  EXPECT_EQ(c->vocab_size, 300);
  EXPECT_EQ(c->max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->block_size, 4);
  EXPECT_EQ(c->mask_token_id, 299);
}

TEST(SdarConfigTest, ExpectedTensorsMatchQwen3NamingAndShapes) {
  auto c = SdarConfig::Parse(kTinyConfig);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::map<std::string, std::vector<int64_t>> got;
  for (const auto& s : c->ExpectedTensors()) got[s.name] = s.shape;
  std::map<std::string, std::vector<int64_t>> want;
  for (const auto& t : TinyTensors()) want[t.name] = t.shape;
  EXPECT_EQ(got, want);
  EXPECT_EQ(c->ExpectedTensors().size(), 2u * 11 + 3);
}

TEST(SdarConfigTest, TiedEmbeddingsDropLmHead) {
  json j = json::parse(kTinyConfig);
  j["tie_word_embeddings"] = true;
  auto c = SdarConfig::Parse(j.dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto specs = c->ExpectedTensors();
  EXPECT_EQ(specs.size(), 2u * 11 + 2);
  for (const auto& s : specs) EXPECT_NE(s.name, "lm_head.weight");
}

TEST(SdarConfigTest, DefaultsHeadDimBlockSizeAndMaskToken) {
  json j = json::parse(kTinyConfig);
  j.erase("head_dim");
  j.erase("block_size");
  j.erase("mask_token_id");
  j.erase("rope_theta");
  j["vocab_size"] = 151936;
  auto c = SdarConfig::Parse(j.dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->head_dim, 64 / 4);
  EXPECT_EQ(c->block_size, 4);
  EXPECT_EQ(c->mask_token_id, 151669);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
}

TEST(SdarConfigTest, RealSdar4BConfigGivesQwen3Shapes) {
  auto c = SdarConfig::Load(kDataDir + "/sdar/config-4b.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // Numbers as written in the file: hidden 2560, 36 layers, 32/8 heads of 128,
  // MLP 9728, vocabulary 151936, untied.
  EXPECT_EQ(c->hidden_size, 2560);
  EXPECT_EQ(c->num_hidden_layers, 36);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->block_size, 4);
  EXPECT_EQ(c->mask_token_id, 151669);
  EXPECT_FALSE(c->tie_word_embeddings);
  auto specs = c->ExpectedTensors();
  EXPECT_EQ(specs.size(), 36u * 11 + 2 + 1);
  std::map<std::string, std::vector<int64_t>> m;
  for (const auto& s : specs) m[s.name] = s.shape;
  EXPECT_EQ(m["model.embed_tokens.weight"], (std::vector<int64_t>{151936, 2560}));
  EXPECT_EQ(m["model.layers.35.self_attn.q_proj.weight"], (std::vector<int64_t>{32 * 128, 2560}));
  EXPECT_EQ(m["model.layers.35.self_attn.k_proj.weight"], (std::vector<int64_t>{8 * 128, 2560}));
  EXPECT_EQ(m["model.layers.0.self_attn.o_proj.weight"], (std::vector<int64_t>{2560, 32 * 128}));
  EXPECT_EQ(m["model.layers.7.mlp.down_proj.weight"], (std::vector<int64_t>{2560, 9728}));
  EXPECT_EQ(m["model.layers.7.self_attn.k_norm.weight"], (std::vector<int64_t>{128}));
  EXPECT_EQ(m["lm_head.weight"], (std::vector<int64_t>{151936, 2560}));
  EXPECT_EQ(m.count("model.layers.36.input_layernorm.weight"), 0u);
}

TEST(SdarConfigTest, RealSdar8BConfigGivesQwen3Shapes) {
  auto c = SdarConfig::Load(kDataDir + "/sdar/config-8b.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->num_hidden_layers, 36);
  auto specs = c->ExpectedTensors();
  EXPECT_EQ(specs.size(), 36u * 11 + 2 + 1);
  std::map<std::string, std::vector<int64_t>> m;
  for (const auto& s : specs) m[s.name] = s.shape;
  EXPECT_EQ(m["model.layers.0.self_attn.q_proj.weight"], (std::vector<int64_t>{4096, 4096}));
  EXPECT_EQ(m["model.layers.0.self_attn.v_proj.weight"], (std::vector<int64_t>{1024, 4096}));
  EXPECT_EQ(m["model.layers.0.mlp.gate_proj.weight"], (std::vector<int64_t>{12288, 4096}));
  EXPECT_EQ(m["model.norm.weight"], (std::vector<int64_t>{4096}));
}

TEST(SdarConfigTest, RejectsMissingRequiredFieldNamingIt) {
  json j = json::parse(kTinyConfig);
  j.erase("intermediate_size");
  auto c = SdarConfig::Parse(j.dump(), "dir/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("dir/config.json"), std::string::npos);
  EXPECT_NE(c.status().message().find("intermediate_size"), std::string::npos);
}

TEST(SdarConfigTest, RejectsHeadsNotMultipleOfKvHeads) {
  json j = json::parse(kTinyConfig);
  j["num_attention_heads"] = 5;
  auto c = SdarConfig::Parse(j.dump());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("num_key_value_heads"), std::string::npos);
  EXPECT_NE(c.status().message().find("config.json"), std::string::npos);
}

TEST(SdarConfigTest, RejectsNonPositiveSize) {
  json j = json::parse(kTinyConfig);
  j["num_hidden_layers"] = 0;
  auto c = SdarConfig::Parse(j.dump());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("num_hidden_layers"), std::string::npos);
}

TEST(SdarConfigTest, RejectsWrongJsonTypeAsCorrupt) {
  json j = json::parse(kTinyConfig);
  j["hidden_size"] = 64.5;
  auto c = SdarConfig::Parse(j.dump());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(c.status().message().find("hidden_size"), std::string::npos);

  j = json::parse(kTinyConfig);
  j["tie_word_embeddings"] = 1;
  c = SdarConfig::Parse(j.dump());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(c.status().message().find("tie_word_embeddings"), std::string::npos);
}

TEST(SdarConfigTest, RejectsMaskTokenOutsideVocabulary) {
  json j = json::parse(kTinyConfig);
  j.erase("mask_token_id");  // default 151669 does not fit a 300-token vocabulary
  auto c = SdarConfig::Parse(j.dump());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("mask_token_id"), std::string::npos);
}

TEST(SdarConfigTest, RejectsMalformedJson) {
  auto c = SdarConfig::Parse("{\"hidden_size\": 64,", "x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(c.status().message().find("x/config.json"), std::string::npos);
}

// ------------------------------------------------------ good weights ----

TEST_F(CheckpointTest, LoadsSingleFileAndKeepsBytes) {
  const auto ts = TinyTensors();
  WriteSafetensors(dir_ / "model.safetensors", ts);
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_TRUE(ck->Validate().ok()) << ck->Validate().ToString();
  EXPECT_EQ(ck->TensorNames().size(), ts.size());
  EXPECT_EQ(ck->config().num_hidden_layers, 2);
  ExpectBytesEqual(*ck, Find(ts, "model.embed_tokens.weight"));
  ExpectBytesEqual(*ck, Find(ts, "model.layers.1.self_attn.k_proj.weight"));
  ExpectBytesEqual(*ck, Find(ts, "model.layers.0.self_attn.q_norm.weight"));
  ExpectBytesEqual(*ck, Find(ts, "lm_head.weight"));
  // The view outlives a move of its owner (the mapping moves with it).
  auto v = ck->Get("model.norm.weight");
  ASSERT_TRUE(v.ok());
  Checkpoint moved = std::move(ck).value();
  EXPECT_EQ(0, std::memcmp(v->data, Find(ts, "model.norm.weight").bytes.data(), v->nbytes));
  EXPECT_EQ(moved.FileOf("model.norm.weight"), Path("model.safetensors"));
}

TEST_F(CheckpointTest, LoadsShardedCheckpointThroughIndex) {
  const auto ts = TinyTensors();
  WriteSharded(ts);
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_TRUE(ck->Validate().ok()) << ck->Validate().ToString();
  EXPECT_EQ(ck->FileOf("model.layers.0.mlp.up_proj.weight"), Path("model-00001-of-00002.safetensors"));
  EXPECT_EQ(ck->FileOf("model.layers.1.mlp.up_proj.weight"), Path("model-00002-of-00002.safetensors"));
  ExpectBytesEqual(*ck, Find(ts, "model.layers.0.mlp.up_proj.weight"));
  ExpectBytesEqual(*ck, Find(ts, "model.layers.1.mlp.down_proj.weight"));
  ExpectBytesEqual(*ck, Find(ts, "model.embed_tokens.weight"));
}

TEST_F(CheckpointTest, TiedCheckpointWithoutLmHeadValidates) {
  json j = json::parse(kTinyConfig);
  j["tie_word_embeddings"] = true;
  WriteText(dir_ / "config.json", j.dump());
  WriteSafetensors(dir_ / "model.safetensors", TinyTensors(/*tied=*/true));
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_TRUE(ck->Validate().ok()) << ck->Validate().ToString();
  EXPECT_EQ(ck->Get("lm_head.weight").status().code(), StatusCode::kNotFound);
}

TEST_F(CheckpointTest, SafetensorsFileReadsMetadataAndRejectsUnknownName) {
  WriteSafetensors(dir_ / "model.safetensors", TinyTensors());
  auto f = SafetensorsFile::Open(Path("model.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->TensorNames().size(), TinyTensors().size());
  auto v = f->Get("model.layers.9.mlp.up_proj.weight");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kNotFound);
  EXPECT_NE(v.status().message().find("model.layers.9.mlp.up_proj.weight"), std::string::npos);
  EXPECT_NE(v.status().message().find("model.safetensors"), std::string::npos);
}

// -------------------------------------------------------- bad weights ----

void ExpectError(const Status& st, StatusCode code, const std::vector<std::string>& mentions) {
  EXPECT_EQ(st.code(), code) << st.ToString();
  for (const auto& m : mentions) EXPECT_NE(st.message().find(m), std::string::npos) << st.ToString() << " lacks " << m;
}

TEST_F(CheckpointTest, RejectsTruncatedFileNamingFileAndTensor) {
  const auto ts = TinyTensors();  // lm_head.weight is last in the data buffer
  WriteSafetensors(dir_ / "model.safetensors", ts);
  fs::resize_file(dir_ / "model.safetensors", fs::file_size(dir_ / "model.safetensors") - 10);
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ck.ok());
  ExpectError(ck.status(), StatusCode::kCorrupt, {Path("model.safetensors"), "lm_head.weight", "truncated"});
}

TEST_F(CheckpointTest, RejectsFileShorterThanHeaderLength) {
  WriteText(dir_ / "model.safetensors", "abc");
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ck.ok());
  ExpectError(ck.status(), StatusCode::kCorrupt, {Path("model.safetensors"), "truncated"});
}

TEST_F(CheckpointTest, RejectsHeaderLengthPastEndOfFile) {
  std::string bytes(8, '\0');
  bytes[0] = '\x00';
  bytes[1] = '\x10';  // 4096-byte header in a 20-byte file
  bytes += "{\"a\":1}     ";
  WriteText(dir_ / "model.safetensors", bytes);
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ck.ok());
  ExpectError(ck.status(), StatusCode::kCorrupt, {Path("model.safetensors"), "header length 4096"});
}

TEST_F(CheckpointTest, RejectsMalformedHeaderJson) {
  std::string text = "{\"x\": {\"dtype\": ";
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>(i == 0 ? text.size() : 0));
  WriteText(dir_ / "model.safetensors", bytes + text);
  auto f = SafetensorsFile::Open(Path("model.safetensors"));
  ASSERT_FALSE(f.ok());
  ExpectError(f.status(), StatusCode::kCorrupt, {Path("model.safetensors"), "JSON"});
}

TEST_F(CheckpointTest, RejectsOffsetsThatDisagreeWithShape) {
  const std::string name = "model.layers.1.self_attn.v_proj.weight";
  WriteSafetensors(dir_ / "model.safetensors", TinyTensors(), [&](json& h) {
    h[name]["data_offsets"][1] = h[name]["data_offsets"][1].get<uint64_t>() - 2;
  });
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ck.ok());
  ExpectError(ck.status(), StatusCode::kCorrupt, {Path("model.safetensors"), name, "needs"});
}

TEST_F(CheckpointTest, RejectsOverlappingTensors) {
  const std::string name = "model.layers.0.mlp.gate_proj.weight";
  WriteSafetensors(dir_ / "model.safetensors", TinyTensors(), [&](json& h) {
    h[name]["data_offsets"][0] = h[name]["data_offsets"][0].get<uint64_t>() + 2;
    h[name]["data_offsets"][1] = h[name]["data_offsets"][1].get<uint64_t>() + 2;
  });
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ck.ok());
  ExpectError(ck.status(), StatusCode::kCorrupt, {Path("model.safetensors"), "overlaps", name});
}

TEST_F(CheckpointTest, RejectsOffsetsPastBufferAndBeginAfterEnd) {
  const std::string name = "model.norm.weight";
  WriteSafetensors(dir_ / "model.safetensors", TinyTensors(), [&](json& h) {
    h[name]["data_offsets"] = {1u << 30, (1u << 30) + 256};
  });
  auto f = SafetensorsFile::Open(Path("model.safetensors"));
  ASSERT_FALSE(f.ok());
  ExpectError(f.status(), StatusCode::kCorrupt, {Path("model.safetensors"), name, "past the data buffer"});

  WriteSafetensors(dir_ / "model.safetensors", TinyTensors(), [&](json& h) { h[name]["data_offsets"] = {300, 44}; });
  f = SafetensorsFile::Open(Path("model.safetensors"));
  ASSERT_FALSE(f.ok());
  ExpectError(f.status(), StatusCode::kCorrupt, {name, "begin > end"});
}

TEST_F(CheckpointTest, RejectsUnsupportedDtypeNamingTensor) {
  auto ts = TinyTensors();
  ts.push_back({"model.rotary_emb.position_ids", "I64", {4}, std::string(32, '\1')});
  WriteSafetensors(dir_ / "model.safetensors", ts);
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ck.ok());
  ExpectError(ck.status(), StatusCode::kUnsupported,
              {Path("model.safetensors"), "model.rotary_emb.position_ids", "I64"});
}

TEST_F(CheckpointTest, ValidateReportsMissingTensor) {
  auto ts = TinyTensors();
  const std::string name = "model.layers.1.mlp.down_proj.weight";
  ts.erase(std::remove_if(ts.begin(), ts.end(), [&](const FakeTensor& t) { return t.name == name; }), ts.end());
  WriteSafetensors(dir_ / "model.safetensors", ts);
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  ExpectError(ck->Validate(), StatusCode::kNotFound, {Path("model.safetensors"), name});
}

TEST_F(CheckpointTest, ValidateReportsShapeMismatchNamingFileAndTensor) {
  auto ts = TinyTensors();
  const std::string name = "model.layers.1.self_attn.k_norm.weight";
  for (auto& t : ts) {
    if (t.name == name) {
      t.shape = {8};  // config.json says head_dim 16
      t.bytes.resize(8 * 4);
    }
  }
  WriteSharded(ts);
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  ExpectError(ck->Validate(), StatusCode::kCorrupt,
              {Path("model-00002-of-00002.safetensors"), name, "[8]", "[16]"});
}

TEST_F(CheckpointTest, RejectsIndexNamingMissingShard) {
  WriteSharded(TinyTensors());
  fs::remove(dir_ / "model-00002-of-00002.safetensors");
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ck.ok());
  ExpectError(ck.status(), StatusCode::kNotFound,
              {Path("model.safetensors.index.json"), "model-00002-of-00002.safetensors", "holding tensor"});
}

TEST_F(CheckpointTest, RejectsIndexMappingTensorToWrongShard) {
  WriteSharded(TinyTensors());
  std::ifstream in(dir_ / "model.safetensors.index.json");
  json index = json::parse(in);
  in.close();
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
  WriteText(dir_ / "model.safetensors.index.json", index.dump());
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ck.ok());
  ExpectError(ck.status(), StatusCode::kCorrupt, {Path("model-00001-of-00002.safetensors"), "model.norm.weight"});
}

TEST_F(CheckpointTest, RejectsIndexWithoutWeightMapOrWithPathInIt) {
  WriteSharded(TinyTensors());
  WriteText(dir_ / "model.safetensors.index.json", "{\"metadata\": {}}");
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ck.ok());
  ExpectError(ck.status(), StatusCode::kCorrupt, {"model.safetensors.index.json", "weight_map"});

  WriteText(dir_ / "model.safetensors.index.json",
            R"({"weight_map": {"model.norm.weight": "../elsewhere.safetensors"}})");
  ck = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ck.ok());
  ExpectError(ck.status(), StatusCode::kCorrupt, {"model.norm.weight", "../elsewhere.safetensors"});
}

TEST_F(CheckpointTest, RejectsDirectoryWithoutWeights) {
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ck.ok());
  ExpectError(ck.status(), StatusCode::kNotFound, {"model.safetensors", "model.safetensors.index.json"});
}

TEST_F(CheckpointTest, RejectsBadConfigBeforeReadingWeights) {
  WriteSafetensors(dir_ / "model.safetensors", TinyTensors());
  WriteText(dir_ / "config.json", R"({"hidden_size": 64})");
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ck.ok());
  ExpectError(ck.status(), StatusCode::kInvalidArgument, {Path("config.json"), "num_hidden_layers"});
  fs::remove(dir_ / "config.json");
  ck = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ck.ok());
  ExpectError(ck.status(), StatusCode::kNotFound, {Path("config.json")});
}

// ------------------------------------------- written by safetensors ----

TEST_F(CheckpointTest, LoadsFileWrittenBySafetensorsLibrary) {
  if (std::system("python3 -c 'import safetensors, torch' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with torch and safetensors is not available";
  }
  // Every tiny-config tensor in bf16 (random), q_norm of layer 0 as an f32
  // arange, and the raw bytes of one bf16 tensor dumped alongside.
  const std::string script = R"PY(
import sys, torch
from safetensors.torch import save_file
out = sys.argv[1]
h, q, kv, inter, vocab, hd = 64, 64, 32, 128, 300, 16
g = torch.Generator().manual_seed(7)
t = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,), "lm_head.weight": (vocab, h)}
for i in range(2):
    p = f"model.layers.{i}."
    t.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
              p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
              p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
              p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
              p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
              p + "mlp.down_proj.weight": (h, inter)})
w = {k: torch.randn(*s, generator=g).to(torch.bfloat16) for k, s in t.items()}
w["model.layers.0.self_attn.q_norm.weight"] = torch.arange(hd, dtype=torch.float32) * 0.5
save_file(w, out + "/model.safetensors", metadata={"format": "pt"})
open(out + "/v_proj.bin", "wb").write(w["model.layers.1.self_attn.v_proj.weight"].view(torch.int16).numpy().tobytes())
)PY";
  WriteText(dir_ / "write.py", script);
  const std::string cmd = "python3 " + Path("write.py") + " " + dir_.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_TRUE(ck->Validate().ok()) << ck->Validate().ToString();

  auto qn = ck->Get("model.layers.0.self_attn.q_norm.weight");
  ASSERT_TRUE(qn.ok()) << qn.status().ToString();
  ASSERT_EQ(qn->dtype, WeightDtype::kF32);
  ASSERT_EQ(qn->nbytes, 16u * 4);
  for (int i = 0; i < 16; ++i) {
    float x;
    std::memcpy(&x, static_cast<const char*>(qn->data) + 4 * i, 4);
    EXPECT_EQ(x, 0.5f * static_cast<float>(i));
  }

  auto v = ck->Get("model.layers.1.self_attn.v_proj.weight");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->dtype, WeightDtype::kBF16);
  EXPECT_EQ(v->shape, (std::vector<int64_t>{32, 64}));
  std::ifstream in(dir_ / "v_proj.bin", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(raw.size(), v->nbytes);
  EXPECT_EQ(0, std::memcmp(raw.data(), v->data, raw.size()));
}

}  // namespace
}  // namespace dice::generator
