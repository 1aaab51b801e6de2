// dice/torch_ext/fusion_pass.h — the TorchScript pass that forms fusion groups.
//
// FuseDiceGroups rewrites the top-level block of a graph: maximal connected
// sets of supported nodes (capture.h) become `dice::FusionGroup` nodes whose
// attr::Subgraph holds the original nodes (the fallback) and whose string
// attribute `dice_ir` holds the IR canonical text (`dice_group_id`: the
// process-wide group id). Groups are grown the standard way (as PyTorch's
// tensor-expression fuser does): scanning backwards, a producer is merged into
// its consumer's group only when AliasDb can move it next to the group without
// breaking a dependency (no path leaves the group and comes back). Scalar
// constants are cloned into the subgraph; tensor constants stay group inputs.
// Groups made only of casts are dissolved. A linear (aten::linear) starts a
// group of its own and takes the elementwise ops after it as its epilogue
// (fusion_policy.h rule 4): float32 linears by default, bf16/f16 too with
// DICE_GEMM_GROUPS=all (=epilogue: only when an epilogue op follows; the FX
// backend's default), none with DICE_GEMM_GROUPS=0 (then a linear is left
// out as "not a fusible op", as before GEMM groups). Before grouping,
// aten::matmul(x, C) and aten::addmm(b, x, C) (beta = alpha = 1) whose C is a
// 2-D constant with a contiguous transpose (torch.jit.freeze's fold of a
// Linear-layout `w.t()`) are respelled aten::linear(x, C.t()[, b]), which
// ATen computes with the very same call (bit-identical, no weight copy), when
// that linear may form a group. It leaves alone: sub-blocks
// (prim::If/Loop bodies), nodes with unknown or non-float tensor types, and
// mutating ops.
//
// Type observation (ObserveTypes, AbsorbProfiledTypes) gives the pass the
// complete types it reads.
//
// The DICE_MODE pass (registered with torch::jit::registerPrePass) runs
// AbsorbProfiledTypes and then FuseDiceGroups when DICE_MODE is set and not
// "off"; it is also callable directly as DiceModePass.
#pragma once

#include <memory>
#include <vector>

#include <ATen/core/interned_strings.h>

#include "dice/torch_ext/capture.h"
#include "dice/torch_ext/group_table.h"
#include "dice/torch_ext/optimize.h"

namespace torch::jit {
struct Graph;
struct Node;
}  // namespace torch::jit

namespace dice::torch_ext {

/// The op kind "dice::FusionGroup".
c10::Symbol FusionGroupSymbol();
/// Attribute "dice_ir" (string, IR canonical text) and "dice_group_id" (int).
c10::Symbol IrAttr();
c10::Symbol GroupIdAttr();

/// Result of one run of the pass.
struct FusionPassResult {
  std::vector<int> group_ids;          ///< ids of the groups formed (registered in the group table)
  std::vector<LeftOutNode> left_out;   ///< unsupported nodes of the top-level block
};

/// Forms fusion groups in the top-level block of `graph` (types must already
/// be complete: ObserveTypes / AbsorbProfiledTypes). `min_nontrivial_ops`: a
/// group with fewer non-cast ops is dissolved. Tensor type specialisations of
/// the top-level block are removed afterwards (subgraphs keep theirs).
FusionPassResult FuseDiceGroups(const std::shared_ptr<torch::jit::Graph>& graph, int min_nontrivial_ops = 1);

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

/// The pass body registered for DICE_MODE: no-op when DICE_MODE is unset,
/// "off" or invalid; otherwise absorbs profiled types and fuses.
void DiceModePass(std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace dice::torch_ext
