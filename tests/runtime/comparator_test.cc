// Tests for dice/runtime/comparator.h: verification's element-wise checks.
#include "dice/runtime/comparator.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace dice::runtime {
namespace {

using ir::DType;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> RandomFloats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint16_t> ToHalf(const std::vector<float>& v) {
  std::vector<uint16_t> out;
  for (float x : v) out.push_back(FloatToHalfBits(x));
  return out;
}

std::vector<uint16_t> ToBFloat16(const std::vector<float>& v) {
  std::vector<uint16_t> out;
  for (float x : v) out.push_back(FloatToBFloat16Bits(x));
  return out;
}

CompareResult CompareF32(const std::vector<float>& got, const std::vector<float>& ref) {
  return CompareBuffers(got.data(), ref.data(), static_cast<int64_t>(ref.size()), DType::kFloat32,
                        DType::kFloat32, Tolerance::ForDType(DType::kFloat32));
}

TEST(ToleranceTest, DefaultsFollowDesign) {
  Tolerance f32 = Tolerance::ForDType(DType::kFloat32);
  EXPECT_DOUBLE_EQ(f32.atol, 1e-4);
  EXPECT_DOUBLE_EQ(f32.rtol, 1e-4);
  for (DType d : {DType::kFloat16, DType::kBFloat16}) {
    Tolerance t = Tolerance::ForDType(d);
    EXPECT_DOUBLE_EQ(t.atol, 1e-2);
    EXPECT_DOUBLE_EQ(t.rtol, 1e-2);
  }
  Tolerance mixed = Tolerance::ForDTypes(DType::kFloat32, DType::kFloat16);
  EXPECT_DOUBLE_EQ(mixed.atol, 1e-2);
  Tolerance wide = f32.Scaled(10);
  EXPECT_DOUBLE_EQ(wide.atol, 1e-3);
  EXPECT_DOUBLE_EQ(wide.rtol, 1e-3);
}

TEST(CompareBuffersTest, AcceptsIdenticalBuffersOfEveryDType) {
  std::vector<float> v = RandomFloats(4099, 1);
  CompareResult r = CompareF32(v, v);
  EXPECT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.num_bad, 0);
  EXPECT_EQ(r.first_bad_index, -1);
  EXPECT_EQ(r.max_abs_err, 0.0);
  EXPECT_TRUE(r.reason.empty());

  std::vector<uint16_t> h = ToHalf(v);
  EXPECT_TRUE(CompareBuffers(h.data(), h.data(), 4099, DType::kFloat16, DType::kFloat16,
                             Tolerance::ForDType(DType::kFloat16)).ok);
  std::vector<uint16_t> b = ToBFloat16(v);
  EXPECT_TRUE(CompareBuffers(b.data(), b.data(), 4099, DType::kBFloat16, DType::kBFloat16,
                             Tolerance::ForDType(DType::kBFloat16)).ok);
}

TEST(CompareBuffersTest, RejectsOneElementOutsideToleranceAndNamesIt) {
  std::vector<float> ref = RandomFloats(2048, 2);
  std::vector<float> got = ref;
  got[1500] = ref[1500] + 1e-3f + 1e-4f * std::fabs(ref[1500]);
  CompareResult r = CompareF32(got, ref);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.num_bad, 1);
  EXPECT_EQ(r.first_bad_index, 1500);
  EXPECT_NEAR(r.max_abs_err, std::fabs(double(got[1500]) - ref[1500]), 1e-9);
  EXPECT_NE(r.reason.find("element 1500"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("1 of 2048"), std::string::npos) << r.reason;
}

TEST(CompareBuffersTest, ReportsFirstOfSeveralBadElements) {
  std::vector<float> ref(100, 1.0f);
  std::vector<float> got = ref;
  got[70] = 2.0f;
  got[30] = -1.0f;
  CompareResult r = CompareF32(got, ref);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.num_bad, 2);
  EXPECT_EQ(r.first_bad_index, 30);
  EXPECT_DOUBLE_EQ(r.max_abs_err, 2.0);
  EXPECT_DOUBLE_EQ(r.max_rel_err, 2.0);
}

TEST(CompareBuffersTest, AcceptsErrorInsideFloat32Tolerance) {
  std::vector<float> ref = RandomFloats(1024, 3);
  std::vector<float> got = ref;
  for (size_t i = 0; i < got.size(); ++i) {
    // Half the allowed error, alternating sign.
    double allowed = 1e-4 + 1e-4 * std::fabs(ref[i]);
    got[i] = static_cast<float>(ref[i] + (i % 2 ? 0.5 : -0.5) * allowed);
  }
  CompareResult r = CompareF32(got, ref);
  EXPECT_TRUE(r.ok) << r.reason;
  EXPECT_GT(r.max_abs_err, 0.0);
  // The same error is too much at a tolerance ten times tighter.
  EXPECT_FALSE(CompareBuffers(got.data(), ref.data(), 1024, DType::kFloat32, DType::kFloat32,
                              Tolerance::ForDType(DType::kFloat32).Scaled(0.1)).ok);
}

TEST(CompareBuffersTest, AcceptsErrorInsideHalfAndBFloat16Tolerance) {
  // f16: 1.0 (0x3C00) vs 1.0009765625 (0x3C01): off by one ulp, inside 1e-2.
  uint16_t ref_h[2] = {0x3C00, 0xC000};  // 1, -2
  uint16_t ok_h[2] = {0x3C01, 0xC001};
  uint16_t bad_h[2] = {0x3C00, 0xC080};  // -2.25: off by 0.25 > 0.01 + 0.02
  Tolerance th = Tolerance::ForDType(DType::kFloat16);
  EXPECT_TRUE(CompareBuffers(ok_h, ref_h, 2, DType::kFloat16, DType::kFloat16, th).ok);
  CompareResult rh = CompareBuffers(bad_h, ref_h, 2, DType::kFloat16, DType::kFloat16, th);
  EXPECT_FALSE(rh.ok);
  EXPECT_EQ(rh.first_bad_index, 1);

  // bf16: 1.0 (0x3F80) vs 1.0078125 (0x3F81): one ulp, inside 1e-2 + 1e-2.
  uint16_t ref_b[2] = {0x3F80, 0x4049};  // 1, 3.140625
  uint16_t ok_b[2] = {0x3F81, 0x404A};
  uint16_t bad_b[2] = {0x3F90, 0x4049};  // 1.125
  Tolerance tb = Tolerance::ForDType(DType::kBFloat16);
  EXPECT_TRUE(CompareBuffers(ok_b, ref_b, 2, DType::kBFloat16, DType::kBFloat16, tb).ok);
  CompareResult rb = CompareBuffers(bad_b, ref_b, 2, DType::kBFloat16, DType::kBFloat16, tb);
  EXPECT_FALSE(rb.ok);
  EXPECT_EQ(rb.first_bad_index, 0);
}

TEST(CompareBuffersTest, ComparesHalfOutputAgainstFloat32Reference) {
  std::vector<float> ref = RandomFloats(512, 4);
  std::vector<uint16_t> got = ToHalf(ref);  // rounding error <= 2^-11 relative
  Tolerance t = Tolerance::ForDTypes(DType::kFloat16, DType::kFloat32);
  CompareResult r = CompareBuffers(got.data(), ref.data(), 512, DType::kFloat16, DType::kFloat32, t);
  EXPECT_TRUE(r.ok) << r.reason;
  EXPECT_GT(r.max_abs_err, 0.0);
  // At float32's limits the f16 rounding is too coarse.
  EXPECT_FALSE(CompareBuffers(got.data(), ref.data(), 512, DType::kFloat16, DType::kFloat32,
                              Tolerance::ForDType(DType::kFloat32)).ok);
}

TEST(HalfConversionTest, DecodesKnownBitPatternsExactly) {
  EXPECT_EQ(HalfBitsToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfBitsToFloat(0xC000), -2.0f);
  EXPECT_EQ(HalfBitsToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(HalfBitsToFloat(0x7BFF), 65504.0f);                 // largest normal
  EXPECT_EQ(HalfBitsToFloat(0x0400), std::ldexp(1.0f, -14));    // smallest normal
  EXPECT_EQ(HalfBitsToFloat(0x0001), std::ldexp(1.0f, -24));    // smallest subnormal
  EXPECT_EQ(HalfBitsToFloat(0x03FF), std::ldexp(1023.0f, -24)); // largest subnormal
  EXPECT_EQ(HalfBitsToFloat(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(HalfBitsToFloat(0x8000)));
  EXPECT_EQ(HalfBitsToFloat(0x7C00), kInf);
  EXPECT_EQ(HalfBitsToFloat(0xFC00), -kInf);
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(0x7E00)));
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(0x7C01)));  // signalling NaN stays NaN, not Inf
}

TEST(HalfConversionTest, EncodesWithRoundToNearestEven) {
  EXPECT_EQ(FloatToHalfBits(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalfBits(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalfBits(65519.0f), 0x7BFF);  // below the halfway point to 65536
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7C00);  // halfway, rounds to even = Inf
  EXPECT_EQ(FloatToHalfBits(1e6f), 0x7C00);
  EXPECT_EQ(FloatToHalfBits(-kInf), 0xFC00);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);        // halfway to 0x0001: even is 0
  EXPECT_EQ(FloatToHalfBits(std::ldexp(3.0f, -25)), 0x0002);        // 1.5 ulp: even is 2
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3C00); // tie -> even mantissa
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(3.0f, -11)), 0x3C02); // tie -> even (up)
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(kNaN))));
  // Every finite half survives half -> float -> half.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    uint16_t bits = static_cast<uint16_t>(b);
    float f = HalfBitsToFloat(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalfBits(f), bits) << std::hex << b;
  }
}

TEST(BFloat16ConversionTest, DecodesAndEncodesKnownBitPatterns) {
  EXPECT_EQ(BFloat16BitsToFloat(0x3F80), 1.0f);
  EXPECT_EQ(BFloat16BitsToFloat(0xC040), -3.0f);
  EXPECT_EQ(BFloat16BitsToFloat(0x4049), 3.140625f);
  EXPECT_EQ(BFloat16BitsToFloat(0x7F80), kInf);
  EXPECT_EQ(BFloat16BitsToFloat(0xFF80), -kInf);
  EXPECT_EQ(BFloat16BitsToFloat(0x0001), std::ldexp(1.0f, -133));
  EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(0x7FC0)));
  EXPECT_EQ(FloatToBFloat16Bits(3.14159265f), 0x4049);
  EXPECT_EQ(FloatToBFloat16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie -> even
  EXPECT_EQ(FloatToBFloat16Bits(1.0f + std::ldexp(3.0f, -8)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(FloatToBFloat16Bits(3.4e38f), 0x7F80);                      // rounds to Inf
  EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(FloatToBFloat16Bits(kNaN))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = BFloat16BitsToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBFloat16Bits(f), b) << std::hex << b;
  }
}

TEST(CompareBuffersTest, RejectsNaNWhereReferenceIsFinite) {
  std::vector<float> ref = RandomFloats(64, 5);
  std::vector<float> got = ref;
  got[17] = kNaN;
  CompareResult r = CompareF32(got, ref);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.first_bad_index, 17);
  EXPECT_NE(r.reason.find("element 17: got nan"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("unwritten or NaN"), std::string::npos) << r.reason;
}

TEST(CompareBuffersTest, AcceptsNaNAndInfExactlyWhereReferenceHasThem) {
  std::vector<float> ref = {1.0f, kNaN, kInf, -kInf, 0.0f};
  std::vector<float> got = {1.0f, -kNaN, kInf, -kInf, 0.0f};
  CompareResult r = CompareF32(got, ref);
  EXPECT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.max_abs_err, 0.0);  // non-finite pairs are not counted as error
}

TEST(CompareBuffersTest, RejectsFiniteValueWhereReferenceIsNaN) {
  std::vector<float> ref = {1.0f, kNaN};
  std::vector<float> got = {1.0f, 0.0f};
  CompareResult r = CompareF32(got, ref);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.first_bad_index, 1);
  EXPECT_NE(r.reason.find("expected nan"), std::string::npos) << r.reason;
}

TEST(CompareBuffersTest, RejectsInfOfWrongSignOrPlacement) {
  std::vector<float> ref = {kInf, 2.0f};
  CompareResult sign = CompareF32({-kInf, 2.0f}, ref);
  EXPECT_FALSE(sign.ok);
  EXPECT_EQ(sign.first_bad_index, 0);
  EXPECT_NE(sign.reason.find("got -inf, expected inf"), std::string::npos) << sign.reason;

  CompareResult finite_for_inf = CompareF32({3.4e38f, 2.0f}, ref);
  EXPECT_FALSE(finite_for_inf.ok);

  CompareResult inf_for_finite = CompareF32({kInf, kInf}, ref);
  EXPECT_FALSE(inf_for_finite.ok);
  EXPECT_EQ(inf_for_finite.first_bad_index, 1);
}

TEST(CompareBuffersTest, RejectsPoisonedTailTheKernelDidNotWrite) {
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const int64_t n = 1024;
    const int64_t written = 1000;  // a kernel that forgets the tail
    std::vector<float> ref_f = RandomFloats(n, 6);
    std::vector<unsigned char> ref(n * ir::DTypeSize(dtype));
    std::vector<unsigned char> got(ref.size());
    for (int64_t i = 0; i < n; ++i) {
      if (dtype == DType::kFloat32) {
        std::memcpy(&ref[i * 4], &ref_f[i], 4);
      } else {
        uint16_t h = dtype == DType::kFloat16 ? FloatToHalfBits(ref_f[i]) : FloatToBFloat16Bits(ref_f[i]);
        std::memcpy(&ref[i * 2], &h, 2);
      }
    }
    PoisonBuffer(got.data(), static_cast<int64_t>(got.size()));
    for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(std::isnan(LoadElement(got.data(), i, dtype)));
    std::memcpy(got.data(), ref.data(), written * ir::DTypeSize(dtype));  // the "kernel"
    CompareResult r = CompareBuffers(got.data(), ref.data(), n, dtype, dtype, Tolerance::ForDType(dtype));
    EXPECT_FALSE(r.ok) << ir::DTypeName(dtype);
    EXPECT_EQ(r.first_bad_index, written);
    EXPECT_EQ(r.num_bad, n - written);
    EXPECT_NE(r.reason.find("element 1000: got nan"), std::string::npos) << r.reason;

    // Writing the tail too makes it pass.
    std::memcpy(got.data(), ref.data(), ref.size());
    EXPECT_TRUE(CompareBuffers(got.data(), ref.data(), n, dtype, dtype, Tolerance::ForDType(dtype)).ok);
  }
}

TEST(CompareBuffersTest, EmptyBuffersCompareOk) {
  CompareResult r = CompareBuffers(nullptr, nullptr, 0, DType::kFloat32, DType::kFloat32,
                                   Tolerance::ForDType(DType::kFloat32));
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.num_bad, 0);
}

TEST(CompareBuffersTest, RejectsNegativeCountAndNullBuffers) {
  float x = 1.0f;
  Tolerance t = Tolerance::ForDType(DType::kFloat32);
  EXPECT_FALSE(CompareBuffers(&x, &x, -1, DType::kFloat32, DType::kFloat32, t).ok);
  CompareResult r = CompareBuffers(nullptr, &x, 1, DType::kFloat32, DType::kFloat32, t);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.reason.empty());
}

TEST(CompareRepeatRunTest, RejectsRunsThatDisagree) {
  std::vector<float> first = RandomFloats(256, 7);
  std::vector<float> second = first;
  Tolerance t = Tolerance::ForDType(DType::kFloat32);
  EXPECT_TRUE(CompareRepeatRun(first.data(), second.data(), 256, DType::kFloat32, t).ok);
  second[200] += 0.5f;  // a race changed one element
  CompareResult r = CompareRepeatRun(first.data(), second.data(), 256, DType::kFloat32, t);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.first_bad_index, 200);
  EXPECT_EQ(r.reason.rfind("repeat run disagrees: element 200", 0), 0u) << r.reason;
}

TEST(CompareBuffersTest, ReadsUnalignedBuffers) {
  std::vector<float> ref = RandomFloats(33, 8);
  std::vector<unsigned char> raw(ref.size() * 4 + 1);
  std::memcpy(raw.data() + 1, ref.data(), ref.size() * 4);
  CompareResult r = CompareBuffers(raw.data() + 1, ref.data(), 33, DType::kFloat32, DType::kFloat32,
                                   Tolerance::ForDType(DType::kFloat32));
  EXPECT_TRUE(r.ok) << r.reason;
}

}  // namespace
}  // namespace dice::runtime
