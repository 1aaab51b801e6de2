// dice/runtime/comparator.h — host-side output comparison for verification.
//
// The CPU core of DESIGN.md "Verification": a candidate's output buffer is
// compared element by element against the reference executor's output
// (both copied to host memory). Rules:
//   - a finite reference element passes when the candidate's element is
//     finite and |got - ref| <= atol + rtol * |ref| (numpy/torch allclose);
//   - NaN and ±Inf must appear exactly where the reference has them (same
//     sign of Inf), nowhere else;
//   - every element is checked (no sampling).
// Output buffers are poisoned (PoisonBuffer) before each candidate run, so an
// element the kernel never wrote stays NaN and fails the NaN-placement rule.
// A repeat run of the same inputs must agree with the first run under the
// same rules (CompareRepeatRun), which catches races.
//
// Element encodings (host side, no CUDA headers): f32 = IEEE binary32
// (float); f16 = IEEE binary16 bits (uint16_t); bf16 = the upper 16 bits of a
// binary32 (uint16_t). Values are widened to double before comparing.
// Thread-safety: pure functions, no shared state.
#pragma once

#include <cstdint>
#include <string>

#include "dice/core/ir.h"

namespace dice::runtime {

/// Per-element error limits: an element passes when
/// |got - ref| <= atol + rtol * |ref|.
struct Tolerance {
  double atol = 1e-4;
  double rtol = 1e-4;

  /// DESIGN.md defaults: float32 1e-4, float16/bfloat16 1e-2 (atol and rtol).
  static Tolerance ForDType(ir::DType dtype);
  /// The looser of ForDType(a) and ForDType(b): comparing an f16 output with
  /// an f32 reference is judged at f16's limits.
  static Tolerance ForDTypes(ir::DType a, ir::DType b);
  /// This tolerance with atol and rtol multiplied by `factor` (> 0); used by
  /// the precision policy when the user allowed TF32/reduced precision.
  Tolerance Scaled(double factor) const { return Tolerance{atol * factor, rtol * factor}; }
};

/// Outcome of one comparison.
struct CompareResult {
  bool ok = true;                 ///< every element passed
  int64_t num_bad = 0;            ///< elements that failed
  int64_t first_bad_index = -1;   ///< flat index of the first failure, -1 when ok
  double max_abs_err = 0;         ///< max |got - ref| over elements where both are finite
  double max_rel_err = 0;         ///< max |got - ref| / |ref| over those with ref != 0
  /// Empty when ok; else names the first bad element, its values and why,
  /// e.g. "element 1023: got nan, expected 0.4132 (unwritten or NaN); 1 of
  /// 4096 elements bad; max abs err 0, max rel err 0".
  std::string reason;
};

/// Compares `numel` elements of `got` (encoded as got_dtype) against `ref`
/// (encoded as ref_dtype) under `tol` and the NaN/Inf placement rule above.
/// Pointers are host pointers, need no particular alignment, and may be null
/// only when numel == 0 (numel 0 is ok). numel < 0 or a null pointer with
/// numel > 0 gives ok = false with the reason saying so.
CompareResult CompareBuffers(const void* got, const void* ref, int64_t numel, ir::DType got_dtype,
                             ir::DType ref_dtype, Tolerance tol);

/// Checks that a repeat run (`second`) agrees with the first run (`first`) of
/// the same inputs: CompareBuffers(second, first, ...) with `first` as the
/// reference; the reason is prefixed "repeat run disagrees: ". Used to catch
/// races and uninitialised reads (DESIGN.md "Verification").
CompareResult CompareRepeatRun(const void* first, const void* second, int64_t numel, ir::DType dtype,
                               Tolerance tol);

/// Fills `nbytes` bytes at `data` with 0xFF. 0xFFFFFFFF is a NaN as float32
/// and 0xFFFF is a NaN as float16 and as bfloat16, so every element of an
/// output buffer poisoned this way reads as NaN until the kernel writes it;
/// an element it skips is then rejected by the NaN-placement rule. (On the
/// device the same pattern is cuMemsetD8(ptr, 0xFF, nbytes).)
void PoisonBuffer(void* data, int64_t nbytes);

/// The byte PoisonBuffer writes (for device-side memsets).
inline constexpr unsigned char kPoisonByte = 0xFF;

/// IEEE binary16 bits -> float (exact: subnormals, ±0, ±Inf, NaN kept).
float HalfBitsToFloat(uint16_t bits);
/// bfloat16 bits (upper half of a binary32) -> float (exact).
float BFloat16BitsToFloat(uint16_t bits);
/// float -> IEEE binary16 bits, round to nearest even; overflow gives ±Inf,
/// NaN stays a (quiet) NaN. Used to build f16 inputs on the host.
uint16_t FloatToHalfBits(float value);
/// float -> bfloat16 bits, round to nearest even; NaN stays a quiet NaN.
uint16_t FloatToBFloat16Bits(float value);

/// Element `index` of a host buffer encoded as `dtype`, widened to double.
/// REQUIRES: data holds at least index + 1 elements.
double LoadElement(const void* data, int64_t index, ir::DType dtype);

}  // namespace dice::runtime
