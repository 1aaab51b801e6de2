// cli/input_spec.h — the grammar of one `--input` tensor of `dice tune | run
// | profile | warmup` (docs/CLI.md "Input specs"). Torch-free: the random
// values are drawn in model_commands.cc (RandomInput, model_inputs.h).
//
//   SPEC  = DIMS ':' DTYPE [':' LOW '..' HIGH]
//   DIMS  = 'scalar' | SIZE ('x' SIZE)*          sizes >= 1, e.g. 8x4096
//   DTYPE = f32 | f16 | bf16                     float inputs, randn
//         | i64 | i32                            integer inputs (token ids, indices)
//         | b8                                   bool inputs (masks), true/false with p = 0.5
//   LOW..HIGH                                    integer inputs only: values drawn uniformly
//                                                from [LOW, HIGH) as torch.randint(LOW, HIGH);
//                                                default 0..2
//
// e.g. 1024x8192:f32, 8x128:i64:0..50257 (GPT-2 token ids), 8x1x128x128:b8.
// The range has no comma and no bracket, so a warmup set stays
// comma-separated and the spec needs no shell quoting.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dice/core/ir.h"
#include "dice/core/status.h"

namespace dice::cli {

/// What one --input tensor holds: a float dtype (the dtypes dice tunes
/// kernels for) or an integer / bool tensor the model only consumes.
enum class InputElement : uint8_t { kFloat, kInt64, kInt32, kBool };

/// The values integer inputs are drawn from when the spec gives no range:
/// [kDefaultIntLow, kDefaultIntHigh) = {0, 1}, an index every dimension of
/// size >= 2 takes.
inline constexpr int64_t kDefaultIntLow = 0;
inline constexpr int64_t kDefaultIntHigh = 2;

/// One parsed --input tensor. Plain value.
struct InputSpec {
  InputElement element = InputElement::kFloat;
  /// The shape, and for kFloat the dtype; for the other elements the dtype
  /// field is f32 and means nothing (see ElementBytes).
  ir::TensorSpec tensor;
  int64_t low = kDefaultIntLow;    ///< kInt64 / kInt32: smallest value drawn
  int64_t high = kDefaultIntHigh;  ///< kInt64 / kInt32: one above the largest value drawn
  bool range_given = false;        ///< the spec wrote LOW..HIGH

  const std::vector<int64_t>& shape() const { return tensor.shape; }
  /// Bytes per element: 4/2/2 for f32/f16/bf16, 8 for i64, 4 for i32, 1 for b8.
  int64_t ElementBytes() const;
  /// Bytes of the whole tensor (numel * ElementBytes(); the parser has
  /// checked that it fits in int64).
  int64_t nbytes() const { return tensor.numel() * ElementBytes(); }
  bool is_integer() const { return element == InputElement::kInt64 || element == InputElement::kInt32; }
};

/// The dtype names of the grammar above for `element` ("i64", "i32", "b8";
/// for kFloat the float dtype's name is ir::DTypeName's).
const char* InputElementName(InputElement element);

/// Parses `spec`, one tensor of the --input value `flag` (the whole value
/// for tune/run/profile; warmup's comma-separated set holds several specs).
/// Errors (kInvalidArgument), each "--input '<flag>'[: '<spec>']: ...": no
/// ':dtype'; an unknown dtype (the message lists the known ones); rank above
/// 8; a dimension that is not a size (said in the user's terms: an empty one
/// as in "8x:f32", a negative size, a size beyond int64, anything else with
/// the expected form); a size of 0; sizes whose element count times the
/// element size (bytes) overflow int64; a range that is not LOW..HIGH with
/// two decimal integers, one that is empty (LOW >= HIGH), one beyond the
/// dtype's values (i32: [-2^31, 2^31)), and a range on a float or b8 input.
Expected<InputSpec> ParseInputFlag(const std::string& spec, const std::string& flag);

/// "" when no spec of `specs` is an integer input drawn from the default
/// range; else the hint a failed first run appends, naming the range syntax
/// ("integer inputs without a range are drawn from 0..2; give the values the
/// model takes, e.g. 8x128:i64:0..50257"). Pure.
std::string DefaultRangeHint(const std::vector<InputSpec>& specs);

/// The hint a failed first run appends, for the model's error `cause`: an op
/// that has no kernel for an input's dtype (PyTorch's "... not implemented
/// for 'Long'") gets "an op of the model does not take this dtype: check
/// the :dtype of each --input" (a value range would not help); any other
/// cause gets DefaultRangeHint(specs). "" when neither applies. Pure.
std::string RunFailureHint(const std::vector<InputSpec>& specs, const std::string& cause);

}  // namespace dice::cli
