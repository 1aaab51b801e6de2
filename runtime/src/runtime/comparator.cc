// Host-side output comparison (see dice/runtime/comparator.h).
#include "dice/runtime/comparator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace dice::runtime {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Loads element i of a buffer of T-encoded values; memcpy keeps unaligned
// host pointers legal.
struct LoadF32 {
  double operator()(const unsigned char* p, int64_t i) const {
    float f;
    std::memcpy(&f, p + i * 4, 4);
    return f;
  }
};
struct LoadF16 {
  double operator()(const unsigned char* p, int64_t i) const {
    uint16_t h;
    std::memcpy(&h, p + i * 2, 2);
    return HalfBitsToFloat(h);
  }
};
struct LoadBF16 {
  double operator()(const unsigned char* p, int64_t i) const {
    uint16_t h;
    std::memcpy(&h, p + i * 2, 2);
    return BFloat16BitsToFloat(h);
  }
};

// "nan" for any NaN (glibc would print the poison pattern as "-nan"),
// "inf"/"-inf", else 7 significant digits (float precision, readable).
std::string FormatValue(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.7g", v);
  return buf;
}

std::string FormatShort(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

// Why element (g, r) fails, or "" when it passes.
std::string ElementFailure(double g, double r, const Tolerance& tol) {
  if (std::isnan(r)) {
    return std::isnan(g) ? std::string() : "(reference is NaN here)";
  }
  if (std::isinf(r)) {
    if (g == r) return std::string();
    if (std::isnan(g)) return "(unwritten or NaN; reference is Inf)";
    return std::isinf(g) ? "(Inf of the wrong sign)" : "(reference is Inf here)";
  }
  if (std::isnan(g)) return "(unwritten or NaN)";
  if (std::isinf(g)) return "(Inf where the reference is finite)";
  double err = std::fabs(g - r);
  double limit = tol.atol + tol.rtol * std::fabs(r);
  if (err <= limit) return std::string();
  return "(|err| " + FormatShort(err) + " > atol " + FormatShort(tol.atol) + " + rtol " +
         FormatShort(tol.rtol) + " * |ref|)";
}

template <typename LoadGot, typename LoadRef>
CompareResult CompareTyped(const unsigned char* got, const unsigned char* ref, int64_t numel,
                           const Tolerance& tol) {
  LoadGot load_got;
  LoadRef load_ref;
  CompareResult res;
  std::string first_reason;
  for (int64_t i = 0; i < numel; ++i) {
    double g = load_got(got, i);
    double r = load_ref(ref, i);
    bool both_finite = std::isfinite(g) && std::isfinite(r);
    double err = both_finite ? std::fabs(g - r) : 0.0;
    if (both_finite) {
      res.max_abs_err = std::max(res.max_abs_err, err);
      if (r != 0) res.max_rel_err = std::max(res.max_rel_err, err / std::fabs(r));
    }
    // Fast path: a finite pair inside tolerance.
    if (both_finite && err <= tol.atol + tol.rtol * std::fabs(r)) continue;
    std::string why = ElementFailure(g, r, tol);
    if (why.empty()) continue;  // matching NaN / Inf
    if (res.num_bad == 0) {
      res.first_bad_index = i;
      first_reason = "element " + std::to_string(i) + ": got " + FormatValue(g) + ", expected " +
                     FormatValue(r) + " " + why;
    }
    ++res.num_bad;
  }
  if (res.num_bad > 0) {
    res.ok = false;
    res.reason = first_reason + "; " + std::to_string(res.num_bad) + " of " + std::to_string(numel) +
                 " elements bad; max abs err " + FormatShort(res.max_abs_err) + ", max rel err " +
                 FormatShort(res.max_rel_err);
  }
  return res;
}

template <typename LoadGot>
CompareResult DispatchRef(const unsigned char* got, const unsigned char* ref, int64_t numel,
                          ir::DType ref_dtype, const Tolerance& tol) {
  switch (ref_dtype) {
    case ir::DType::kFloat32: return CompareTyped<LoadGot, LoadF32>(got, ref, numel, tol);
    case ir::DType::kFloat16: return CompareTyped<LoadGot, LoadF16>(got, ref, numel, tol);
    case ir::DType::kBFloat16: return CompareTyped<LoadGot, LoadBF16>(got, ref, numel, tol);
  }
  CompareResult bad;
  bad.ok = false;
  bad.reason = "unknown reference dtype";
  return bad;
}

}  // namespace

Tolerance Tolerance::ForDType(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kFloat32: return Tolerance{1e-4, 1e-4};
    case ir::DType::kFloat16:
    case ir::DType::kBFloat16: return Tolerance{1e-2, 1e-2};
  }
  return Tolerance{1e-4, 1e-4};
}

Tolerance Tolerance::ForDTypes(ir::DType a, ir::DType b) {
  Tolerance ta = ForDType(a), tb = ForDType(b);
  return Tolerance{std::max(ta.atol, tb.atol), std::max(ta.rtol, tb.rtol)};
}

CompareResult CompareBuffers(const void* got, const void* ref, int64_t numel, ir::DType got_dtype,
                             ir::DType ref_dtype, Tolerance tol) {
  CompareResult res;
  if (numel < 0) {
    res.ok = false;
    res.reason = "negative element count " + std::to_string(numel);
    return res;
  }
  if (numel == 0) return res;
  if (got == nullptr || ref == nullptr) {
    res.ok = false;
    res.reason = std::string(got == nullptr ? "output" : "reference") + " buffer is null for " +
                 std::to_string(numel) + " elements";
    return res;
  }
  const auto* g = static_cast<const unsigned char*>(got);
  const auto* r = static_cast<const unsigned char*>(ref);
  switch (got_dtype) {
    case ir::DType::kFloat32: return DispatchRef<LoadF32>(g, r, numel, ref_dtype, tol);
    case ir::DType::kFloat16: return DispatchRef<LoadF16>(g, r, numel, ref_dtype, tol);
    case ir::DType::kBFloat16: return DispatchRef<LoadBF16>(g, r, numel, ref_dtype, tol);
  }
  res.ok = false;
  res.reason = "unknown output dtype";
  return res;
}

CompareResult CompareRepeatRun(const void* first, const void* second, int64_t numel, ir::DType dtype,
                               Tolerance tol) {
  CompareResult res = CompareBuffers(second, first, numel, dtype, dtype, tol);
  if (!res.ok) res.reason = "repeat run disagrees: " + res.reason;
  return res;
}

void PoisonBuffer(void* data, int64_t nbytes) {
  if (data == nullptr || nbytes <= 0) return;
  std::memset(data, kPoisonByte, static_cast<size_t>(nbytes));
}

float HalfBitsToFloat(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  if (exp == 0) {
    // ±0 or subnormal: mant * 2^-24, exact in float.
    float mag = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -mag : mag;
  }
  if (exp == 31) return BitsToFloat(sign | 0x7f800000u | (mant << 13));  // Inf / NaN (payload kept)
  return BitsToFloat(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

float BFloat16BitsToFloat(uint16_t bits) { return BitsToFloat(static_cast<uint32_t>(bits) << 16); }

uint16_t FloatToHalfBits(float value) {
  uint32_t x = FloatBits(value);
  auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // Inf or NaN
    if (mag == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((mag >> 13) & 0x3ffu));  // quiet NaN
  }
  if (mag >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to Inf
  if (mag < 0x38800000u) {
    // Below 2^-14: half subnormal (or zero) = round(|v| * 2^24); the product
    // is exact and nearbyint rounds to nearest even. 0x400 is the smallest
    // normal, which is also its correct encoding.
    float scaled = BitsToFloat(mag) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  uint32_t exp = (mag >> 23) - (127 - 15);
  uint32_t mant = mag & 0x7fffffu;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | h);
}

uint16_t FloatToBFloat16Bits(float value) {
  uint32_t x = FloatBits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

double LoadElement(const void* data, int64_t index, ir::DType dtype) {
  const auto* p = static_cast<const unsigned char*>(data);
  switch (dtype) {
    case ir::DType::kFloat32: return LoadF32()(p, index);
    case ir::DType::kFloat16: return LoadF16()(p, index);
    case ir::DType::kBFloat16: return LoadBF16()(p, index);
  }
  return std::nan("");
}

}  // namespace dice::runtime
