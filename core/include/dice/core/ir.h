// dice/core/ir.h — the framework-free fusion-group IR.
//
// A fusion group is a small SSA graph: N group inputs (dtype + rank), then a
// list of ops, each producing exactly one value, then the list of values that
// leave the group. Value ids: inputs are 0..N-1, op i produces value N+i.
// Shapes are NOT part of the graph (they belong to a Task, see task.h), so
// one graph serves every shape; dims attributes are normalised to be
// non-negative against the rank known from the inputs.
//
// The graph has a canonical text form (Canonical) that Parse reads back
// exactly, and a stable hash (sha256 of the canonical text). RenderReference-
// Program prints a KernelBench-style PyTorch `Model` for prompts and datasets.
//
// Semantics follow PyTorch eager (ATen) op by op: broadcasting and type
// promotion as torch does, scalar constants are "weak" (they never promote a
// tensor's dtype), reductions/normalisations use torch's definitions
// (mean = sum / count, var biased in layer/group norm, softmax over one dim).
// Thread-safety: plain values, no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dice/core/status.h"

namespace dice {
inline namespace core {
namespace ir {

/// Element types the runtime generates kernels for. Anything else (int,
/// bool, float64, ...) is unsupported and makes a group fall back.
enum class DType : uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

/// "f32", "f16", "bf16".
const char* DTypeName(DType dtype);
/// Parses "f32"/"float32"/"float", "f16"/"float16"/"half", "bf16"/"bfloat16".
/// Errors: kInvalidArgument naming the text.
Expected<DType> ParseDType(std::string_view text);
/// Bytes per element (4, 2, 2).
int64_t DTypeSize(DType dtype);
/// PyTorch's promotion between two floating dtypes of tensors with the same
/// priority (f16+bf16 -> f32). InferTypes also applies torch's rule that a
/// 0-d tensor never promotes a dimensioned one (f16[N] + f32[] -> f16).
DType PromoteTypes(DType a, DType b);

/// A concrete tensor: dtype, shape, strides (in elements) and the byte
/// alignment of its data pointer (16 when 16-byte aligned, ...).
struct TensorSpec {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  ///< elements; same rank as shape
  int64_t alignment = 16;        ///< bytes; largest power of two dividing the data pointer, capped at 16

  /// Contiguous (row-major) spec with 16-byte alignment.
  static TensorSpec Contiguous(DType dtype, std::vector<int64_t> shape);
  int64_t numel() const;
  int64_t nbytes() const { return numel() * DTypeSize(dtype); }
  bool is_contiguous() const;
  /// "f32[1024,8192]" (+ "{s=...}" when not contiguous, "@a8" when alignment < 16).
  std::string ToString() const;
  bool operator==(const TensorSpec& o) const;
};

/// Parses the CLI/user spec "1024x8192:f32" (dims separated by 'x', an empty
/// dim list "scalar:f32" means rank 0). Errors: kInvalidArgument naming the
/// text and what is wrong (bad dim, negative dim, unknown dtype).
Expected<TensorSpec> ParseInputSpec(std::string_view text);

/// Ops of the IR. Elementwise ops broadcast; reductions take `dims` and
/// `keepdim`; normalisations take their torch attributes.
enum class OpKind : uint8_t {
  kConstant,  ///< scalar constant; scalars[0] = value; no args; a 0-d "weak" value
  // unary elementwise (1 arg)
  kNeg, kAbs, kExp, kLog, kSqrt, kRsqrt, kReciprocal, kTanh, kSigmoid, kErf,
  kRelu,
  kGelu,        ///< ivalue 0: exact (erf), 1: tanh approximation
  kSilu, kMish,
  kSoftplus,    ///< scalars: beta, threshold
  kSoftsign,
  kElu,         ///< scalars: alpha, scale, input_scale (torch.elu: 1,1,1)
  kSelu,
  kLeakyRelu,   ///< scalars: negative_slope
  kClamp,       ///< scalars: min, max (±inf when absent); hardtanh is clamp
  kHardswish, kHardsigmoid,
  kPowScalar,   ///< scalars: exponent; x ** c
  kCast,        ///< ivalue: target DType
  // binary elementwise (2 args, broadcasting)
  kAdd, kSub, kMul, kDiv, kMaximum, kMinimum, kPow,
  // reductions (1 arg; dims sorted unique non-negative, empty = all dims)
  kSum, kMean, kAmax, kAmin, kLogSumExp,
  kNorm,        ///< scalars: p (1, 2, inf, or any p > 0)
  // normalisations
  kSoftmax,     ///< dims = {dim}
  kLogSoftmax,  ///< dims = {dim}
  kLayerNorm,   ///< ivalue: number of trailing dims normalised; scalars: eps; args x[, weight[, bias]]
  kGroupNorm,   ///< ivalue: groups; scalars: eps; args x[, weight[, bias]] (x is [N, C, *])
  // contractions
  kLinear,      ///< F.linear: args x [..., K], weight [N, K][, bias [N]] -> [..., N]; one dtype; no attributes
  /// F.conv2d: args x [N, C, H, W], weight [K, C/groups, R, S][, bias [K]] -> [N, K, P, Q]
  /// with P = (H + 2 ph - dh (R - 1) - 1) / sh + 1 (Q likewise with w); one dtype.
  /// dims = {sh, sw, ph, pw, dh, dw} (stride >= 1, padding >= 0, dilation >= 1,
  /// in this order, NOT sorted); ivalue = groups (>= 1; C and K divisible by it).
  kConv2d,
  /// x.contiguous(memory_format=...): the values of its one arg unchanged, in
  /// a stated memory format. ivalue = the format: 0 contiguous, 1
  /// channels_last (rank 4), 2 channels_last_3d (rank 5). Only the strides of
  /// a group OUTPUT it produces depend on it (dice/core/tensor_layout.h
  /// OutputLayouts); inside a group it is the identity. Category kUnary. It is
  /// how the memory-format pass's region exits and entries (layout copies)
  /// become part of fusion groups (issue 18 item 2).
  kContiguous,
  /// Windowed pooling with stride = window, no padding, floor mode (issue 18:
  /// the pools after conv epilogues): F.avg_pool{k}d(x, window) and
  /// F.max_pool{k}d(x, window). One arg x [N, C, S1..Sk], k = 1..3 spatial
  /// dims (rank k + 2); dims = the window per spatial dim (k values, each >= 1,
  /// in dim order, NOT sorted); out [N, C, S1 / w1, ...] (floor). avg_pool
  /// divides by the window's element count; max_pool propagates NaN as
  /// torch.amax does. Category kPool.
  kAvgPool,
  kMaxPool,
  /// rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2], -1) along the last
  /// dim d (RoPE's "rotate half", as Hugging Face's Qwen/Llama code writes
  /// it): element j < d/2 is -x[j + d/2], element j >= d/2 is x[j - d/2].
  /// One arg of rank >= 1, no attributes; the shape is unchanged and d must
  /// be even (InferShapes rejects an odd d; the graph alone has no shapes).
  /// Exact in every dtype (a copy and a negation). Category kRearrange.
  kRotateHalf,
};

/// Broad category of an op, used by passes and code generators.
/// kContraction (kLinear, kConv2d) sums products over input dims; the
/// elementwise and row templates refuse it, the gemm family serves linear and
/// the conv family conv2d (issue 18).
/// kPool (avg_pool, max_pool) reduces each non-overlapping window of the
/// spatial dims: the row family serves it as a reduction over the inner part
/// of each spatial axis split into (windows, window).
/// kRearrange (rotate_half) moves values along the last axis (element j
/// reads another element of the same row, possibly negated): not elementwise,
/// so GEMM epilogues refuse it; the elementwise and row template families
/// push the move down to their loads.
enum class OpCategory : uint8_t {
  kConstant, kUnary, kBinary, kReduction, kNormalization, kContraction, kPool, kRearrange
};

/// Static facts about an OpKind: name in the canonical text ("add"), the
/// torch spelling used by RenderReferenceProgram, arity and category.
struct OpInfo {
  OpKind kind;
  const char* name;
  OpCategory category;
  int min_args;
  int max_args;
  int num_scalars;  ///< scalars the op carries (exactly this many)
};
const OpInfo& GetOpInfo(OpKind kind);
/// Looks an op up by its canonical name. Errors: kInvalidArgument.
Expected<OpKind> OpKindFromName(std::string_view name);

/// One op: produces exactly one value.
struct Op {
  OpKind kind = OpKind::kConstant;
  std::vector<int32_t> args;     ///< value ids, each < this op's own value id
  std::vector<int64_t> dims;     ///< reductions / softmax: non-negative, sorted; conv2d: {sh, sw, ph, pw, dh, dw}; pools: window per spatial dim
  bool keepdim = false;          ///< reductions
  int64_t ivalue = 0;            ///< gelu approximation, cast dtype, layer_norm ndim, group_norm / conv2d groups
  std::vector<double> scalars;   ///< see OpKind

  bool operator==(const Op& o) const;
};

/// Declaration of a group input: dtype and rank. Shapes come with a Task.
struct InputDecl {
  DType dtype = DType::kFloat32;
  int rank = 0;
  bool operator==(const InputDecl& o) const { return dtype == o.dtype && rank == o.rank; }
};

/// A fusion group. REQUIRES for a valid graph (see Validate): args refer to
/// earlier values, outputs refer to existing non-constant values, attributes
/// match each op's arity and rank.
struct Graph {
  std::vector<InputDecl> inputs;
  std::vector<Op> ops;
  std::vector<int32_t> outputs;

  int32_t num_values() const { return static_cast<int32_t>(inputs.size() + ops.size()); }
  /// Value id produced by op index i.
  int32_t op_value(size_t i) const { return static_cast<int32_t>(inputs.size() + i); }
  bool operator==(const Graph& o) const;
};

/// Checks structure and attributes; also computes each value's rank and dtype.
/// Errors: kInvalidArgument naming the op index and what is wrong.
Status Validate(const Graph& graph);

/// Rank and dtype of every value (inputs first). Errors as Validate.
struct ValueType {
  DType dtype;
  int rank;
  bool is_scalar_constant;  ///< a weak scalar (kConstant)
};
Expected<std::vector<ValueType>> InferTypes(const Graph& graph);

/// Shapes of every value given concrete input shapes (broadcasting, reduction
/// shapes). Errors: kInvalidArgument when shapes do not broadcast or a rank
/// differs from the declaration (names the op and both shapes).
Expected<std::vector<std::vector<int64_t>>> InferShapes(const Graph& graph,
                                                        const std::vector<TensorSpec>& inputs);

/// Contiguous specs of the group outputs for the given inputs.
Expected<std::vector<TensorSpec>> InferOutputSpecs(const Graph& graph,
                                                   const std::vector<TensorSpec>& inputs);

/// Canonical text, one statement per line, e.g.
///   dice-ir v1
///   input %0 f32 rank=2
///   %1 = const(0.5)
///   %2 = mul(%0, %1)
///   %3 = sum(%2) dims=[1] keepdim=1
///   output %3
/// Doubles are printed with 17 significant digits (exact round trip).
std::string Canonical(const Graph& graph);

/// Reads Canonical text back. Errors: kInvalidArgument with the line number.
Expected<Graph> Parse(std::string_view text);

/// Hex sha256 of Canonical(graph) (64 lowercase hex chars).
std::string GraphHash(const Graph& graph);

/// Short human summary: "add+gelu+sum" (op names, constants omitted).
std::string Summary(const Graph& graph);

/// A KernelBench-style PyTorch program: `class Model(nn.Module)` whose
/// forward computes the group with torch ops, `get_inputs()` returning randn
/// tensors of the given specs on CUDA, `get_init_inputs()` returning [].
/// Used for prompts and datasets.
std::string RenderReferenceProgram(const Graph& graph, const std::vector<TensorSpec>& inputs);

/// As above, with the device string get_inputs() places tensors on ("cuda",
/// "cpu", "cuda:1"). Inputs are x0..xN-1, op values v<id>; each op is one
/// line spelled as PyTorch eager code (`x0 + x1`, `F.gelu(v2, approximate="tanh")`,
/// `torch.sum(v3, dim=(1,), keepdim=True)`); constants are inlined as Python
/// float literals (shortest text that reads back to the same double; inf and
/// nan as float("inf")/float("nan")), so they stay weak scalars. Non-contiguous
/// input specs become `torch.randn(n).as_strided(shape, strides)`; alignment
/// is not reproduced. An invalid graph renders a program whose import raises
/// ValueError with the validation message.
std::string RenderReferenceProgram(const Graph& graph, const std::vector<TensorSpec>& inputs,
                                   std::string_view device);

/// Hex sha256 of arbitrary bytes (OpenSSL). Used for graph hashes, task keys,
/// candidate hashes and content hashes.
std::string Sha256Hex(std::string_view bytes);

}  // namespace ir
}  // namespace core
}  // namespace dice
