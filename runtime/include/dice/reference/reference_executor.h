// dice/reference/reference_executor.h — runs a fusion group with ATen ops.
//
// The baseline and the correctness oracle (DESIGN.md "Verification",
// "Timing"): each IR op maps to the ATen call PyTorch eager would make for it
// (add -> at::add, gelu -> at::gelu(approximate), softmax -> at::softmax, ...),
// so timing it is timing "PyTorch running the same subgraph". Shared by the
// TorchScript frontend, the worker and (later) the FX frontend. Links LibTorch.
// Thread-compatible; no global state.
#pragma once

#include <vector>

#include <ATen/ATen.h>

#include "dice/core/ir.h"
#include "dice/core/status.h"

namespace dice::reference {

/// Evaluates `graph` on `inputs` (any device, dtypes per the graph's input
/// declarations) and returns the group outputs in graph.outputs order.
/// `upcast` computes in float64 (for an extra-precise oracle): inputs are
/// converted to double, every output is float64, and a cast op keeps its
/// rounding (x.to(dtype).to(double)).
/// Scalar constants stay weak: a binary op with a constant operand calls the
/// Scalar overload (at::add(t, c); c - t is at::rsub(t, c); c / t is
/// reciprocal(t) * c, as Tensor.__rtruediv__), maximum/minimum wrap the
/// constant as a 0-d tensor of the other operand's dtype; ops on constants
/// only are folded in float64. Outputs may alias inputs when the graph
/// returns an input. Synchronous only as far as ATen is (CUDA ops are queued
/// on the current stream).
/// Errors: kInvalidArgument when the graph is invalid (ir::InferTypes), the
/// input count differs, or an input's dtype/rank differs from its
/// declaration ("input 1 (x1): dtype Half, expected f32"), or ATen rejects
/// an op (shapes that do not broadcast: "op 0 (add): ...");
/// kUnsupported for an op without an ATen mapping (names the op).
Expected<std::vector<at::Tensor>> Run(const ir::Graph& graph, const std::vector<at::Tensor>& inputs,
                                      bool upcast = false);

/// ScalarType for an IR dtype and back (kUnsupported for other dtypes).
at::ScalarType ToScalarType(ir::DType dtype);
Expected<ir::DType> FromScalarType(at::ScalarType type);

/// TensorSpec of a tensor (dtype, sizes, strides, pointer alignment).
Expected<ir::TensorSpec> SpecOf(const at::Tensor& t);

}  // namespace dice::reference
