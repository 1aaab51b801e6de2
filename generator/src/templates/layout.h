// layout.h (private) — iteration in memory order for permuted dense layouts
// (channels_last, channels_last_3d; issue 18 item 2).
//
// Lower (lowering.h) builds the iteration space F in logical dim order
// (N, C, H, W). A group whose tensors are channels_last then walks memory
// with stride C along its innermost axis, so no access coalesces and no
// 16-byte vector path applies. MemoryOrder finds one permutation of F's axes
// under which every full-size tensor of the group is dense row-major, and
// PermuteAxes re-indexes a Lowered in that order. Only the order of the
// iteration changes: every Load and output keeps its own element strides
// (re-indexed with the axes), broadcast axes keep stride 0, reductions keep
// reducing the same axes, and the kernel's arguments (raw pointers to the
// same memory, in the same order) are unchanged. Because the rewrite happens
// after Lower, positional op attributes (softmax dim, layer_norm's trailing
// dims, group_norm's channel split into (groups, C/groups) axes) are already
// resolved into axes and stay correct under any axis order. Plain functions;
// thread-safe.
#pragma once

#include <optional>
#include <vector>

#include "lowering.h"

namespace dice::generator::tmpl {

/// The axis order, outermost first, in which the "full-size" tensors of `lo`
/// (Loads and outputs whose node shape equals F along every axis with
/// F[a] > 1) are all dense row-major: order[k] is the F axis placed k-th.
/// Extent-1 axes go first, in their original order. nullopt when F is
/// already in that order (contiguous tasks, unchanged), when there is no
/// full-size tensor, when a full-size tensor is not dense (gaps -- allowed
/// only where Lowered::pool_gaps: a floor-mode pool's input --, overlap,
/// stride 0) or when two full-size tensors are dense in different orders:
/// the strided lowering then stays (correct, not coalesced; for two orders
/// the elementwise family adds tiled transposes, see TransposePlan).
std::optional<std::vector<int>> MemoryOrder(const Lowered& lo);

/// Re-indexes `lo` so that its axis k is old axis order[k]: F, every node's
/// shape and strides, reduce_axes (mapped and sorted), Lowered::reduce_axes,
/// the outputs' strides. The logical bookkeeping (lshape, lstrides,
/// lreduce, OutputRef::lstrides) is not used after Lower and stays in logical
/// order. REQUIRES: `order` is a permutation of [0, F.size()).
void PermuteAxes(const std::vector<int>& order, Lowered* lo);

/// MemoryOrder then PermuteAxes when it found an order; returns whether `lo`
/// was re-indexed. Called by TemplateGenerator between Lower and the
/// elementwise / row families.
bool ToMemoryOrder(Lowered* lo);

/// The two memory orders of a "mixed-order" elementwise group, for the tiled
/// transpose of the elementwise family (transpose.cc): e.g. a channels_last
/// conv output x [N,C,H,W] (strides H*W*C, 1, W*C, C) through an epilogue
/// relu(x + b[C,1,1]) into a contiguous output, or a copy from contiguous
/// NCHW into channels_last. Axes are F axes of `lo` as Lower (or PermuteAxes)
/// left them; orders list the axes of extent > 1, outermost first.
struct TransposeOrders {
  std::vector<int> out_order;  ///< every full-size output is dense row-major in this order ("O")
  std::vector<int> in_order;   ///< the tiled loads are dense row-major in this order ("I")
  int a_out = -1;              ///< innermost (stride-1) axis of O: consecutive along it, stores coalesce
  int a_in = -1;               ///< innermost axis of I (!= a_out): consecutive along it, tiled loads coalesce
  std::vector<int> tiled_loads;   ///< node ids of the full-size Loads dense in I (ascending)
  std::vector<int> direct_loads;  ///< node ids of the other Loads: dense in O, or broadcast (smaller than F)
};

/// The orders O and I of `lo` when a tiled transpose applies: `lo` has no
/// Reduce (num_reduces == 0); it has at least one full-size output (node
/// shape == F along every axis with F[a] > 1) and all full-size outputs are
/// dense in one order O; every full-size Load is dense in O or in a second
/// order I, at least one in I; and the innermost axes differ (a_out != a_in).
/// Broadcast outputs (smaller than F) are allowed next to a full-size one
/// (the kernel writes them guarded, once per element, as the strided path
/// does) and broadcast Loads are read through their own strides. nullopt
/// otherwise: a reduction (the row family handles those), no full-size
/// output, a full-size tensor that is not dense (gaps, overlap, stride 0),
/// outputs in two orders, loads in a third order (one tile cannot make three
/// orders coalesce), all full-size tensors in one order (MemoryOrder's case:
/// no transpose needed), or O and I with the same innermost axis (the
/// strided walk already coalesces along it). Does not cap the number of
/// tiled loads (the family does). Pure; thread-safe.
std::optional<TransposeOrders> TransposePlan(const Lowered& lo);

/// Merges each pair of adjacent F axes (a, a + 1) that every tensor of `lo`
/// walks as one: every node's shape is 1 on both or F on both, and every
/// Load and output with both full has stride[a] == stride[a + 1] * F[a + 1]
/// (row-major across the pair; stride 0 on both is a broadcast). The merged
/// axis has extent F[a] * F[a + 1] and the inner axis's strides; nothing
/// else changes (the kernel reads and writes the same elements). For the
/// tiled transpose: a channels_last conv output written NCHW has (H, W)
/// adjacent in both layouts, so the tiles run along H * W instead of W, and
/// a W that the tile edge does not divide (513: 8 full tiles and one of
/// width 1 per row) no longer leaves a mostly empty tile on every row.
/// Only elementwise DAGs: a Reduce, a rotate_half (rot_axis), or a floor-mode
/// pool's gaps leave `lo` unchanged. Returns whether an axis was merged.
/// Pure apart from `lo`; thread-compatible.
bool MergeAdjacentAxes(Lowered* lo);

}  // namespace dice::generator::tmpl
