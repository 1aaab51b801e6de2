// The split-KV decode attention (sdar_attention.h) on CUDA (ctest label
// `gpu`; each test skips without a device): against
// at::scaled_dot_product_attention called as SdarModel::RunLayers calls it
// in the graph form (GQA folded into the query length, the block-causal mask
// BlockCausalMask(positions, 0..key_len-1) repeated per folded head) at
// SDAR-4B's head shape (32 heads, 8 KV heads, head_dim 128), batch 1 and 16,
// a step block of 4 tokens, a merged block of 8 and 16 tokens, 516 and 1000
// keys: f32 within 1e-4 absolute, bf16 and f16 within 2e-2 x max(1, |o|)
// per element (sdar_attention.h). The cache past every
// token's prefix holds NaN, so a read past it would show. Prints µs of both
// (one CUDA graph of 200 launches over 36 caches, as the 36 layers of a
// forward: the K/V do not stay in L2). Launch refuses what it cannot do.
#include <gtest/gtest.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>

#include <cmath>
#include <cstdio>

#include "dice/generator/sdar_attention.h"
#include "dice/generator/sdar_model.h"

namespace dice::generator {
namespace {

#define DICE_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine"

constexpr double kF32Tolerance = 1e-4;
constexpr double kBf16Tolerance = 2e-2;  // x max(1, |o|): 2 bf16 ulps at |o| >= 2
constexpr int64_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlock = 4;
constexpr int kLaunches = 200, kCaches = 36;

std::unique_ptr<SdarAttention> BuildFor(torch::ScalarType dtype) {
  SdarAttentionShape s;
  s.heads = kHeads, s.kv_heads = kKvHeads, s.head_dim = kHeadDim;
  s.dtype = dtype == torch::kFloat32 ? FusedDtype::kF32 : dtype == torch::kBFloat16 ? FusedDtype::kBF16
                                                                                      : FusedDtype::kF16;
  auto a = SdarAttention::Build(s, "", 0);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? std::move(*a) : nullptr;
}

// RunLayers' graph-form SDPA: q [B, L, H, D] -> o [B, L, H, D].
torch::Tensor Reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& mask) {
  const int64_t batch = q.size(0), len = q.size(1), g = kHeads / kKvHeads;
  auto folded = q.transpose(1, 2).reshape({batch, kKvHeads, g * len, kHeadDim});
  auto o = at::scaled_dot_product_attention(folded, k, v, mask.repeat({g, 1}), 0.0, /*is_causal=*/false,
                                            1.0 / std::sqrt(static_cast<double>(kHeadDim)));
  return o.reshape({batch, kHeads, len, kHeadDim}).transpose(1, 2);
}

struct Case {
  int64_t batch, len, key_len, first;  // first: position of the first query token
};

// Mean µs a call of `launch(i)` (i: the cache of the call), from one CUDA
// graph of kLaunches calls replayed once after a warm-up replay.
template <typename F>
double GraphUs(F&& launch) {
  auto stream = c10::cuda::getStreamFromPool(false, 0);
  c10::cuda::CUDAStreamGuard guard(stream);
  launch(0);  // SDPA's handles and workspaces before capture
  stream.synchronize();
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  for (int i = 0; i < kLaunches; ++i) launch(i % kCaches);
  graph.capture_end();
  graph.replay();
  at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
  start.record(stream);
  graph.replay();
  end.record(stream);
  end.synchronize();
  return start.elapsed_time(end) * 1000.0 / kLaunches;
}

// relative: the error is scaled by max(1, |want|) per element (bf16/f16).
void CheckAgainstSdpa(torch::ScalarType dtype, double tolerance, bool relative) {
  auto attn = BuildFor(dtype);
  ASSERT_NE(attn, nullptr);
  const auto opts = torch::TensorOptions().dtype(dtype).device(torch::kCUDA, 0);
  const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA, 0);
  const Case cases[] = {{1, 4, 516, 512}, {16, 4, 516, 512}, {1, 4, 1000, 600},
                        {16, 4, 1000, 996}, {1, 8, 1000, 600}, {2, 16, 516, 500}};
  for (const Case& c : cases) {
    SCOPED_TRACE("batch " + std::to_string(c.batch) + " rows " + std::to_string(c.len) + " keys " +
                 std::to_string(c.key_len) + " first " + std::to_string(c.first));
    torch::manual_seed(7);
    auto positions = torch::arange(c.first, c.first + c.len, i64);
    auto mask = BlockCausalMask(positions, torch::arange(0, c.key_len, i64), kBlock);
    const int64_t visible = std::min(c.key_len, ((c.first + c.len - 1) / kBlock + 1) * kBlock);
    auto q = torch::randn({c.batch, c.len, kHeads, kHeadDim}, opts) * 2;
    // The cache over a larger capacity; NaN past the last prefix.
    const int64_t capacity = c.key_len + 8;
    auto k = torch::randn({c.batch, kKvHeads, capacity, kHeadDim}, opts) * 2;
    auto v = torch::randn({c.batch, kKvHeads, capacity, kHeadDim}, opts);
    auto k_ref = k.narrow(2, 0, c.key_len).clone(), v_ref = v.narrow(2, 0, c.key_len).clone();
    k_ref.narrow(2, visible, c.key_len - visible).zero_();
    v_ref.narrow(2, visible, c.key_len - visible).zero_();
    k.narrow(2, visible, capacity - visible).fill_(NAN);
    v.narrow(2, visible, capacity - visible).fill_(NAN);
    auto want = Reference(q, k_ref, v_ref, mask).to(torch::kFloat32);

    const int64_t chunks = attn->DefaultChunks(c.batch, c.key_len);
    auto ws = torch::empty({attn->WorkspaceBytes(c.batch, c.len, chunks) / 4},
                           opts.dtype(torch::kFloat32));
    auto out = torch::empty({c.batch, c.len, kHeads, kHeadDim}, opts);
    auto stream = c10::cuda::getCurrentCUDAStream(0).stream();
    Status s = attn->Launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), positions.data_ptr<int64_t>(), kBlock,
                            out.data_ptr(), ws.data_ptr(), c.batch, c.len, c.key_len, capacity, chunks, stream);
    ASSERT_TRUE(s.ok()) << s.ToString();
    auto diff = (out.to(torch::kFloat32) - want).abs();
    if (relative) diff = diff / want.abs().clamp_min(1.0);
    const double err = diff.max().item<double>();
    EXPECT_LE(err, tolerance);
    EXPECT_FALSE(torch::isnan(out).any().item<bool>());

    if (c.len != 4) continue;
    // Timing over kCaches caches (as the layers of one forward).
    std::vector<torch::Tensor> ks, vs;
    for (int i = 0; i < kCaches; ++i) {
      ks.push_back(torch::randn({c.batch, kKvHeads, c.key_len, kHeadDim}, opts));
      vs.push_back(torch::randn({c.batch, kKvHeads, c.key_len, kHeadDim}, opts));
    }
    auto full = BlockCausalMask(torch::arange(c.key_len - c.len, c.key_len, i64), torch::arange(0, c.key_len, i64),
                                kBlock);
    auto last = torch::arange(c.key_len - c.len, c.key_len, i64);
    const double ours = GraphUs([&](int i) {
      (void)attn->Launch(q.data_ptr(), ks[i].data_ptr(), vs[i].data_ptr(), last.data_ptr<int64_t>(), kBlock,
                         out.data_ptr(), ws.data_ptr(), c.batch, c.len, c.key_len, c.key_len, chunks,
                         c10::cuda::getCurrentCUDAStream(0).stream());
    });
    const double sdpa = GraphUs([&](int i) { Reference(q, ks[i], vs[i], full); });
    std::printf("[split-KV attention] %s batch %lld, %lld tokens, %lld keys, %lld chunks: %.2f us (SDPA as "
                "RunLayers: %.2f us); max |err| %.3g\n",
                c10::toString(dtype), static_cast<long long>(c.batch), static_cast<long long>(c.len),
                static_cast<long long>(c.key_len), static_cast<long long>(chunks), ours, sdpa, err);
  }
}

TEST(SdarAttentionGpuTest, F32MatchesSdpaWithTheFoldedMaskWithin1e4) {
  DICE_REQUIRE_CUDA();
  CheckAgainstSdpa(torch::kFloat32, kF32Tolerance, /*relative=*/false);
}

TEST(SdarAttentionGpuTest, Bf16MatchesSdpaWithinTheDocumentedToleranceAndPrintsMicroseconds) {
  DICE_REQUIRE_CUDA();
  CheckAgainstSdpa(torch::kBFloat16, kBf16Tolerance, /*relative=*/true);
}

TEST(SdarAttentionGpuTest, F16MatchesSdpaWithinTheDocumentedTolerance) {
  DICE_REQUIRE_CUDA();
  CheckAgainstSdpa(torch::kFloat16, kBf16Tolerance, /*relative=*/true);
}

// Without positions every token sees all key_len keys (an all-true mask).
TEST(SdarAttentionGpuTest, NullPositionsAttendToEveryKey) {
  DICE_REQUIRE_CUDA();
  auto attn = BuildFor(torch::kFloat32);
  ASSERT_NE(attn, nullptr);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCUDA, 0);
  torch::manual_seed(3);
  auto q = torch::randn({3, 4, kHeads, kHeadDim}, opts);
  auto k = torch::randn({3, kKvHeads, 77, kHeadDim}, opts), v = torch::randn({3, kKvHeads, 77, kHeadDim}, opts);
  auto mask = torch::ones({4, 77}, opts.dtype(torch::kBool));
  const int64_t chunks = attn->DefaultChunks(3, 77);
  auto ws = torch::empty({attn->WorkspaceBytes(3, 4, chunks) / 4}, opts);
  auto out = torch::empty_like(q);
  ASSERT_TRUE(attn->Launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), nullptr, 0, out.data_ptr(), ws.data_ptr(), 3, 4,
                           77, 77, chunks, c10::cuda::getCurrentCUDAStream(0).stream())
                  .ok());
  EXPECT_LE((out - Reference(q, k, v, mask)).abs().max().item<double>(), kF32Tolerance);
}

TEST(SdarAttentionGpuTest, LaunchRefusesWhatTheKernelsCannotDo) {
  DICE_REQUIRE_CUDA();
  auto attn = BuildFor(torch::kBFloat16);
  ASSERT_NE(attn, nullptr);
  auto buf = torch::empty({1 << 24}, torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA, 0));
  char* p = static_cast<char*>(buf.data_ptr());
  auto launch = [&](int64_t rows, int64_t key_len, int64_t capacity, int64_t chunks, int offset) {
    return attn->Launch(p + offset, p, p, nullptr, 4, p, p, 1, rows, key_len, capacity, chunks, nullptr);
  };
  struct Bad {
    Status status;
    const char* says;
  };
  const Bad bad[] = {
      {launch(17, 100, 100, 4, 0), "17 query tokens"},
      {launch(4, 101, 100, 4, 0), "key_len 101"},
      {launch(4, 1000, 1000, 8, 0), "at most 64 keys"},
      {launch(4, 100, 100, 0, 0), "0 chunks"},
      {launch(4, 100, 100, 4, 2), "16-byte aligned"},
  };
  for (const auto& b : bad) {
    EXPECT_EQ(b.status.code(), StatusCode::kInvalidArgument) << b.says;
    EXPECT_NE(b.status.message().find(b.says), std::string::npos) << b.status.ToString();
  }
  EXPECT_GE(attn->DefaultChunks(1, 516) * kKvHeads, 2 * attn->sm_count() - kKvHeads);
  EXPECT_LE((1000 + attn->DefaultChunks(16, 1000) - 1) / attn->DefaultChunks(16, 1000), 64);
}

}  // namespace
}  // namespace dice::generator
