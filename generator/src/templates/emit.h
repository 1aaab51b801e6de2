// emit.h (private) — CUDA source fragments shared by the template families:
// the device-helper prelude, literals, index arithmetic over the iteration
// space F, and expression emission for lowered nodes (float math for every
// dtype; precise expf/logf/erff/tanhf, no fast-math intrinsics).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lowering.h"

namespace dice::generator::tmpl {

/// Includes (cuda_fp16.h, cuda_bf16.h) and __device__ helpers: typed loads and
/// stores (dice_ld / dice_st, 16-byte dice_ldv / dice_stv), NaN-propagating
/// max/min, activation functions, warp and block reductions.
const std::string& Prelude();

/// A float literal that round-trips the double's float value ("0.5f",
/// "DICE_INF", "(-DICE_INF)", "DICE_NAN").
std::string FloatLit(double v);

/// "float", "__half", "__nv_bfloat16".
const char* CType(ir::DType dtype);

/// Index type spelling and literal suffix: wide = 64-bit ("unsigned long long", "ull").
const char* IdxType(bool wide);
std::string IdxLit(int64_t v, bool wide);

/// Element offset of the coordinate `var` (a row-major linear index over
/// `axes` of F) for a tensor with `strides` (per F axis): consecutive axes
/// whose strides chain (stride[i] == stride[i+1] * F[i+1]) are merged into one
/// div/mod term; broadcast (stride 0) and extent-1 axes vanish. Returns "0"
/// when nothing remains, exactly `var` for a contiguous match.
std::string OffsetExpr(const std::vector<int>& axes, const std::vector<int64_t>& F,
                       const std::vector<int64_t>& strides, const std::string& var, bool wide);

/// Condition that the coordinates of `var` (linear over `axes`) are 0 along
/// every axis where `shape` is 1 but F is not (so a broadcast output is
/// written once); "" when no such axis exists.
std::string GuardExpr(const std::vector<int>& axes, const std::vector<int64_t>& F,
                      const std::vector<int64_t>& shape, const std::string& var, bool wide);

/// The coordinate along physical axis `axis` of `var`, a row-major linear
/// index over `axes` of F: "((var / inner) % F[axis])" with the division and
/// modulo left out where they are identities; "" when `axis` is not in `axes`.
std::string AxisCoordExpr(const std::vector<int>& axes, const std::vector<int64_t>& F, int axis,
                          const std::string& var, bool wide);

/// rotate_half in emitted code (lowering.h), for a node whose rot_axis lies
/// among `axes` (`var` linear over them), "" otherwise or when the node is
/// not rotated. A rotated load: the element offset to add to its
/// OffsetExpr, " + (c < h ? h*s : -(h*s))" as a signed 64-bit literal pair
/// (s = its stride along the axis). A RotSign node: "(c < h ? -1.0f : 1.0f)".
std::string RotateShiftExpr(const Node& n, const std::vector<int>& axes, const std::vector<int64_t>& F,
                            const std::string& var, bool wide);
std::string RotateSignExpr(const Node& n, const std::vector<int>& axes, const std::vector<int64_t>& F,
                           const std::string& var, bool wide);

/// Whether any node of `lo` is rotated (a RotSign node exists): schedules
/// whose loads do not apply RotateShiftExpr / RotateSignExpr (the tiled
/// transposes) are skipped.
bool HasRotation(const Lowered& lo);

/// "const float* __restrict__ in0, ..., float* __restrict__ out0, ...[, void* __restrict__ workspace]".
std::string ParamList(const Lowered& lo, bool workspace);

/// Name of a node's value in emitted code: r<id> for reductions, v<id> otherwise.
std::string ValueName(const Lowered& lo, int id);

/// Appends `const float v<id> = ...;` for every non-reduce node needed by
/// `targets` (reduce nodes are referenced as r<id> and must be defined by the
/// caller). `load` returns the expression of a position-dependent leaf: a
/// Load node, or a RotSign node (RotateSignExpr). `indent` prefixes lines.
/// `row_invariant` (optional) tells which nodes are constant along the loop
/// being emitted: a division a / d by such a node d is emitted as
/// a * dice_inv<d>, which the caller defines before the loop (1.0f / d).
void EmitNodes(const Lowered& lo, const std::vector<int>& targets,
               const std::function<std::string(int id)>& load, const std::string& indent, std::string* out,
               const std::function<bool(int id)>& row_invariant = nullptr);

/// Whether any tensor (input, output, F) has >= 2^31 - 2^26 elements, so
/// indices need 64 bits (the margin covers grid-stride overshoot).
bool NeedsWideIndex(const Lowered& lo);

/// Identity element of a reduction, as a literal.
std::string ReduceIdentity(ReduceOp op);
/// "dice_sum"/"dice_max"/"dice_min" combine functions; template tag 0/1/2.
std::string ReduceCombine(ReduceOp op, const std::string& a, const std::string& b);

}  // namespace dice::generator::tmpl
