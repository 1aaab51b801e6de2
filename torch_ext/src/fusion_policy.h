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
//  4. GEMM groups (issue 18 items 1, 2: a GEMM or conv with its epilogue fused). A fusible
//     GEMM node (IsGemmKind: aten::linear, aten::conv2d, aten::_convolution) starts a group of its own and never
//     merges with a producer's group. Its epilogue is a DAG of later
//     elementwise nodes (PolicyNode::epilogue_op), planned when the GEMM node
//     is visited: a node is taken, in order, when it reads a taken node and
//     each of its tensor operands is a taken node (read once: y * y stays
//     split; two operands both of the output's full shape) or, for at most one
//     operand in the whole group, the group's one extra tensor: a row vector
//     ([N] / [1, N], in add, or in sub after the taken operand) or a
//     full-size residual (in add), beside a full-size taken operand. So every
//     value stays a pure elementwise function of (accumulator, extra tensor
//     element). Of the taken nodes the group keeps the largest part with one
//     output: the ancestors of a last node t where every member but t has all
//     its readers in the group and is no graph output (such a part is convex);
//     t is the latest node that allows it. y * sigmoid(y) * s,
//     sigmoid(y) * s + y and y * s + y are one group each. Every group the
//     chain rule formed before (each node reading the last one, which has no
//     other reader; a node two groups could take going to its first input's)
//     stays in it: a GEMM's plan skips nodes chained to another GEMM.
//     No other node merges with a GEMM group (a reduction after it starts its
//     own), and a GEMM group formed by an earlier run stays as it is. A GEMM
//     alone is a group (a faster GEMM is a win), except one marked
//     PolicyNode::needs_epilogue: with no epilogue op taken it is left out of
//     every group (a lone bf16 GEMM has no candidate that beats cuBLAS; its
//     epilogue does, DICE_GEMM_GROUPS=epilogue). Which GEMM nodes are fusible
//     is the frontend's call (GemmGroupsFromEnv: DICE_GEMM_GROUPS; ConvGroupsFromEnv:
//     DICE_CONV_GROUPS).
//  5. A layout copy (IsLayoutCopy: aten::contiguous, which the frontend
//     takes only where it changes a known layout, e.g. the memory-format
//     pass's region exits) joins its producer's group but is read by no
//     member of it: its value leaves the group as an output in the copy's
//     format (dice/core/tensor_layout.h ApplyOutputLayouts), so the group
//     reads channels_last and writes NCHW in one kernel.
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

#include "dice/core/ir.h"
#include "dice/core/status.h"

namespace dice::torch_ext {

/// How a tensor operand's shape relates to its node's output shape (the GEMM
/// epilogue rule reads it).
enum class Extent : uint8_t {
  kUnknown,  ///< sizes not known
  kFull,     ///< exactly the output's shape
  kRow,      ///< one value per output column: [N], [1, N], [1, 1, N] (N = the output's last dim)
  kOther,    ///< any other broadcast (a 0-d tensor, a column vector, ...)
};

/// One tensor operand of an epilogue candidate (PolicyNode::epilogue_operands).
struct TensorOperand {
  int source = -1;  ///< index of the node producing it; -1: from outside the list
  Extent extent = Extent::kUnknown;
};

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
  // Facts for the GEMM rule (rule 4); JSON keys "escapes", "epilogue_op",
  // "epilogue_operands" ([{"source": i, "extent": "full"|"row"|"other"|"unknown"}]).
  // The defaults keep a node out of any GEMM group.
  bool escapes = false;  ///< its output is also read outside the list (a graph output)
  /// The frontend translates it to exactly one elementwise IR op (unary or
  /// binary, not a cast) whose tensor arguments are `epilogue_operands`, in order.
  bool epilogue_op = false;
  /// Its tensor operands other than weak scalars (0-d constants), in operand order.
  std::vector<TensorOperand> epilogue_operands;
  /// A GEMM node (IsGemmKind) that may form a group only with at least one
  /// epilogue op taken (rule 4; GemmGroupNeedsEpilogue): alone it is left out.
  bool needs_epilogue = false;
};

/// True for the GEMM kinds that start a GEMM group (rule 4): "aten::linear",
/// and the conv kinds (IsConvKind).
bool IsGemmKind(std::string_view kind);

/// True for the convolutions that start a GEMM group (rule 4, issue 18 item
/// 2: the conv template family fuses the epilogue): "aten::conv2d",
/// "aten::_convolution" (a traced conv; the frontend refuses transposed ones).
/// The extra-tensor extents are judged as for linear (a row vector runs along
/// the output's last dim, W), so a per-channel [K, 1, 1] operand ends the epilogue.
bool IsConvKind(std::string_view kind);

/// Which GEMM nodes a frontend lets form groups (DICE_GEMM_GROUPS).
enum class GemmGroups : uint8_t {
  kOff,       ///< none: grouping exactly as before GEMM groups existed
  kFloat32,   ///< float32 only (where a 3xTF32 candidate beats cuBLAS)
  kEpilogue,  ///< float32, and bfloat16 / float16 only with an epilogue op (needs_epilogue)
  kAll,       ///< float32, bfloat16 and float16, with or without an epilogue
};

/// Reads a DICE_GEMM_GROUPS value: "all" -> kAll; "epilogue" -> kEpilogue;
/// "f32" or "float32" -> kFloat32; "0" or "off" -> kOff; null, "" or any
/// other value -> `unset` (the frontend's default).
GemmGroups ParseGemmGroups(const char* value, GemmGroups unset = GemmGroups::kFloat32);

/// ParseGemmGroups(getenv("DICE_GEMM_GROUPS"), unset), read at each call.
/// The defaults (docs/DECISIONS.md, "bf16 GEMM groups only with an
/// epilogue"): kFloat32 for the TorchScript pass (`dice tune` has no
/// per-region measurement, so a bf16 GEMM group without a winner would take
/// its epilogue's elementwise winner away), kEpilogue for the FX backend
/// (kFxGemmGroupsDefault: its region decision gives a region that is not
/// faster back to the rest compiler).
GemmGroups GemmGroupsFromEnv(GemmGroups unset = GemmGroups::kFloat32);

/// The FX backend's default GEMM gate (dice::gemm_group_gate).
inline constexpr GemmGroups kFxGemmGroupsDefault = GemmGroups::kEpilogue;

/// Whether a GEMM whose output has `dtype` forms a group under `setting` only
/// with an epilogue op (PolicyNode::needs_epilogue): kEpilogue and a dtype
/// other than float32.
bool GemmGroupNeedsEpilogue(GemmGroups setting, ir::DType dtype);

/// DICE_CONV_GROUPS's value: "f32" (or "float32", "1") = float32 convs only,
/// "all" = also bf16/f16; unset or anything else = off. Off by default
/// until the conv candidates are measured on a GPU: a float32 conv's TF32
/// candidates count as reduced precision, so under the default precision
/// policy a conv group would get none and its epilogue would lose the
/// generated kernel it has as a group of its own.
GemmGroups ParseConvGroups(const char* value);

/// ParseConvGroups(getenv("DICE_CONV_GROUPS")), read at each call: which
/// convolutions (IsConvKind) may form groups.
GemmGroups ConvGroupsFromEnv();

/// Whether a GEMM whose output has `dtype` may form a group under `setting`.
bool GemmGroupAllowed(GemmGroups setting, ir::DType dtype);

/// True for "aten::contiguous", the layout copy of rule 5.
bool IsLayoutCopy(std::string_view kind);

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
/// [int] | "?", "normalized_dims": int, "inner": [node...], "escapes": bool,
/// "epilogue_op": bool, "epilogue_operands": [{"source": int, "extent":
/// "full" | "row" | "other" | "unknown"}], "needs_epilogue": bool}. Every key but
/// "kind" may be left out (defaults as in PolicyNode; no "dim" key: the op has
/// no dim argument; "dim": null: every axis; "?": not a constant).
/// Errors: kInvalidArgument naming the node and the key.
Expected<std::vector<PolicyNode>> ParsePolicyNodes(std::string_view json);

}  // namespace dice::torch_ext
