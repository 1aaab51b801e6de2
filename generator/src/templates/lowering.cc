// lowering.cc — see lowering.h (its last step, the physical space: lowering_physical.cc).
//
// Each IR value gets a "map": for every one of its dims, the logical axis of
// the iteration space it runs along (logical rank r = max input rank). Values
// that depend only on inputs and constants are "free": they are instantiated
// (as fresh Load/Unary/Binary nodes) at whatever map their consumer needs, so
// a bias [C] next to a non-keepdim reduction [N] lines up with the right axis.
// Values downstream of a reduction are "anchored" to one map.
#include "lowering.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

namespace dice::generator::tmpl {
namespace {

using ir::OpCategory;
using ir::OpKind;

Status Unsupported(const std::string& what) { return Status(StatusCode::kUnsupported, "templates: " + what); }

struct ValInfo {
  bool anchored = false;
  int node = -1;
  std::vector<int> map;
};

class Lowerer {
 public:
  explicit Lowerer(const Task& task) : task_(task), g_(task.graph) {}

  Expected<Lowered> Run();

 private:
  std::vector<int> DefaultMap(size_t rank) const {
    std::vector<int> m(rank);
    for (size_t k = 0; k < rank; ++k) m[k] = static_cast<int>(r_ - rank + k);
    return m;
  }
  std::vector<int64_t> LShape(const std::vector<int64_t>& shape, const std::vector<int>& map) const {
    std::vector<int64_t> ls(r_, 1);
    for (size_t d = 0; d < shape.size(); ++d)
      if (shape[d] > 1) ls[map[d]] = shape[d];
    return ls;
  }
  int Add(Node n) {
    lo_.nodes.push_back(std::move(n));
    return static_cast<int>(lo_.nodes.size() - 1);
  }
  int Const(double v) {
    Node n;
    n.kind = NodeKind::kConst;
    n.value = v;
    n.lshape.assign(r_, 1);
    return Add(std::move(n));
  }
  int Unary(OpKind op, int a, std::vector<double> scalars = {}, int64_t ivalue = 0) {
    Node n;
    n.kind = NodeKind::kUnary;
    n.op = op;
    n.args = {a};
    n.scalars = std::move(scalars);
    n.ivalue = ivalue;
    n.lshape = lo_.nodes[a].lshape;
    return Add(std::move(n));
  }
  int Binary(OpKind op, int a, int b) {
    Node n;
    n.kind = NodeKind::kBinary;
    n.op = op;
    n.args = {a, b};
    n.lshape.resize(r_);
    for (int k = 0; k < r_; ++k) n.lshape[k] = std::max(lo_.nodes[a].lshape[k], lo_.nodes[b].lshape[k]);
    return Add(std::move(n));
  }
  // Reduction over logical axes; identity when nothing is reduced.
  int Reduce(ReduceOp op, int x, const std::vector<std::pair<int, bool>>& axes) {
    if (axes.empty()) return x;
    Node n;
    n.kind = NodeKind::kReduce;
    n.rop = op;
    n.args = {x};
    n.lreduce = axes;
    n.lshape = lo_.nodes[x].lshape;
    for (auto [a, inner] : axes)
      if (!inner) n.lshape[a] = 1;
    ++lo_.num_reduces;
    return Add(std::move(n));
  }

  Expected<int> Instantiate(int v, const std::vector<int>& map);
  Expected<int> Get(int v, const std::vector<int>& map) {
    if (infos_[v].anchored) {
      // Anchored values keep their own map; dims of size > 1 must agree.
      const auto& sh = shapes_[v];
      for (size_t d = 0; d < sh.size(); ++d)
        if (sh[d] > 1 && infos_[v].map[d] != map[d])
          return Unsupported("value %" + std::to_string(v) + " is used along different axes than it was computed");
      return infos_[v].node;
    }
    return Instantiate(v, map);
  }
  std::vector<int> SubMap(const std::vector<int>& map, size_t rank) const {
    return std::vector<int>(map.end() - static_cast<long>(rank), map.end());
  }
  Status LowerOp(size_t i);
  // The node of op's first argument along its own map (anchored) or the
  // default one; *map receives that map.
  Expected<int> FirstArg(const ir::Op& op, std::vector<int>* map) {
    const int a = op.args[0];
    *map = infos_[a].anchored ? infos_[a].map : DefaultMap(shapes_[a].size());
    return Get(a, *map);
  }
  Status LowerReduction(const ir::Op& op, int v);
  Status LowerNormalization(const ir::Op& op, int v);
  Status LowerPool(const ir::Op& op, int v);
  // `last_axis`: the logical axis of the value's last dim (rotate_half's axis).
  Expected<int> ElementwiseNode(const ir::Op& op, const std::vector<int>& args, int v, int last_axis);
  // rotate_half of node x along logical axis `axis` of extent d (lowering.h).
  Expected<int> RotateHalf(int x, int axis, int64_t d);
  Expected<int> Rotated(int id, int axis, int64_t half, std::map<int, int>* memo);
  // torch rounds every op's result to its dtype; f16/bf16 results are
  // rounded the same way here so fused chains match eager op by op.
  int RoundTo(int v, int node) {
    ir::DType dt = types_[v].dtype;
    if (dt == ir::DType::kFloat32 || types_[v].is_scalar_constant) return node;
    return Unary(OpKind::kCast, node, {}, static_cast<int64_t>(dt));
  }

  const Task& task_;
  const ir::Graph& g_;
  int r_ = 0;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<ir::ValueType> types_;
  std::vector<ValInfo> infos_;
  std::map<std::pair<int, std::vector<int>>, int> memo_;
  std::map<int, int64_t> split_;  // logical axis -> groups (group_norm) or windows (a pool)
  std::map<int, int64_t> pooled_;  // logical axis -> window (> 1) of the pool that splits it
  // logical axis -> (extent before the pool, the part its windows cover) for
  // a floor-mode pool whose window does not divide the extent
  std::map<int, std::pair<int64_t, int64_t>> truncated_;
  Lowered lo_;
};

// Rounds a double to the nearest value representable in `dt` (f16: 11
// significant bits, bf16: 8; normal range), as ATen's scalar.to<scalar_t>().
double RoundScalar(double x, ir::DType dt) {
  if (dt == ir::DType::kFloat32 || x == 0 || !std::isfinite(x)) return static_cast<float>(x);
  int e = 0;
  double m = std::frexp(x, &e);
  int bits = dt == ir::DType::kFloat16 ? 11 : 8;
  return std::ldexp(std::nearbyint(std::ldexp(m, bits)), e - bits);
}

Expected<int> Lowerer::Rotated(int id, int axis, int64_t half, std::map<int, int>* memo) {
  if (lo_.nodes[id].lshape[axis] == 1) return id;  // the same at every coordinate along the axis
  if (auto it = memo->find(id); it != memo->end()) return it->second;
  Node n = lo_.nodes[id];
  switch (n.kind) {
    case NodeKind::kConst: return id;
    case NodeKind::kReduce: return Unsupported("rotate_half of a value reduced along other axes");
    case NodeKind::kRotSign: return Unsupported("rotate_half of a rotated value");
    case NodeKind::kLoad:
      if (n.rot_axis >= 0) return Unsupported("rotate_half of a rotated value");
      n.rot_axis = axis;
      n.rot_half = half;
      break;
    case NodeKind::kUnary:
    case NodeKind::kBinary:
      for (int& a : n.args) {
        auto r = Rotated(a, axis, half, memo);
        if (!r.ok()) return r.status();
        a = *r;
      }
      break;
  }
  return (*memo)[id] = Add(std::move(n));
}

Expected<int> Lowerer::RotateHalf(int x, int axis, int64_t d) {
  if (d < 2) return x;  // an empty axis (validation rejects an odd d)
  std::map<int, int> memo;
  auto r = Rotated(x, axis, d / 2, &memo);
  if (!r.ok()) return r.status();
  Node sign;
  sign.kind = NodeKind::kRotSign;
  sign.rot_axis = axis;
  sign.rot_half = d / 2;
  sign.lshape.assign(r_, 1);
  sign.lshape[axis] = d;
  return Binary(OpKind::kMul, *r, Add(std::move(sign)));  // exact: x * -1 and x * 1
}

Expected<int> Lowerer::ElementwiseNode(const ir::Op& op, const std::vector<int>& a, int v, int last_axis) {
  const auto& info = ir::GetOpInfo(op.kind);
  if (op.kind == OpKind::kRotateHalf) return RotateHalf(a[0], last_axis, shapes_[v].back());
  // A layout copy computes nothing: its value is its arg's node (the output's
  // strides, from the task, carry the layout).
  if (op.kind == OpKind::kContiguous) return a[0];
  if (info.category == OpCategory::kUnary) {
    std::vector<double> scalars = op.scalars;
    // ATen's pow(Tensor, Scalar) casts the exponent to the tensor's dtype.
    if (op.kind == OpKind::kPowScalar && !scalars.empty())
      scalars[0] = RoundScalar(scalars[0], types_[op.args[0]].dtype);
    return RoundTo(v, Unary(op.kind, a[0], std::move(scalars), op.ivalue));
  }
  if (info.category == OpCategory::kBinary) return RoundTo(v, Binary(op.kind, a[0], a[1]));
  return Unsupported(std::string("op '") + info.name + "' is not elementwise");
}

Expected<int> Lowerer::Instantiate(int v, const std::vector<int>& map) {
  auto key = std::make_pair(v, map);
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  int id = -1;
  const auto& sh = shapes_[v];
  if (v < static_cast<int>(g_.inputs.size())) {
    const auto& spec = task_.inputs[v];
    Node n;
    n.kind = NodeKind::kLoad;
    n.input = v;
    n.lshape = LShape(sh, map);
    n.lstrides.assign(r_, 0);
    for (size_t d = 0; d < sh.size(); ++d)
      if (sh[d] > 1) n.lstrides[map[d]] = spec.strides[d];
    id = Add(std::move(n));
  } else {
    const ir::Op& op = g_.ops[v - g_.inputs.size()];
    if (op.kind == OpKind::kConstant) {
      id = Const(op.scalars.at(0));
    } else {
      std::vector<int> args;
      for (int a : op.args) {
        auto n = Get(a, SubMap(map, shapes_[a].size()));
        if (!n.ok()) return n.status();
        args.push_back(*n);
      }
      auto n = ElementwiseNode(op, args, v, map.empty() ? -1 : map.back());
      if (!n.ok()) return n.status();
      id = *n;
    }
  }
  memo_[key] = id;
  return id;
}

Status Lowerer::LowerReduction(const ir::Op& op, int v) {
  const auto& sh = shapes_[op.args[0]];
  std::vector<int> ma;
  auto xr = FirstArg(op, &ma);
  if (!xr.ok()) return xr.status();
  int x = *xr;
  std::vector<int64_t> dims = op.dims;
  if (dims.empty())
    for (size_t d = 0; d < sh.size(); ++d) dims.push_back(static_cast<int64_t>(d));
  std::vector<std::pair<int, bool>> axes;
  double count = 1;
  for (int64_t d : dims) {
    count *= static_cast<double>(sh[d]);
    if (sh[d] > 1) axes.emplace_back(ma[d], false);
  }
  int out = -1;
  switch (op.kind) {
    case OpKind::kSum: out = Reduce(ReduceOp::kSum, x, axes); break;
    case OpKind::kMean: out = Binary(OpKind::kDiv, Reduce(ReduceOp::kSum, x, axes), Const(count)); break;
    case OpKind::kAmax: out = Reduce(ReduceOp::kMax, x, axes); break;
    case OpKind::kAmin: out = Reduce(ReduceOp::kMin, x, axes); break;
    case OpKind::kLogSumExp: {
      int m = Reduce(ReduceOp::kMax, x, axes);
      int mz = Unary(OpKind::kNeg, m);  // placeholder op, replaced by the inf guard below
      lo_.nodes[mz].inf_to_zero = true;
      int e = Unary(OpKind::kExp, Binary(OpKind::kSub, x, mz));
      out = Binary(OpKind::kAdd, Unary(OpKind::kLog, Reduce(ReduceOp::kSum, e, axes)), mz);
      break;
    }
    case OpKind::kNorm: {
      double p = op.scalars.at(0);
      if (std::isinf(p) && p > 0) {
        out = Reduce(ReduceOp::kMax, Unary(OpKind::kAbs, x), axes);
      } else if (p == 2) {
        out = Unary(OpKind::kSqrt, Reduce(ReduceOp::kSum, Binary(OpKind::kMul, x, x), axes));
      } else if (p == 1) {
        out = Reduce(ReduceOp::kSum, Unary(OpKind::kAbs, x), axes);
      } else if (p > 0) {
        int t = Unary(OpKind::kPowScalar, Unary(OpKind::kAbs, x), {p});
        out = Unary(OpKind::kPowScalar, Reduce(ReduceOp::kSum, t, axes), {1.0 / p});
      } else {
        return Unsupported("norm with p=" + std::to_string(p));
      }
      break;
    }
    default: return Unsupported("unexpected reduction");
  }
  out = RoundTo(v, out);
  std::vector<int> map;
  if (op.keepdim) {
    map = ma;
  } else {
    for (size_t d = 0; d < sh.size(); ++d)
      if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) == dims.end()) map.push_back(ma[d]);
  }
  infos_[v] = ValInfo{true, out, map};
  return Status::Ok();
}

Status Lowerer::LowerNormalization(const ir::Op& op, int v) {
  const auto& sh = shapes_[op.args[0]];
  const int rank = static_cast<int>(sh.size());
  std::vector<int> ma;
  auto xr = FirstArg(op, &ma);
  if (!xr.ok()) return xr.status();
  int x = *xr;
  int out = -1;
  if (op.kind == OpKind::kSoftmax || op.kind == OpKind::kLogSoftmax) {
    if (op.dims.size() != 1) return Unsupported("softmax over more than one dim");
    int64_t d = op.dims[0];
    std::vector<std::pair<int, bool>> axes;
    if (sh[d] > 1) axes.emplace_back(ma[d], false);
    int m = Reduce(ReduceOp::kMax, x, axes);
    int diff = Binary(OpKind::kSub, x, m);
    int e = Unary(OpKind::kExp, diff);
    int s = Reduce(ReduceOp::kSum, e, axes);
    out = op.kind == OpKind::kSoftmax ? Binary(OpKind::kDiv, e, s)
                                      : Binary(OpKind::kSub, diff, Unary(OpKind::kLog, s));
  } else {
    // layer_norm / group_norm: mean and biased variance over the normalised elements.
    std::vector<std::pair<int, bool>> axes;
    double count = 1;
    std::vector<int> wmap;  // map of weight/bias
    if (op.kind == OpKind::kLayerNorm) {
      int n = static_cast<int>(op.ivalue);
      if (n < 1 || n > rank) return Unsupported("layer_norm over " + std::to_string(n) + " dims of a rank-" +
                                                std::to_string(rank) + " tensor");
      for (int d = rank - n; d < rank; ++d) {
        count *= static_cast<double>(sh[d]);
        if (sh[d] > 1) axes.emplace_back(ma[d], false);
      }
      wmap = SubMap(ma, n);
    } else {
      if (rank < 2) return Unsupported("group_norm of a rank<2 tensor");
      int64_t c = sh[1], groups = op.ivalue;
      if (groups <= 0 || c % groups != 0) return Unsupported("group_norm: channels not divisible by groups");
      int64_t per = c / groups;
      count = static_cast<double>(per);
      if (per > 1) {
        if (groups > 1) {
          auto it = split_.find(ma[1]);
          if (it != split_.end() && it->second != groups)
            return Unsupported("two group_norms splitting one axis into different groups");
          split_[ma[1]] = groups;
          axes.emplace_back(ma[1], true);
        } else {
          axes.emplace_back(ma[1], false);
        }
      }
      for (int d = 2; d < rank; ++d) {
        count *= static_cast<double>(sh[d]);
        if (sh[d] > 1) axes.emplace_back(ma[d], false);
      }
      wmap = {ma[1]};
    }
    double eps = op.scalars.at(0);
    int cnt = Const(count);
    int mean = Binary(OpKind::kDiv, Reduce(ReduceOp::kSum, x, axes), cnt);
    int diff = Binary(OpKind::kSub, x, mean);
    int var = Binary(OpKind::kDiv, Reduce(ReduceOp::kSum, Binary(OpKind::kMul, diff, diff), axes), Const(count));
    int rstd = Unary(OpKind::kRsqrt, Binary(OpKind::kAdd, var, Const(eps)));
    out = Binary(OpKind::kMul, diff, rstd);
    for (size_t k = 1; k < op.args.size(); ++k) {
      int p = op.args[k];
      if (shapes_[p].size() != wmap.size())
        return Unsupported("normalisation weight/bias of rank " + std::to_string(shapes_[p].size()));
      auto wn = Get(p, wmap);
      if (!wn.ok()) return wn.status();
      out = Binary(k == 1 ? OpKind::kMul : OpKind::kAdd, out, *wn);
    }
  }
  infos_[v] = ValInfo{true, RoundTo(v, out), ma};
  return Status::Ok();
}

// A pool (stride = window, no padding) splits each pooled spatial axis of
// extent S into (S / w windows, w) -- group_norm's split, with the windows as
// the groups -- and reduces the inner parts: the result lives on the outer
// parts, its values downstream keep the input's map (rank is unchanged), and
// an output of it is strided along the outer parts only (Run).
Status Lowerer::LowerPool(const ir::Op& op, int v) {
  const auto& sh = shapes_[op.args[0]];
  std::vector<int> ma;
  auto xr = FirstArg(op, &ma);
  if (!xr.ok()) return xr.status();
  std::vector<std::pair<int, bool>> axes;
  double count = 1;
  for (size_t d = 2; d < sh.size(); ++d) {
    const int64_t w = op.dims[d - 2];
    count *= static_cast<double>(w);
    if (w == 1) continue;
    const int64_t windows = sh[d] / w;
    auto it = split_.find(ma[d]);
    if (it != split_.end() && it->second != windows)
      return Unsupported("two ops splitting one axis differently (group_norm groups or pool windows)");
    split_[ma[d]] = windows;
    pooled_[ma[d]] = w;
    // Floor mode: the last sh[d] % w elements along the axis are never read.
    if (sh[d] % w != 0) truncated_[ma[d]] = {sh[d], windows * w};
    axes.emplace_back(ma[d], true);
  }
  int out = -1;
  if (op.kind == OpKind::kAvgPool) {
    out = Binary(OpKind::kDiv, Reduce(ReduceOp::kSum, *xr, axes), Const(count));
  } else {
    out = Reduce(ReduceOp::kMax, *xr, axes);
  }
  infos_[v] = ValInfo{true, RoundTo(v, out), ma};
  return Status::Ok();
}

Status Lowerer::LowerOp(size_t i) {
  const ir::Op& op = g_.ops[i];
  const int v = g_.op_value(i);
  const auto& info = ir::GetOpInfo(op.kind);
  switch (info.category) {
    case OpCategory::kConstant: return Status::Ok();  // free
    case OpCategory::kReduction: return LowerReduction(op, v);
    case OpCategory::kNormalization: return LowerNormalization(op, v);
    case OpCategory::kPool: return LowerPool(op, v);
    case OpCategory::kContraction:
      return Status(StatusCode::kUnsupported, std::string(info.name) +
                                                  ": a contraction has no elementwise/row template (the gemm family serves it)");
    case OpCategory::kUnary:
    case OpCategory::kBinary:
    case OpCategory::kRearrange: break;  // rotate_half: ElementwiseNode
  }
  bool any_anchored = false;
  for (int a : op.args) any_anchored |= infos_[a].anchored;
  if (!any_anchored) return Status::Ok();  // free: instantiated by its consumers
  const auto& sh = shapes_[v];
  const size_t rv = sh.size();
  std::vector<int> map(rv);
  for (size_t k = 0; k < rv; ++k) {
    int strong = -1, weak = -1;
    for (int a : op.args) {
      if (!infos_[a].anchored) continue;
      const size_t ra = shapes_[a].size();
      if (k + ra < rv) continue;
      size_t j = k + ra - rv;
      int ax = infos_[a].map[j];
      if (shapes_[a][j] > 1) {
        if (strong >= 0 && strong != ax)
          return Unsupported(std::string("op '") + info.name + "' combines values laid along different axes");
        strong = ax;
      } else if (weak < 0) {
        weak = ax;
      }
    }
    map[k] = strong >= 0 ? strong : (weak >= 0 ? weak : static_cast<int>(r_ - rv + k));
  }
  for (size_t k = 0; k < rv; ++k)
    for (size_t j = k + 1; j < rv; ++j)
      if (sh[k] > 1 && sh[j] > 1 && map[k] == map[j])
        return Unsupported(std::string("op '") + info.name + "': cannot place broadcast dims");
  std::vector<int> args;
  for (int a : op.args) {
    auto n = Get(a, SubMap(map, shapes_[a].size()));
    if (!n.ok()) return n.status();
    args.push_back(*n);
  }
  auto n = ElementwiseNode(op, args, v, map.empty() ? -1 : map.back());
  if (!n.ok()) return n.status();
  infos_[v] = ValInfo{true, *n, map};
  return Status::Ok();
}

Expected<Lowered> Lowerer::Run() {
  if (task_.inputs.size() != g_.inputs.size())
    return Status(StatusCode::kInvalidArgument, "templates: task inputs do not match the graph");
  auto shapes = ir::InferShapes(g_, task_.inputs);
  if (!shapes.ok()) return shapes.status();
  shapes_ = std::move(*shapes);
  auto types = ir::InferTypes(g_);
  if (!types.ok()) return types.status();
  types_ = std::move(*types);
  for (const auto& in : task_.inputs) r_ = std::max(r_, static_cast<int>(in.shape.size()));
  infos_.assign(g_.num_values(), ValInfo{});
  lo_.inputs = task_.inputs;
  for (size_t i = 0; i < g_.ops.size(); ++i) DICE_RETURN_IF_ERROR(LowerOp(i));
  // A floor-mode pool reads only the part of the axis its windows cover: the
  // values before it iterate over that part (loads keep their strides).
  for (const auto& [a, t] : truncated_) {
    for (size_t o = 0; o < g_.outputs.size(); ++o) {
      const int v = g_.outputs[o];
      const auto& sh = shapes_[v];
      const std::vector<int> map = infos_[v].anchored ? infos_[v].map : DefaultMap(sh.size());
      for (size_t d = 0; d < sh.size(); ++d)
        if (map[d] == a && sh[d] == t.first)
          return Unsupported("output " + std::to_string(o) + " holds all " + std::to_string(t.first) +
                             " elements of an axis whose pool reads only the first " + std::to_string(t.second));
    }
    for (auto& n : lo_.nodes) {
      if (n.rot_axis == a) return Unsupported("rotate_half along an axis a floor-mode pool truncates");
      if (n.lshape[a] == t.first) n.lshape[a] = t.second;
    }
    lo_.pool_gaps = true;
  }
  if (task_.outputs.size() != g_.outputs.size())
    return Status(StatusCode::kInvalidArgument, "templates: task outputs do not match the graph");
  for (size_t o = 0; o < g_.outputs.size(); ++o) {
    int v = g_.outputs[o];
    const auto& sh = shapes_[v];
    std::vector<int> map = infos_[v].anchored ? infos_[v].map : DefaultMap(sh.size());
    auto n = Get(v, map);
    if (!n.ok()) return n.status();
    OutputRef ref;
    ref.node = *n;
    ref.pooled.assign(r_, false);
    for (size_t d = 0; d < sh.size(); ++d) {
      auto it = pooled_.find(map[d]);
      // A pooled value has the windows' extent along a split axis; a value
      // before the pool (also an output) has the whole extent.
      if (it != pooled_.end() && d >= 2 && sh[d] > 0 && split_.at(map[d]) == sh[d] &&
          lo_.nodes[*n].lshape[map[d]] == sh[d] * it->second)
        ref.pooled[map[d]] = true;
    }
    ref.dtype = task_.outputs[o].dtype;
    ref.alignment = task_.outputs[o].alignment;
    ref.lstrides.assign(r_, 0);
    const auto& ostrides = task_.outputs[o].strides;
    int64_t st = 1;
    for (size_t d = sh.size(); d-- > 0;) {
      int64_t s = d < ostrides.size() ? ostrides[d] : st;
      if (sh[d] > 1) ref.lstrides[map[d]] = s;
      st *= sh[d];
    }
    ref.numel = st;
    lo_.outputs.push_back(std::move(ref));
  }

  DICE_RETURN_IF_ERROR(MapToPhysicalSpace(r_, split_, &lo_));
  return std::move(lo_);
}

}  // namespace

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Expected<Lowered> Lower(const Task& task) {
  Status st = ir::Validate(task.graph);
  if (!st.ok()) return st;
  Lowerer l(task);
  return l.Run();
}

Status AppendEpilogueNodes(const ir::Graph& g, size_t linear, const std::vector<size_t>& skip,
                           std::map<int32_t, int>* node_of, Lowered* dag) {
  const int n_in = static_cast<int>(g.inputs.size());
  auto add = [&](Node n) {
    dag->nodes.push_back(std::move(n));
    return static_cast<int>(dag->nodes.size()) - 1;
  };
  auto refuse = [](const std::string& why) { return Status(StatusCode::kUnsupported, why); };
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (i == linear || std::find(skip.begin(), skip.end(), i) != skip.end()) continue;
    const ir::Op& op = g.ops[i];
    const ir::OpCategory cat = ir::GetOpInfo(op.kind).category;
    const std::string what = "op " + std::to_string(i) + " (" + ir::GetOpInfo(op.kind).name + ")";
    Node n;
    if (cat == ir::OpCategory::kConstant) {
      n.kind = NodeKind::kConst;
      n.value = op.scalars.at(0);
      (*node_of)[g.op_value(i)] = add(n);
      continue;
    }
    if (i < linear) return refuse(what + " precedes linear");
    if (op.kind == ir::OpKind::kContiguous) return refuse(what + ": a layout copy is not a GEMM epilogue op");
    if (cat != ir::OpCategory::kUnary && cat != ir::OpCategory::kBinary) {
      return refuse(what + " after linear is not elementwise (the epilogue computes one output element at a time)");
    }
    n.kind = cat == ir::OpCategory::kUnary ? NodeKind::kUnary : NodeKind::kBinary;
    n.op = op.kind;
    n.ivalue = op.ivalue;
    n.scalars = op.scalars;
    for (int32_t a : op.args) {
      auto it = node_of->find(a);
      if (it == node_of->end()) {
        return refuse("op " + std::to_string(i) + " reads %" + std::to_string(a) +
                      (a < n_in ? " (a group input the epilogue cannot read)" : ""));
      }
      n.args.push_back(it->second);
    }
    (*node_of)[g.op_value(i)] = add(n);
  }
  return Status::Ok();
}

}  // namespace dice::generator::tmpl
