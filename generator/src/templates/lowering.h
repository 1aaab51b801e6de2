// lowering.h (private) — turns a Task's fusion group into a primitive DAG in
// one shared iteration space, the input of the template code generators.
//
// Composite ops are decomposed (softmax = exp(x - amax) / sum, layer_norm =
// mean / biased variance / rsqrt, group_norm, logsumexp, norm p, mean) into:
//   Load (an input read through its own strides), Const, Unary (an IR
//   elementwise op evaluated in float), Binary (add/sub/mul/div/max/min/pow)
//   and Reduce (sum/max/min over the reduced axes; keepdim-broadcast result).
// rotate_half (ir.h kRotateHalf) is pushed down to the loads: its argument's
// node DAG is cloned with every Load varying along the rotated axis reading
// the element rot_half away (j < h: j + h, j >= h: j - h), the nodes that do
// not vary along it (constants, reductions over it) shared, and the clone
// multiplied by a RotSign leaf (-1 for j < h, +1 after): exact, as torch's
// cat(-x[..., h:], x[..., :h]). Rotating a value that depends on a reduction
// over other axes, or rotating twice, is kUnsupported.
// Every node lives in the "physical" iteration space F (rank = max input rank,
// plus one axis when group_norm splits channels into (groups, C/groups), and
// one per pooled spatial axis, split into (windows, window) by avg_pool /
// max_pool, whose Reduce takes the inner parts):
// node.shape[a] is F[a] or 1 (broadcast). Non-keepdim reductions are mapped
// back onto F's kept axes, so a consumer indexes everything by F coordinates.
// Nodes are in topological order (args have smaller ids).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "dice/core/ir.h"
#include "dice/core/status.h"
#include "dice/core/task.h"

namespace dice::generator::tmpl {

/// kRotSign: a position-dependent leaf, -1.0f where the coordinate along
/// rot_axis is < rot_half and +1.0f elsewhere (rotate_half's sign).
enum class NodeKind : uint8_t { kLoad, kConst, kUnary, kBinary, kReduce, kRotSign };
enum class ReduceOp : uint8_t { kSum = 0, kMax = 1, kMin = 2 };

struct Node {
  NodeKind kind = NodeKind::kConst;
  ir::OpKind op = ir::OpKind::kNeg;  ///< unary/binary: the IR op to evaluate
  int64_t ivalue = 0;                ///< unary attributes (gelu mode, cast dtype)
  std::vector<double> scalars;       ///< unary attributes
  bool inf_to_zero = false;          ///< unary special: |x| == inf ? 0 : x (logsumexp's max guard)
  ReduceOp rop = ReduceOp::kSum;
  std::vector<int> args;
  int input = -1;                    ///< load: group input index
  double value = 0;                  ///< const
  std::vector<int64_t> shape;        ///< physical extents (F[a] or 1)
  std::vector<int64_t> strides;      ///< load: element strides per physical axis (0 = broadcast)
  std::vector<int> reduce_axes;      ///< reduce: physical axes reduced (sorted)
  /// load: -1, or the axis (physical once Lower returns) along which it reads
  /// coordinate c' = c < rot_half ? c + rot_half : c - rot_half (rotate_half);
  /// rot_sign: the axis whose coordinate picks the sign.
  int rot_axis = -1;
  int64_t rot_half = 0;              ///< d / 2 of the rotated axis (extent d)

  // Logical-space bookkeeping used during lowering.
  std::vector<int64_t> lshape;
  std::vector<int64_t> lstrides;
  std::vector<std::pair<int, bool>> lreduce;  ///< (logical axis, inner-split-part only)
};

/// One group output: the node producing it and the output tensor's strides
/// in F (contiguous in its own shape; 0 along axes it is broadcast over).
struct OutputRef {
  int node = -1;
  std::vector<int64_t> strides;
  std::vector<int64_t> lstrides;
  std::vector<bool> pooled;      ///< per logical axis: the output holds one value per pool window there
  ir::DType dtype = ir::DType::kFloat32;
  int64_t alignment = 16;
  int64_t numel = 0;
};

struct Lowered {
  std::vector<Node> nodes;
  std::vector<OutputRef> outputs;
  std::vector<int64_t> F;        ///< physical iteration space extents
  std::vector<int> reduce_axes;  ///< R: the axes every Reduce reduces (empty: elementwise)
  std::vector<ir::TensorSpec> inputs;
  int num_reduces = 0;
  /// A floor-mode pool drops the tail of an axis its window does not divide:
  /// the loads before it skip those elements (row-major with gaps, not dense).
  bool pool_gaps = false;
};

/// Lowers `task`. Errors: kUnsupported naming the op or pattern (e.g. two
/// reductions over different axes, non-broadcastable layouts); kInvalidArgument
/// when the graph/specs are invalid.
Expected<Lowered> Lower(const Task& task);

/// Elements of F.
int64_t Numel(const std::vector<int64_t>& shape);

/// Lower's last step (lowering_physical.cc): sets `lo`'s physical space F
/// (logical rank `r`; `split`: logical axis -> groups (group_norm) or windows
/// (a pool), split in two) and reduce_axes, and every node's and output's
/// physical shape and strides from their logical ones. Errors: kUnsupported
/// (inconsistent extents, rotate_half along a split axis, a reduction over a
/// broadcast axis, two reductions over different axes).
Status MapToPhysicalSpace(int r, const std::map<int, int64_t>& split, Lowered* lo);

/// The epilogue DAG of a GEMM family (templates/gemm.cc, gemv.cc): appends to
/// `dag` one Node per IR value of `g`'s ops, in op order, each computed once
/// however often it is read. Constants become Const nodes; every other op
/// except op `linear` and the ops in `skip` must come after `linear` and be
/// elementwise (kUnary / kBinary), and becomes a Unary / Binary node whose
/// args are its arguments' nodes. `node_of` (IR value id -> node id) holds
/// the leaves the caller already put in `dag` (the linear's value, ...) and
/// receives every new value. Errors: kUnsupported, message without a family
/// prefix, naming the op: one before `linear`, one not elementwise, or one
/// reading a value without a node (e.g. a group input the epilogue cannot read).
Status AppendEpilogueNodes(const ir::Graph& g, size_t linear, const std::vector<size_t>& skip,
                           std::map<int32_t, int>* node_of, Lowered* dag);

}  // namespace dice::generator::tmpl
