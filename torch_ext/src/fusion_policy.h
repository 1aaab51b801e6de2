// fusion_policy.h — which nodes of a framework graph form one fusion group.
//
// The one grouping policy of both frontends: the TorchScript pass
// (fusion_pass.cc) and the FX partitioner (dice_torch/partition.py, through
// the op `dice::fusion_groups`, registered in fusion_pass.cc). A frontend
// describes its graph as a list of PolicyNode (topological order, data edges,
// the few facts the reduction rule reads), gets the groups back, and realises
// them with its own node API; translating nodes to IR stays per frontend.
// This file includes no torch header.
//
// The rules (ProposeFusionGroups):
//  1. Only fusible nodes (the frontend's support check said yes) join groups.
//  2. Nodes are visited in order. Each starts a group of its own and is then
//     merged with the group of each of its producers in turn (input order)
//     when the merged set stays convex (no path leaves the set and comes back
//     into it, so one call can replace it) and every reduction in it runs over
//     the same axes (ReductionSignature: one kernel reduces over one set of
//     axes, e.g. group_norm feeding amin over channels makes two groups).
//  3. A group with fewer than `min_nontrivial_ops` nodes that are not casts or
//     projections (IsCastOrProjection) is dissolved: a group of casts alone is
//     not worth a kernel.
// Convexity is judged on the data edges given; a frontend whose graphs have
// other orderings (TorchScript's mutation and side effects) checks those
// while it realises a group.
//
// Thread-compatible: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dice/core/status.h"

namespace dice::torch_ext {

/// How a node's `dim` argument reads (only reduction kinds look at it).
enum class DimArg {
  kAbsent,   ///< the op's schema has no `dim` argument (whole-tensor sum, binary max)
  kNone,     ///< dim=None (or left at a None default): every axis
  kList,     ///< constant ints in PolicyNode::dims (an int dim is a one-element list; [] = every axis)
  kUnknown,  ///< not a constant int or int list: the axes cannot be named
};

/// What the policy knows about one framework node.
struct PolicyNode {
  /// Qualified op name as the schema spells it: "aten::mul", "aten::_softmax",
  /// "prims::convert_element_type"; "getitem" for FX's operator.getitem;
  /// "dice::FusionGroup" for a group formed by an earlier run (see `inner`).
  std::string kind;
  bool fusible = false;  ///< the frontend can translate it (a group formed earlier: true)
  /// Indices of the nodes whose outputs this node reads, each smaller than the
  /// node's own index (values from outside the list are left out; a value
  /// used inside a sub-block counts as read by the node owning the block).
  std::vector<int> inputs;
  // Facts for the reduction rule (ReductionSignature); read only for reduction kinds.
  int operands = 0;         ///< arguments the node is called with (TorchScript inputs, FX args)
  int tensor_operands = 0;  ///< of which tensors (two for binary max/min: elementwise)
  std::optional<int> rank;  ///< rank of the first operand, when known
  DimArg dim = DimArg::kAbsent;
  std::vector<int64_t> dims;  ///< for DimArg::kList, as given (negative axes allowed)
  /// len(normalized_shape) of layer_norm / rms_norm when it is a constant.
  std::optional<int> normalized_dims;
  /// For "dice::FusionGroup": the nodes inside it (their `inputs` are unused);
  /// the group reduces over what they reduce over and counts their non-casts.
  std::vector<PolicyNode> inner;
};

/// True for casts and projections, the ops a group of its own is not worth:
/// aten::to, aten::type_as, aten::_to_copy, prims::convert_element_type,
/// getitem.
bool IsCastOrProjection(std::string_view kind);

/// The axes `node` reduces over, as a comparable signature: "" for a node that
/// reduces nothing (including binary max/min); "dims:1" / "dims:0,2" (negative
/// axes normalised with `rank` when known, sorted) or "dims:all" for ops with a
/// dim argument (sum, mean, amax, amin, max, min, softmax, log_softmax,
/// _softmax, _log_softmax, logsumexp, norm, linalg_vector_norm, prod, var,
/// std, var_mean, argmax, argmin, all, any); the last `normalized_dims` axes
/// for layer_norm / native_layer_norm / rms_norm; `unique` where the axes
/// cannot be named (group_norm, native_group_norm, instance_norm, unknown
/// ranks or dims, no operands). `unique` must differ between nodes.
std::string ReductionSignature(const PolicyNode& node, const std::string& unique);

/// The fusion groups of `nodes` (rules in the file comment): each group is a
/// list of node indices in ascending order, groups ordered by their first
/// node; nodes in no group are left out. O(groups merged x graph size).
/// Errors: kInvalidArgument naming the node when an input index is negative
/// or not smaller than the node's own index.
Expected<std::vector<std::vector<int>>> ProposeFusionGroups(const std::vector<PolicyNode>& nodes,
                                                            int min_nontrivial_ops);

/// Parses the JSON form of a node list, the argument of `dice::fusion_groups`:
/// an array of objects {"kind": str, "fusible": bool, "inputs": [int],
/// "operands": int, "tensor_operands": int, "rank": int, "dim": null | int |
/// [int] | "?", "normalized_dims": int, "inner": [node...]}. Every key but
/// "kind" may be left out (defaults as in PolicyNode; no "dim" key: the op has
/// no dim argument; "dim": null: every axis; "?": not a constant).
/// Errors: kInvalidArgument naming the node and the key.
Expected<std::vector<PolicyNode>> ParsePolicyNodes(std::string_view json);

}  // namespace dice::torch_ext
