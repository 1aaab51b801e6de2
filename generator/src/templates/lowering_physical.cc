// lowering_physical.cc — the last step of Lower (lowering.h): from the
// logical iteration space the Lowerer built (lowering.cc) to the physical one
// F, where group_norm and pools split an axis in two.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "lowering.h"

namespace dice::generator::tmpl {
namespace {
Status Unsupported(const std::string& what) { return Status(StatusCode::kUnsupported, "templates: " + what); }
}  // namespace

Status MapToPhysicalSpace(int r, const std::map<int, int64_t>& split, Lowered* lo) {
  // Logical extents, then the physical space (group_norm splits an axis).
  std::vector<int64_t> lext(r, 1);
  for (const auto& n : lo->nodes)
    for (int a = 0; a < r; ++a) {
      if (n.lshape[a] == 1) continue;
      if (lext[a] != 1 && lext[a] != n.lshape[a]) return Unsupported("inconsistent extents along one axis");
      lext[a] = n.lshape[a];
    }
  std::vector<std::vector<int>> phys(r);
  std::vector<int64_t> F;
  for (int a = 0; a < r; ++a) {
    auto it = split.find(a);
    if (it != split.end() && lext[a] > 1) {
      phys[a] = {static_cast<int>(F.size()), static_cast<int>(F.size() + 1)};
      F.push_back(it->second);
      F.push_back(lext[a] / it->second);
    } else {
      phys[a] = {static_cast<int>(F.size())};
      F.push_back(lext[a]);
    }
  }
  const size_t P = F.size();
  auto to_phys_strides = [&](const std::vector<int64_t>& ls, const std::vector<int64_t>& lshape) {
    std::vector<int64_t> s(P, 0);
    for (int a = 0; a < r; ++a) {
      if (lshape[a] == 1) continue;
      if (phys[a].size() == 2) {
        s[phys[a][0]] = ls[a] * F[phys[a][1]];
        s[phys[a][1]] = ls[a];
      } else {
        s[phys[a][0]] = ls[a];
      }
    }
    return s;
  };
  std::vector<int> R;
  bool have_r = false;
  for (auto& n : lo->nodes) {
    if (n.rot_axis >= 0) {
      if (phys[n.rot_axis].size() != 1) return Unsupported("rotate_half along an axis a group_norm or pool splits");
      n.rot_axis = phys[n.rot_axis][0];
    }
    switch (n.kind) {
      case NodeKind::kConst: n.shape.assign(P, 1); break;
      case NodeKind::kRotSign:
        n.shape.assign(P, 1);
        n.shape[n.rot_axis] = F[n.rot_axis];
        break;
      case NodeKind::kLoad:
        n.shape.assign(P, 1);
        for (int a = 0; a < r; ++a)
          if (n.lshape[a] > 1)
            for (int p : phys[a]) n.shape[p] = F[p];
        n.strides = to_phys_strides(n.lstrides, n.lshape);
        break;
      case NodeKind::kUnary: n.shape = lo->nodes[n.args[0]].shape; break;
      case NodeKind::kBinary: {
        const auto& x = lo->nodes[n.args[0]].shape;
        const auto& y = lo->nodes[n.args[1]].shape;
        n.shape.resize(P);
        for (size_t p = 0; p < P; ++p) n.shape[p] = std::max(x[p], y[p]);
        break;
      }
      case NodeKind::kReduce: {
        n.shape = lo->nodes[n.args[0]].shape;
        for (auto [a, inner] : n.lreduce) {
          if (inner && phys[a].size() == 2) {
            n.reduce_axes.push_back(phys[a][1]);
          } else {
            for (int p : phys[a]) n.reduce_axes.push_back(p);
          }
        }
        std::sort(n.reduce_axes.begin(), n.reduce_axes.end());
        for (int p : n.reduce_axes) {
          if (n.shape[p] != F[p]) return Unsupported("reduction over a broadcast axis");
          n.shape[p] = 1;
        }
        if (!have_r) {
          R = n.reduce_axes;
          have_r = true;
        } else if (R != n.reduce_axes) {
          return Unsupported("two reductions over different axes");
        }
        break;
      }
    }
  }
  for (auto& o : lo->outputs) {
    o.strides = to_phys_strides(o.lstrides, lo->nodes[o.node].lshape);
    // A pooled output steps along the windows (the outer part) by its own stride.
    for (int a = 0; a < r; ++a)
      if (o.pooled[a]) o.strides[phys[a][0]] = o.lstrides[a];
    // Physical output strides follow the node's physical shape (a reduced
    // group_norm statistic keeps its group axis).
    for (size_t p = 0; p < P; ++p)
      if (lo->nodes[o.node].shape[p] == 1) o.strides[p] = 0;
  }
  lo->F = std::move(F);
  lo->reduce_axes = std::move(R);
  return Status::Ok();
}

}  // namespace dice::generator::tmpl
