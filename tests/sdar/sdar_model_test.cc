// Tests for dice/generator/sdar_model.h: the SDAR/Qwen3 decoder against the
// plain-PyTorch reference (tests/generator/sdar_reference.py), the KV-cached
// incremental forward against the full-sequence forward, the block-causal
// attention pattern, dtype conversion on load, and bad input.
#include "dice/generator/sdar_model.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <fstream>

#include <string>
#include <vector>

#include "sdar_reference_fixture.h"

namespace dice::generator {
namespace {

using dice::testing::SdarReferenceDir;
using dice::testing::SdarReferenceForwardIds;
using dice::testing::SdarReferenceJson;
using dice::testing::SdarReferenceTensor;

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat32) - b.to(torch::kFloat32)).abs().max().item<double>();
}

class SdarModelTest : public dice::testing::SdarF32ReferenceTest {};

TEST_F(SdarModelTest, FullSequenceForwardMatchesPythonReference) {
  auto ids = SdarReferenceForwardIds();  // [2, 11]: two whole blocks and a partial one
  auto ref = SdarReferenceTensor("logits_f32");
  ASSERT_TRUE(ref.defined());
  auto logits = model_->Forward(ids);
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  ASSERT_EQ(logits->sizes(), ref.sizes());
  EXPECT_EQ(logits->scalar_type(), torch::kFloat32);
  EXPECT_GT(ref.abs().max().item<double>(), 1.0);  // the logits are not all near zero
  const double err = MaxAbsDiff(*logits, ref);
  std::printf("f32 max |logit - reference| = %.3g (max |logit| %.3g)\n", err, ref.abs().max().item<double>());
  EXPECT_LT(err, 1e-4);
}

TEST_F(SdarModelTest, KvCachedBlockByBlockForwardMatchesFullForward) {
  auto ids = SdarReferenceForwardIds();
  auto full = model_->Forward(ids);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  auto ref = SdarReferenceTensor("logits_f32");
  // Commit block 0 and block 1 one at a time, then score the partial block 2
  // without committing (a denoising step), twice: scratch slots are reused.
  auto cache = model_->NewCache(2, 12);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  for (int64_t start : {0, 4}) {
    auto part = model_->Forward(ids.narrow(1, start, 4), &*cache, /*commit=*/true);
    ASSERT_TRUE(part.ok()) << part.status().ToString();
    EXPECT_LT(MaxAbsDiff(*part, full->narrow(1, start, 4)), 1e-5) << "block at " << start;
    EXPECT_LT(MaxAbsDiff(*part, ref.narrow(1, start, 4)), 1e-4) << "block at " << start;
  }
  EXPECT_EQ(cache->length(), 8);
  for (int rep = 0; rep < 2; ++rep) {
    auto tail = model_->Forward(ids.narrow(1, 8, 3), &*cache, /*commit=*/false);
    ASSERT_TRUE(tail.ok()) << tail.status().ToString();
    EXPECT_LT(MaxAbsDiff(*tail, full->narrow(1, 8, 3)), 1e-5);
    EXPECT_LT(MaxAbsDiff(*tail, ref.narrow(1, 8, 3)), 1e-4);
    EXPECT_EQ(cache->length(), 8);
  }
}

TEST_F(SdarModelTest, PrefillOfSeveralBlocksUsesTheBlockCausalMask) {
  auto ids = SdarReferenceForwardIds();
  auto full = model_->Forward(ids);
  ASSERT_TRUE(full.ok());
  auto cache = model_->NewCache(2, 12);
  ASSERT_TRUE(cache.ok());
  auto pre = model_->Forward(ids.narrow(1, 0, 8), &*cache, /*commit=*/true);  // two blocks in one pass
  ASSERT_TRUE(pre.ok()) << pre.status().ToString();
  EXPECT_LT(MaxAbsDiff(*pre, full->narrow(1, 0, 8)), 1e-5);
  auto tail = model_->Forward(ids.narrow(1, 8, 3), &*cache);
  ASSERT_TRUE(tail.ok());
  EXPECT_LT(MaxAbsDiff(*tail, full->narrow(1, 8, 3)), 1e-5);
}

TEST_F(SdarModelTest, TokensSeeTheirWholeBlockButNoLaterBlock) {
  auto ids = SdarReferenceForwardIds().narrow(0, 0, 1).clone();
  auto base = model_->Forward(ids);
  ASSERT_TRUE(base.ok());
  auto changed = ids.clone();
  changed[0][9] = (changed[0][9].item<int64_t>() + 1) % 200;  // a token of block 2 (positions 8..11)
  auto after = model_->Forward(changed);
  ASSERT_TRUE(after.ok());
  // Blocks 0 and 1 cannot see block 2: bit-identical logits.
  EXPECT_EQ(MaxAbsDiff(base->narrow(1, 0, 8), after->narrow(1, 0, 8)), 0.0);
  // Position 8 comes before 9 but shares its block: it sees the change.
  EXPECT_GT(MaxAbsDiff(base->narrow(1, 8, 1), after->narrow(1, 8, 1)), 1e-3);
}

TEST(SdarModelLoadTest, TiedBf16CheckpointMatchesReferenceInFloat32) {
  ASSERT_FALSE(SdarReferenceDir().empty());
  auto model = SdarModel::Load(SdarReferenceDir() + "/bf16");  // tied, BF16 weights, f32 compute
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_TRUE(model->config().tie_word_embeddings);
  auto logits = model->Forward(SdarReferenceForwardIds());
  ASSERT_TRUE(logits.ok());
  auto ref = SdarReferenceTensor("logits_bf16");
  ASSERT_TRUE(ref.defined());
  EXPECT_LT(MaxAbsDiff(*logits, ref), 1e-4);
}

TEST(SdarModelLoadTest, Bfloat16ComputeStaysCloseToFloat32) {
  ASSERT_FALSE(SdarReferenceDir().empty());
  SdarModelOptions opts;
  opts.dtype = torch::kBFloat16;
  auto model = SdarModel::Load(SdarReferenceDir() + "/f32", opts);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto logits = model->Forward(SdarReferenceForwardIds());
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  EXPECT_EQ(logits->scalar_type(), torch::kFloat32);
  auto ref = SdarReferenceTensor("logits_f32");
  const double scale = ref.abs().max().item<double>();
  const double err = MaxAbsDiff(*logits, ref);
  std::printf("bf16 compute: max |logit - f32 reference| = %.3g (max |logit| %.3g)\n", err, scale);
  EXPECT_GT(err, 0.0);                // it really computed in bfloat16
  EXPECT_LT(err, 0.05 * scale) << "max |logit| " << scale;  // bf16 has 8 mantissa bits
}

TEST_F(SdarModelTest, RejectsBadIdsNamingTheProblem) {
  auto bad = torch::full({1, 4}, 256, torch::kLong);  // vocabulary is 256
  auto r = model_->Forward(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("token id 256 outside the vocabulary [0, 256)"), std::string::npos)
      << r.status().message();
  auto as_float = model_->Forward(torch::zeros({1, 4}));
  ASSERT_FALSE(as_float.ok());
  EXPECT_NE(as_float.status().message().find("2-D integer"), std::string::npos);
  auto one_d = model_->Forward(torch::zeros({4}, torch::kLong));
  EXPECT_FALSE(one_d.ok());
}

TEST_F(SdarModelTest, RejectsCacheMisuse) {
  auto cache = model_->NewCache(1, 8);
  ASSERT_TRUE(cache.ok());
  auto ids = torch::zeros({1, 3}, torch::kLong);
  auto partial_commit = model_->Forward(ids, &*cache, /*commit=*/true);
  ASSERT_FALSE(partial_commit.ok());
  EXPECT_NE(partial_commit.status().message().find("whole"), std::string::npos);
  EXPECT_EQ(cache->length(), 0);
  auto wrong_batch = model_->Forward(torch::zeros({2, 4}, torch::kLong), &*cache);
  ASSERT_FALSE(wrong_batch.ok());
  EXPECT_NE(wrong_batch.status().message().find("batch"), std::string::npos);
  auto too_long = model_->Forward(torch::zeros({1, 12}, torch::kLong), &*cache);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("capacity"), std::string::npos);
  auto beyond_context = model_->NewCache(1, 513);  // max_position_embeddings 512
  ASSERT_FALSE(beyond_context.ok());
  EXPECT_NE(beyond_context.status().message().find("context of 512"), std::string::npos);
}

TEST_F(SdarModelTest, SelectBatchKeepsTheChosenRows) {
  auto ids = SdarReferenceForwardIds();
  auto cache = model_->NewCache(2, 12);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE(model_->Forward(ids.narrow(1, 0, 8), &*cache, true).ok());
  ASSERT_TRUE(cache->SelectBatch(torch::tensor({1}, torch::kLong)).ok());
  EXPECT_EQ(cache->batch(), 1);
  auto tail = model_->Forward(ids.narrow(0, 1, 1).narrow(1, 8, 3), &*cache);
  ASSERT_TRUE(tail.ok()) << tail.status().ToString();
  auto full = model_->Forward(ids);
  EXPECT_LT(MaxAbsDiff(*tail, full->narrow(0, 1, 1).narrow(1, 8, 3)), 1e-5);
  EXPECT_FALSE(cache->SelectBatch(torch::tensor({3}, torch::kLong)).ok());
}

TEST(SdarModelLoadTest, MissingWeightsAndMissingDeviceAreClearErrors) {
  ASSERT_FALSE(SdarReferenceDir().empty());
  // A config without weights (cleaned up with unlink/rmdir: LibTorch's
  // exported std::filesystem::remove_all must not be used here).
  char tmpl[] = "/tmp/dice_sdar_noweights_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    std::ifstream src(SdarReferenceDir() + "/f32/config.json");
    std::ofstream(dir + "/config.json") << src.rdbuf();
  }
  auto none = SdarModel::Load(dir);
  ::unlink((dir + "/config.json").c_str());
  ::rmdir(dir.c_str());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("model.safetensors"), std::string::npos) << none.status().message();
  if (!torch::cuda::is_available()) {
    SdarModelOptions opts;
    opts.device = torch::Device(torch::kCUDA, 0);
    auto gpu = SdarModel::Load(SdarReferenceDir() + "/f32", opts);
    ASSERT_FALSE(gpu.ok());
    EXPECT_EQ(gpu.status().code(), StatusCode::kNoDevice);
  }
  SdarModelOptions int_opts;
  int_opts.dtype = torch::kInt32;
  auto ints = SdarModel::Load(SdarReferenceDir() + "/f32", int_opts);
  ASSERT_FALSE(ints.ok());
  EXPECT_EQ(ints.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dice::generator
