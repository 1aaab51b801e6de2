// dice/torch_ext/capture.h — graph capture: framework graphs -> fusion-group IR.
//
// The frontend-neutral result of capture is a CapturedGroup (an ir::Graph plus
// what it came from) and a list of LeftOutNode (ops that stayed with the
// framework, with the reason), both in capture_result.h. This header holds
// the TorchScript frontend: translation of single TorchScript nodes into IR
// ops (the support check and the builder share one code path, so
// "supported" means "translates"), the
// translation of a whole fusion-group subgraph, and type observation (complete
// dtype/rank on every top-level value, from example inputs or from the
// profiling executor's prim::profile nodes). An FX frontend produces the same
// CapturedGroup values from torch.fx nodes and sits beside this one.
//
// Supported TorchScript ops (ATen semantics, see ir.h): add/sub/rsub (alpha),
// mul, div (no rounding mode), neg, abs, exp, log, sqrt, rsqrt, reciprocal,
// tanh, sigmoid, erf, relu, gelu(approximate), silu, mish, softplus, elu,
// selu, leaky_relu, hardtanh, clamp/clamp_min/clamp_max (scalar bounds),
// hardswish, hardsigmoid, pow (scalar or tensor exponent), maximum/minimum,
// max/min (binary), sum/mean (dim lists, dtype None), amax/amin, max.dim /
// min.dim (values only), logsumexp, norm / linalg_vector_norm (p > 0),
// softmax/log_softmax (dtype None), layer_norm, group_norm, to / type_as among
// f32/f16/bf16. Every tensor operand must have a known float32/float16/
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

/// True for ops that are worth a group on their own (everything supported
/// except casts).
bool IsNonTrivial(const torch::jit::Node* node);

/// Translates a fusion-group subgraph (inputs: tensors; non-tensor operands
/// must be prim::Constant nodes inside it) into IR: subgraph input i is IR
/// input i, subgraph outputs are IR outputs in order.
/// Errors: kUnsupported naming the node and the reason; kInvalidArgument when
/// the resulting IR fails ir::Validate.
Expected<CapturedGroup> CaptureSubgraph(const torch::jit::Graph& subgraph);

/// Runs `graph` once on `inputs` (the full input list, `self` module first for
/// a method graph) in the TorchScript interpreter and sets a complete
/// TensorType (dtype, shape, strides, device) on every tensor value of the
/// top-level block from what was observed. Values inside sub-blocks keep their
/// types. Errors: kInvalidArgument when running fails (message from PyTorch).
Status ObserveTypes(const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<c10::IValue>& inputs);

/// Removes the profiling executor's prim::profile nodes from the top-level
/// block, moving each profiled_type onto the profiled value. Returns the
/// number of profile nodes removed.
int AbsorbProfiledTypes(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace dice::torch_ext
