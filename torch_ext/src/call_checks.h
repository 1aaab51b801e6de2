// Private: a dice::run_group call's tensors against its group's IR (run_group.h):
// the input checks, the dtype names their messages use, and ir::InferShapes'
// rules on symbolic sizes (the meta function graph frontends trace with).
// Includes ATen; no state; thread-safe.
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "dice/core/ir.h"
#include "dice/core/status.h"

namespace dice::torch_ext {

/// The dtype's name in messages: "int64", "int32", "float64", "bool", else
/// c10's name ("Float", "BFloat16", ...).
std::string DTypeText(at::ScalarType st);

/// `inputs` against `graph`'s declarations: count, defined, dtype and rank.
/// Errors: kInvalidArgument naming the input and both types
/// ("dice::run_group: input 1 is int64 rank 2, the IR declares f32 rank 2").
Status CheckInputs(const ir::Graph& graph, const std::vector<at::Tensor>& inputs);

/// The shape of every value of `graph` (inputs first) for `inputs`' symbolic
/// sizes, by ir::InferShapes' rules (broadcast, reductions, pools' floor
/// division, linear, conv2d). REQUIRES: CheckInputs passed. Errors:
/// kInvalidArgument naming the op when shapes do not broadcast or a linear's
/// operands are not [..., K] and [N, K].
Expected<std::vector<c10::SymDimVector>> SymbolicShapes(const ir::Graph& graph, const std::vector<at::Tensor>& inputs);

}  // namespace dice::torch_ext
