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
/// full-size tensor, when a full-size tensor is not dense (gaps, overlap,
/// stride 0) or when two full-size tensors are dense in different orders:
/// the strided lowering then stays (correct, not coalesced).
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

}  // namespace dice::generator::tmpl
