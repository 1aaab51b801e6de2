// dice/torch_ext/capture.h — graph capture: framework graphs -> fusion-group IR.
//
// The frontend-neutral result of capture is a CapturedGroup (an ir::Graph plus
// what it came from) and a list of LeftOutNode (ops that stayed with the
// framework, with the reason), both in capture_result.h. This header holds
// the TorchScript frontend: translation of single TorchScript nodes into IR
// ops (the support check and the builder share one code path, so
// "supported" means "translates") and the
// translation of a whole fusion-group subgraph. Type observation (complete
// dtype/rank on every top-level value, from example inputs or from the
// profiling executor's prim::profile nodes) is in fusion_pass.h, beside the
// pass that needs it. An FX frontend produces the same CapturedGroup values
// from torch.fx nodes and sits beside this one.
//
// Supported TorchScript ops (ATen semantics, see ir.h): add/sub/rsub (alpha),
// mul, div (no rounding mode), neg, abs, exp, log, sqrt, rsqrt, reciprocal,
// tanh, sigmoid, erf, relu, gelu(approximate), silu, mish, softplus, elu,
// selu, leaky_relu, hardtanh, clamp/clamp_min/clamp_max (scalar bounds),
// hardswish, hardsigmoid, pow (scalar or tensor exponent), maximum/minimum,
// max/min (binary), sum/mean (dim lists, dtype None), amax/amin, max.dim /
// min.dim (values only), logsumexp, norm / linalg_vector_norm (p > 0),
// softmax/log_softmax (dtype None), layer_norm, group_norm, to / type_as among
// f32/f16/bf16, linear (weight [N, K], optional bias [N]; ir::OpKind::kLinear;
// aten::matmul / addmm are no IR ops: the fusion pass respells those with a
// frozen `w.t()` weight as linear, fusion_pass.h), conv2d / _convolution (not
// transposed; constant stride/padding/dilation pairs and groups; ir::OpKind::kConv2d). Every tensor operand must have a known float32/float16/
// bfloat16 dtype and a known rank; scalars must be constants.
//
// Thread-compatible: functions touch only the graph they are given.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "dice/core/ir.h"
#include "dice/core/status.h"
#include "dice/torch_ext/capture_result.h"

namespace torch::jit {
struct Graph;
struct Node;
struct Value;
}  // namespace torch::jit

namespace dice::torch_ext {

/// Why `node` cannot join a fusion group, or "" when it can. The node is
/// translated alone (its tensor operands become group inputs), so the answer
/// matches what CaptureSubgraph will accept. Tensor operands need complete
/// dtype and rank in their TensorType (see ObserveTypes).
std::string UnsupportedReason(const torch::jit::Node* node);

/// True for a 0-d tensor prim::Constant (torch.jit.trace's spelling of a
/// Python scalar): it is captured as a weak scalar constant, not an input.
bool IsScalarTensorConstant(const torch::jit::Value* value);

/// True when `node`, translated alone (as UnsupportedReason does), is exactly
/// one elementwise IR op (unary or binary category, not a cast) whose tensor
/// arguments are the node's tensor operands (0-d constants aside) in operand
/// order: what may follow a GEMM as its epilogue (fusion_policy.h rule 4).
/// False for add/sub with alpha != 1 (two IR ops), rsub with a tensor
/// (swapped arguments), x + x, and anything that does not translate.
bool IsEpilogueOp(const torch::jit::Node* node);

/// True for ops that are worth a group on their own (everything supported
/// except casts).
bool IsNonTrivial(const torch::jit::Node* node);

/// Translates a fusion-group subgraph (inputs: tensors; non-tensor operands
/// must be prim::Constant nodes inside it) into IR: subgraph input i is IR
/// input i, subgraph outputs are IR outputs in order.
/// Errors: kUnsupported naming the node and the reason; kInvalidArgument when
/// the resulting IR fails ir::Validate.
Expected<CapturedGroup> CaptureSubgraph(const torch::jit::Graph& subgraph);

}  // namespace dice::torch_ext
