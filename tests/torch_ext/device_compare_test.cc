// CompareTensors (ATen, runs on the GPU in the worker) must agree with
// CompareBuffers (the host specification) element for element. Run here on
// CPU tensors: the ATen code is device-independent.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "dice/core/ir_builder.h"
#include "dice/reference/device_compare.h"
#include "dice/reference/reference_executor.h"

namespace dice::reference {
namespace {

runtime::CompareResult Host(const at::Tensor& got, const at::Tensor& ref, runtime::Tolerance tol) {
  auto g = got.contiguous(), r = ref.contiguous();
  return runtime::CompareBuffers(g.data_ptr(), r.data_ptr(), g.numel(), *FromScalarType(g.scalar_type()),
                        *FromScalarType(r.scalar_type()), tol);
}

void ExpectSameVerdict(const at::Tensor& got, const at::Tensor& ref, runtime::Tolerance tol) {
  const runtime::CompareResult d = CompareTensors(got, ref, tol);
  const runtime::CompareResult h = Host(got, ref, tol);
  EXPECT_EQ(d.ok, h.ok) << "device: " << d.reason << "\nhost: " << h.reason;
  EXPECT_EQ(d.num_bad, h.num_bad);
  EXPECT_EQ(d.first_bad_index, h.first_bad_index);
}

TEST(DeviceCompareTest, AgreesWithHostComparatorOnRandomPerturbations) {
  at::manual_seed(7);
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    const runtime::Tolerance tol = runtime::Tolerance::ForDType(*FromScalarType(dtype));
    at::Tensor ref = at::randn({64, 129}).to(dtype);
    // Errors around the tolerance boundary: some pass, some fail.
    at::Tensor noise = at::randn({64, 129}) * (tol.atol * 3);
    at::Tensor got = (ref.to(at::kFloat) + noise).to(dtype);
    ExpectSameVerdict(got, ref, tol);
    ExpectSameVerdict(ref.clone(), ref, tol);
  }
}

TEST(DeviceCompareTest, RejectsUnwrittenPoisonedTailAndNamesFirstElement) {
  at::Tensor ref = at::randn({1000});
  at::Tensor got = ref.clone();
  got.slice(0, 990).fill_(std::numeric_limits<float>::quiet_NaN());
  const runtime::CompareResult d = CompareTensors(got, ref, runtime::Tolerance::ForDType(ir::DType::kFloat32));
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.num_bad, 10);
  EXPECT_EQ(d.first_bad_index, 990);
  EXPECT_NE(d.reason.find("element 990"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("unwritten or NaN"), std::string::npos) << d.reason;
  ExpectSameVerdict(got, ref, runtime::Tolerance::ForDType(ir::DType::kFloat32));
}

TEST(DeviceCompareTest, NanAndInfMustMatchPlacementAndSign) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  at::Tensor ref = at::tensor({1.0f, nan, inf, -inf, 2.0f});
  EXPECT_TRUE(CompareTensors(ref.clone(), ref, {1e-4, 1e-4}).ok);
  for (int i = 0; i < 5; ++i) {
    at::Tensor got = ref.clone();
    got[i] = (i == 1) ? 0.0f : (i == 2 ? -inf : (i == 3 ? inf : nan));
    const runtime::CompareResult d = CompareTensors(got, ref, {1e-4, 1e-4});
    EXPECT_FALSE(d.ok) << i;
    EXPECT_EQ(d.first_bad_index, i);
    ExpectSameVerdict(got, ref, {1e-4, 1e-4});
  }
}

TEST(DeviceCompareTest, ReportsShapeMismatchAndAcceptsEmpty) {
  EXPECT_FALSE(CompareTensors(at::zeros({2, 3}), at::zeros({3, 2}), {1e-4, 1e-4}).ok);
  EXPECT_TRUE(CompareTensors(at::zeros({0, 3}), at::zeros({0, 3}), {1e-4, 1e-4}).ok);
}

}  // namespace
}  // namespace dice::reference

namespace dice::reference {
namespace {
TEST(DeviceCompareTest, SlackAdmitsAnswersAsAccurateAsPyTorchAndNothingWorse) {
  // A sum with heavy cancellation: PyTorch's float32 result carries its own
  // rounding error; a kernel that is closer to the exact value must pass.
  at::manual_seed(3);
  at::Tensor x = at::randn({1 << 20});
  at::Tensor ref = x.sum();
  at::Tensor ref64 = x.to(at::kDouble).sum();
  at::Tensor exact = ref64.to(at::kFloat);
  const runtime::Tolerance tight{1e-12, 1e-12};
  ASSERT_NE(exact.item<float>(), ref.item<float>()) << "seed gives no rounding difference; pick another";
  EXPECT_FALSE(CompareTensors(exact, ref, tight).ok);
  const at::Tensor slack = ReferenceErrorSlack(ref, ref64);
  EXPECT_TRUE(CompareTensors(exact, ref, tight, &slack).ok);
  EXPECT_FALSE(CompareTensors(ref + 1.0, ref, runtime::Tolerance::ForDType(ir::DType::kFloat32), &slack).ok);
}
}  // namespace
}  // namespace dice::reference

namespace dice::reference {
namespace {
TEST(DeviceCompareTest, ChunkedComparisonGivesTheSameResultForAnyChunkSize) {
  at::manual_seed(11);
  at::Tensor ref = at::randn({37, 41});
  at::Tensor got = ref + at::randn({37, 41}) * 3e-4;  // some elements fail, some pass
  got[5][7] = std::numeric_limits<float>::quiet_NaN();
  const at::Tensor slack = at::rand({37, 41}) * 1e-4;
  const runtime::Tolerance tol = runtime::Tolerance::ForDType(ir::DType::kFloat32);
  const runtime::CompareResult whole = CompareTensors(got, ref, tol, &slack);
  ASSERT_FALSE(whole.ok);
  for (int64_t chunk : {1, 7, 64, 1000, 1 << 20}) {
    const runtime::CompareResult c = CompareTensorsChunked(got, ref, tol, &slack, chunk);
    EXPECT_EQ(c.ok, whole.ok) << chunk;
    EXPECT_EQ(c.num_bad, whole.num_bad) << chunk;
    EXPECT_EQ(c.first_bad_index, whole.first_bad_index) << chunk;
    EXPECT_DOUBLE_EQ(c.max_abs_err, whole.max_abs_err) << chunk;
    EXPECT_EQ(c.reason, whole.reason) << chunk;
  }
}

// The worker's guard against candidates that write into the shared trial
// data (tune_session.cc ChangedTrialData) rests on this fingerprint.
TEST(DeviceCompareTest, StorageFingerprintSeesAnyChangedWordOfTheStorage) {
  at::manual_seed(3);
  at::Tensor x = at::randn({1000});
  const StorageFingerprint f = FingerprintStorage(x);
  EXPECT_EQ(FingerprintStorage(x), f);
  EXPECT_EQ(FingerprintStorage(x.clone()), f);
  at::Tensor y = x.clone();
  y[500] = std::nextafter(y[500].item<float>(), 1e9f);  // one ulp
  EXPECT_NE(FingerprintStorage(y), f);
  y = x.clone();
  y[0] = -y[0];  // only the sign bit: the high half
  EXPECT_NE(FingerprintStorage(y), f);

  // A strided view: a write into a gap or the offset in front of it, which the
  // view itself never shows, changes the fingerprint of the view.
  at::Tensor buf = at::randn({2 + 8 * 3});
  at::Tensor view = buf.as_strided({8}, {3}, 2);
  const StorageFingerprint fv = FingerprintStorage(view);
  buf[0] = 42.0f;
  EXPECT_NE(FingerprintStorage(view), fv);
  const StorageFingerprint fv2 = FingerprintStorage(view);
  buf[4] = 7.0f;  // between view elements 0 (index 2) and 1 (index 5)
  EXPECT_NE(FingerprintStorage(view), fv2);

  // Sizes that are not whole 32-bit words (6 bytes of half) are summed as bytes.
  at::Tensor h = at::randn({3}).to(at::kHalf);
  const StorageFingerprint fh = FingerprintStorage(h);
  h[2] = 0.5f;
  EXPECT_NE(FingerprintStorage(h), fh);

  // More than one chunk (2^22 words): the last word still counts.
  at::Tensor big = at::zeros({(1 << 22) + 5});
  const StorageFingerprint fb = FingerprintStorage(big);
  big[(1 << 22) + 4] = 1.0f;
  EXPECT_NE(FingerprintStorage(big), fb);

  // The documented blind spot: a permutation of whole words keeps it.
  EXPECT_EQ(FingerprintStorage(x.flip(0).contiguous()), f);
}
}  // namespace
}  // namespace dice::reference

namespace dice::reference {
namespace {
TEST(DeviceCompareTest, NormwiseSlackAdmitsAnotherGemmSummationOrderAndRejectsAWrongEpilogue) {
  // randn x 10 operands: outputs of size ~sqrt(K) * 100 with many cancelled
  // ones, as in the worker's random trials.
  at::manual_seed(5);
  const int64_t K = 1024;
  at::Tensor x = at::randn({256, K}) * 10, w = at::randn({512, K}) * 10;
  at::Tensor ref = at::relu(at::linear(x, w));
  at::Tensor ref64 = at::relu(at::linear(x.to(at::kDouble), w.to(at::kDouble)));
  // Another summation order: two half-K products added.
  at::Tensor split = at::relu(at::linear(x.narrow(1, 0, K / 2), w.narrow(1, 0, K / 2)) +
                              at::linear(x.narrow(1, K / 2, K / 2), w.narrow(1, K / 2, K / 2)));
  const runtime::Tolerance tol = runtime::Tolerance::ForDType(ir::DType::kFloat32);
  const at::Tensor normwise = NormwiseErrorSlack(ref, ref64);
  EXPECT_EQ(normwise.sizes(), ref.sizes());
  EXPECT_TRUE(CompareTensors(split, ref, tol, &normwise).ok);
  // Dropping the relu, or an error far above PyTorch's own, still fails.
  at::Tensor no_relu = at::linear(x, w);
  EXPECT_FALSE(CompareTensors(no_relu, ref, tol, &normwise).ok);
  EXPECT_FALSE(CompareTensors(ref + 1.0, ref, tol, &normwise).ok);
}

// The rule of which outputs get the float64 second opinion, on small graphs.
TEST(DeviceCompareTest, SecondOpinionRuleByGroupKindAndDtype) {
  ir::GraphBuilder chain;  // x * c + y * s: four rounding points in PyTorch's bf16
  const int x = chain.Input(ir::DType::kBFloat16, 2), c = chain.Input(ir::DType::kBFloat16, 2);
  const int y = chain.Input(ir::DType::kBFloat16, 2), sn = chain.Input(ir::DType::kBFloat16, 2);
  chain.Output(chain.Op(ir::OpKind::kAdd, {chain.Op(ir::OpKind::kMul, {x, c}), chain.Op(ir::OpKind::kMul, {y, sn})}));
  ir::GraphBuilder one;  // relu(x) with a constant that is not an op: one rounding point
  const int in = one.Input(ir::DType::kBFloat16, 2);
  one.Const(2.0);
  one.Output(one.Op(ir::OpKind::kRelu, {in}));
  ir::GraphBuilder gemm;
  const int a = gemm.Input(ir::DType::kFloat32, 2), w = gemm.Input(ir::DType::kFloat32, 2);
  gemm.Output(gemm.Op(ir::OpKind::kRelu, {gemm.Op(ir::OpKind::kLinear, {a, w})}));

  EXPECT_EQ(SecondOpinionFor(chain.g, ir::DType::kBFloat16, 4096, 4096), SecondOpinion::kElementwise);
  EXPECT_EQ(SecondOpinionFor(chain.g, ir::DType::kFloat16, 4096, 4096), SecondOpinion::kElementwise);
  EXPECT_EQ(SecondOpinionFor(chain.g, ir::DType::kFloat32, 4096, 4096), SecondOpinion::kNone);
  EXPECT_EQ(SecondOpinionFor(one.g, ir::DType::kBFloat16, 4096, 4096), SecondOpinion::kNone);
  EXPECT_EQ(SecondOpinionFor(one.g, ir::DType::kFloat32, 512, 4096), SecondOpinion::kElementwise);  // a reduction's size
  EXPECT_EQ(SecondOpinionFor(gemm.g, ir::DType::kFloat32, 4096, 4096), SecondOpinion::kNormwise);
  EXPECT_EQ(SecondOpinionFor(gemm.g, ir::DType::kBFloat16, 64, 4096), SecondOpinion::kNormwise);
}

// A bf16 chain computed in float32 and rounded once (what a fused kernel and
// Inductor do) differs from PyTorch's op-by-op rounding by a few ulp where
// the terms cancel (the SDAR decoder's q/k RMSNorm + RoPE group on the H100:
// 1-5 of ~10^6 elements past the 1e-2 limit). The element-wise second opinion
// admits it; a wrong sign or a 5% error where nothing cancels still fails.
TEST(DeviceCompareTest, ElementwiseSlackAdmitsABfloat16ChainRoundedOnceAndRejectsWrongOnes) {
  at::manual_seed(11);
  at::Tensor x = (at::randn({1024, 1024}) * 10).to(at::kBFloat16), y = (at::randn({1024, 1024}) * 10).to(at::kBFloat16);
  at::Tensor c = at::rand({1024, 1024}).to(at::kBFloat16), sn = at::rand({1024, 1024}).to(at::kBFloat16);
  const at::Tensor ref = x * c + y * sn;  // bf16 ops: each product and the sum rounded
  const at::Tensor ref64 = x.to(at::kDouble) * c.to(at::kDouble) + y.to(at::kDouble) * sn.to(at::kDouble);
  const at::Tensor fused = (x.to(at::kFloat) * c.to(at::kFloat) + y.to(at::kFloat) * sn.to(at::kFloat)).to(at::kBFloat16);
  const runtime::Tolerance tol = runtime::Tolerance::ForDType(ir::DType::kBFloat16);
  const at::Tensor slack = ReferenceErrorSlack(ref, ref64);

  const runtime::CompareResult plain = CompareTensors(fused, ref, tol);
  EXPECT_FALSE(plain.ok) << "the seed no longer shows the cancellation this test is about";
  EXPECT_GT(plain.num_bad, 0);
  const runtime::CompareResult with_slack = CompareTensors(fused, ref, tol, &slack);
  EXPECT_TRUE(with_slack.ok) << with_slack.reason;

  EXPECT_FALSE(CompareTensors((x * c - y * sn), ref, tol, &slack).ok);
  at::Tensor off = fused.clone();
  const int64_t big = ref.abs().flatten().argmax().item<int64_t>();
  off.view({-1})[big] = (off.view({-1})[big].to(at::kFloat) * 1.05).to(at::kBFloat16);
  const runtime::CompareResult r = CompareTensors(off, ref, tol, &slack);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.first_bad_index, big);
}

}  // namespace
}  // namespace dice::reference
