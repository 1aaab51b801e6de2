// layout.cc — see layout.h.
#include "layout.h"

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

namespace dice::generator::tmpl {
namespace {

// Whether `shape` spans F along every axis that F does not broadcast.
bool FullSize(const std::vector<int64_t>& shape, const std::vector<int64_t>& F) {
  if (shape.size() != F.size()) return false;
  for (size_t a = 0; a < F.size(); ++a)
    if (F[a] > 1 && shape[a] != F[a]) return false;
  return true;
}

// The axes of extent > 1, outermost first, in which `strides` are dense
// row-major (innermost stride 1, each outer stride = inner stride * inner
// extent); empty when they are not. With `gaps`, an outer stride may exceed
// that (row-major with gaps: a floor-mode pool's input, whose uncovered tail
// elements the iteration skips).
std::vector<int> DenseOrder(const std::vector<int64_t>& strides, const std::vector<int64_t>& F, bool gaps = false) {
  std::vector<int> axes;
  for (size_t a = 0; a < F.size(); ++a)
    if (F[a] > 1) axes.push_back(static_cast<int>(a));
  // Stable: equal strides (an overlap) keep logical order and fail below.
  std::stable_sort(axes.begin(), axes.end(), [&](int x, int y) { return strides[x] > strides[y]; });
  int64_t expected = 1;
  for (size_t k = axes.size(); k-- > 0;) {
    const int64_t s = strides[axes[k]];
    if (gaps ? (s < expected || (k + 1 == axes.size() && s != 1)) : s != expected) return {};
    expected = s * F[axes[k]];
  }
  return axes;
}

template <typename T>
std::vector<T> Permuted(const std::vector<T>& v, const std::vector<int>& order) {
  if (v.size() != order.size()) return v;  // e.g. empty strides of a non-load node
  std::vector<T> out(v.size());
  for (size_t k = 0; k < order.size(); ++k) out[k] = v[order[k]];
  return out;
}

std::vector<int> Remapped(const std::vector<int>& axes, const std::vector<int>& inverse) {
  std::vector<int> out;
  out.reserve(axes.size());
  for (int a : axes) out.push_back(inverse[a]);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::optional<std::vector<int>> MemoryOrder(const Lowered& lo) {
  const auto& F = lo.F;
  std::vector<int> common;
  bool any = false;
  auto consider = [&](const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
    if (!FullSize(shape, F) || strides.size() != F.size()) return true;
    std::vector<int> order = DenseOrder(strides, F, lo.pool_gaps);
    if (order.empty()) return false;
    if (any && order != common) return false;
    common = std::move(order);
    any = true;
    return true;
  };
  for (const auto& n : lo.nodes)
    if (n.kind == NodeKind::kLoad && !consider(n.shape, n.strides)) return std::nullopt;
  for (const auto& o : lo.outputs)
    if (!consider(lo.nodes[o.node].shape, o.strides)) return std::nullopt;
  if (!any || common.empty()) return std::nullopt;
  std::vector<int> order;
  for (size_t a = 0; a < F.size(); ++a)
    if (F[a] <= 1) order.push_back(static_cast<int>(a));
  order.insert(order.end(), common.begin(), common.end());
  std::vector<int> identity(F.size());
  std::iota(identity.begin(), identity.end(), 0);
  if (order == identity) return std::nullopt;
  return order;
}

void PermuteAxes(const std::vector<int>& order, Lowered* lo) {
  std::vector<int> inverse(order.size());
  for (size_t k = 0; k < order.size(); ++k) inverse[order[k]] = static_cast<int>(k);
  lo->F = Permuted(lo->F, order);
  for (auto& n : lo->nodes) {
    n.shape = Permuted(n.shape, order);
    n.strides = Permuted(n.strides, order);
    n.reduce_axes = Remapped(n.reduce_axes, inverse);
    if (n.rot_axis >= 0) n.rot_axis = inverse[n.rot_axis];
  }
  lo->reduce_axes = Remapped(lo->reduce_axes, inverse);
  for (auto& o : lo->outputs) o.strides = Permuted(o.strides, order);
}

std::optional<TransposeOrders> TransposePlan(const Lowered& lo) {
  const auto& F = lo.F;
  if (lo.num_reduces > 0) return std::nullopt;  // (Lower counts every Reduce node it makes)
  TransposeOrders p;
  for (const auto& o : lo.outputs) {
    if (!FullSize(lo.nodes[o.node].shape, F)) continue;  // broadcast output: guarded store
    if (o.strides.size() != F.size()) return std::nullopt;
    std::vector<int> order = DenseOrder(o.strides, F);
    if (order.empty()) return std::nullopt;
    if (p.out_order.empty()) p.out_order = std::move(order);
    else if (order != p.out_order) return std::nullopt;
  }
  if (p.out_order.empty()) return std::nullopt;
  for (size_t id = 0; id < lo.nodes.size(); ++id) {
    const Node& n = lo.nodes[id];
    if (n.kind != NodeKind::kLoad) continue;
    if (!FullSize(n.shape, F)) {
      p.direct_loads.push_back(static_cast<int>(id));
      continue;
    }
    if (n.strides.size() != F.size()) return std::nullopt;
    std::vector<int> order = DenseOrder(n.strides, F);
    if (order.empty()) return std::nullopt;
    if (order == p.out_order) {
      p.direct_loads.push_back(static_cast<int>(id));
      continue;
    }
    if (p.in_order.empty()) p.in_order = std::move(order);
    else if (order != p.in_order) return std::nullopt;  // a third order
    p.tiled_loads.push_back(static_cast<int>(id));
  }
  if (p.tiled_loads.empty()) return std::nullopt;
  p.a_out = p.out_order.back();
  p.a_in = p.in_order.back();
  if (p.a_out == p.a_in) return std::nullopt;
  return p;
}

bool ToMemoryOrder(Lowered* lo) {
  auto order = MemoryOrder(*lo);
  if (!order) return false;
  PermuteAxes(*order, lo);
  return true;
}

namespace {

// Whether every tensor of `lo` walks axes (a, a + 1) as one (MergeAdjacentAxes).
bool Mergeable(const Lowered& lo, size_t a) {
  const size_t b = a + 1;
  const int64_t fa = lo.F[a], fb = lo.F[b];
  auto same_walk = [&](const std::vector<int64_t>& shape, const std::vector<int64_t>* strides) {
    const bool both_one = shape[a] == 1 && shape[b] == 1, both_full = shape[a] == fa && shape[b] == fb;
    if (!both_one && !both_full) return false;
    if (both_one || strides == nullptr) return true;
    if (strides->size() != lo.F.size()) return false;
    return (*strides)[a] == (*strides)[b] * fb;
  };
  for (const Node& n : lo.nodes) {
    if (n.shape.size() != lo.F.size()) return false;
    if (!same_walk(n.shape, n.kind == NodeKind::kLoad ? &n.strides : nullptr)) return false;
  }
  for (const OutputRef& o : lo.outputs)
    if (!same_walk(lo.nodes[o.node].shape, &o.strides)) return false;
  return true;
}

void MergeAt(size_t a, Lowered* lo) {
  const size_t b = a + 1;
  auto merge_shape = [&](std::vector<int64_t>* shape) {
    (*shape)[a] *= (*shape)[b];
    shape->erase(shape->begin() + static_cast<std::ptrdiff_t>(b));
  };
  auto merge_strides = [&](std::vector<int64_t>* strides) {
    if (strides->size() != lo->F.size()) return;
    (*strides)[a] = (*strides)[b];
    strides->erase(strides->begin() + static_cast<std::ptrdiff_t>(b));
  };
  for (Node& n : lo->nodes) {
    merge_shape(&n.shape);
    merge_strides(&n.strides);
  }
  for (OutputRef& o : lo->outputs) merge_strides(&o.strides);
  merge_shape(&lo->F);
}

}  // namespace

bool MergeAdjacentAxes(Lowered* lo) {
  if (lo->num_reduces > 0 || lo->pool_gaps || !lo->reduce_axes.empty()) return false;
  for (const Node& n : lo->nodes)
    if (n.kind == NodeKind::kReduce || n.kind == NodeKind::kRotSign || n.rot_axis >= 0) return false;
  bool merged = false;
  for (size_t a = 0; a + 1 < lo->F.size();) {
    if (Mergeable(*lo, a)) {
      MergeAt(a, lo);  // F shrinks; (a, a + 1) is the next pair to try
      merged = true;
    } else {
      ++a;
    }
  }
  return merged;
}

}  // namespace dice::generator::tmpl
