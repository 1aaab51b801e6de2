// Private: what capture.cc (TranslateNode, CaptureSubgraph) and
// capture_handlers.cc (one handler per fusible aten op) share: the IR
// Builder that maps TorchScript values to IR value ids, the per-node
// translation context Ctx, and the handler table. Not installed; no other
// file includes it. Thread-compatible (a Builder belongs to one capture).
#pragma once

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

#include "dice/core/ir.h"
#include "dice/core/status.h"
#include "dice/reference/reference_executor.h"
#include "graph_pass_util.h"

namespace dice::torch_ext::capture_detail {

using torch::jit::Node;
using torch::jit::Value;
namespace aten = c10::aten;

inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline Status Unsupported(const Node* node, const std::string& why) {
  return Status(StatusCode::kUnsupported, std::string(node->kind().toQualString()) + ": " + why);
}

// Builds IR while walking nodes; maps torch values to IR value ids.
class Builder {
 public:
  ir::Graph graph;

  int32_t AddInput(const Value* v, ir::DType dtype, int rank) {
    // Inputs come first: only legal before any op was added.
    graph.inputs.push_back({dtype, rank});
    int32_t id = static_cast<int32_t>(graph.inputs.size() - 1);
    ids_[v] = id;
    return id;
  }
  bool Has(const Value* v) const { return ids_.count(v) != 0; }
  std::optional<int32_t> Find(const Value* v) const {
    auto it = ids_.find(v);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  void Bind(const Value* v, int32_t id) { ids_[v] = id; }

  int32_t Emit(ir::OpKind kind, std::vector<int32_t> args, std::vector<double> scalars = {},
               std::vector<int64_t> dims = {}, bool keepdim = false, int64_t ivalue = 0) {
    ir::Op op;
    op.kind = kind;
    op.args = std::move(args);
    op.scalars = std::move(scalars);
    op.dims = std::move(dims);
    op.keepdim = keepdim;
    op.ivalue = ivalue;
    graph.ops.push_back(std::move(op));
    return graph.op_value(graph.ops.size() - 1);
  }
  int32_t Const(double c) { return Emit(ir::OpKind::kConstant, {}, {c}); }

 private:
  std::unordered_map<const Value*, int32_t> ids_;
};

inline bool IsTensor(const Value* v) { return v->type()->kind() == c10::TypeKind::TensorType; }

// Complete dtype + rank of a tensor value, or a reason.
inline Expected<std::pair<ir::DType, int>> TypeOf(const Value* v, size_t index) {
  auto tt = v->type()->cast<c10::TensorType>();
  if (!tt) return Status(StatusCode::kUnsupported, "operand " + std::to_string(index) + " is not a tensor");
  auto st = tt->scalarType();
  auto rank = tt->dim();
  if (!st && v->node()->kind() == c10::prim::GetAttr)
    // The profiling executor records no types for module attributes: an
    // unfrozen parameter (group_norm's weight) keeps its op out of groups.
    return Status(StatusCode::kUnsupported, "input " + std::to_string(index) + " is module attribute '" +
                                                v->node()->s(c10::attr::name) +
                                                "' of unknown type: freeze the module (torch.jit.freeze, or "
                                                "dice::torch_ext::optimize, which freezes) to fuse it");
  if (!st) return Status(StatusCode::kUnsupported, "unknown dtype (input " + std::to_string(index) + ")");
  if (!rank) return Status(StatusCode::kUnsupported, "unknown rank (input " + std::to_string(index) + ")");
  auto dt = reference::FromScalarType(*st);
  if (!dt.ok()) {
    std::string name = c10::toString(*st);
    // "Long" -> "int64" style names read better in reports.
    switch (*st) {
      case at::kLong: name = "int64"; break;
      case at::kInt: name = "int32"; break;
      case at::kDouble: name = "float64"; break;
      case at::kBool: name = "bool"; break;
      default: break;
    }
    return Status(StatusCode::kUnsupported, "unsupported dtype " + name + " (input " + std::to_string(index) + ")");
  }
  return std::make_pair(*dt, static_cast<int>(*rank));
}

inline Expected<int> RankOf(const Value* v) {
  auto t = TypeOf(v, 0);
  if (!t.ok()) return t.status();
  return t->second;
}

// Context for translating one node.
struct Ctx {
  const Node* node;
  Builder& b;

  const Value* Named(const char* name) const {
    // namedInput needs a schema; all nodes we translate have one.
    return node->namedInput(c10::Symbol::attr(name));
  }
  bool HasNamed(const char* name) const {
    const auto* schema = node->maybeSchema();
    if (!schema) return false;
    return schema->argumentIndexWithName(name).has_value();
  }
  // A tensor operand: its IR id (from the builder) or an error.
  Expected<int32_t> Tensor(const Value* v) const {
    if (auto id = b.Find(v)) return *id;
    return Unsupported(node, "operand %" + v->debugName() + " is not available in the group");
  }
  // A tensor or constant-scalar operand.
  Expected<int32_t> Operand(const Value* v) const {
    if (IsTensor(v)) {
      if (b.Has(v)) return Tensor(v);
      if (auto z = ZeroDimConst(v)) return b.Const(*z);
      return Tensor(v);
    }
    if (auto c = ScalarConst(v)) return b.Const(*c);
    return Unsupported(node, "non-constant scalar operand %" + v->debugName());
  }
  Expected<double> Scalar(const Value* v, const char* what) const {
    if (auto c = ScalarConst(v)) return *c;
    return Unsupported(node, std::string("non-constant ") + what);
  }
  std::optional<double> OptScalar(const Value* v) const {
    if (IsNoneConst(v)) return std::nullopt;
    return ScalarConst(v);
  }
  // Normalised, sorted, unique dims from an int or int[] constant (None / [] -> all: empty).
  Expected<std::vector<int64_t>> Dims(const Value* v, int rank) const {
    std::vector<int64_t> dims;
    if (IsNoneConst(v)) return dims;
    auto iv = ConstIValue(v);
    if (!iv) return Unsupported(node, "non-constant dim");
    if (iv->isInt()) {
      dims.push_back(iv->toInt());
    } else if (iv->isIntList()) {
      for (int64_t d : iv->toIntVector()) dims.push_back(d);
    } else {
      return Unsupported(node, "dim is not an int or int list");
    }
    for (auto& d : dims) {
      int64_t r = std::max(rank, 1);
      if (d < -r || d >= r) return Unsupported(node, "dim " + std::to_string(d) + " out of range for rank " + std::to_string(rank));
      if (d < 0) d += r;
      if (rank == 0) d = 0;
    }
    std::sort(dims.begin(), dims.end());
    dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
    if (rank == 0) dims.clear();
    return dims;
  }
  Expected<bool> Bool(const Value* v, const char* what) const {
    auto iv = torch::jit::toIValue(v);
    if (!iv || !iv->isBool()) return Unsupported(node, std::string("non-constant ") + what);
    return iv->toBool();
  }
  Status RequireNoneDtype() const {
    if (HasNamed("dtype") && !IsNoneConst(Named("dtype"))) return Unsupported(node, "dtype argument is not None");
    return Status::Ok();
  }
};

#define DICE_ASSIGN(lhs, expr)                 \
  auto lhs##_e = (expr);                       \
  if (!lhs##_e.ok()) return lhs##_e.status();  \
  auto lhs = std::move(lhs##_e).value()

using Handler = std::function<Expected<int32_t>(Ctx&)>;

/// The translation of every fusible aten op, keyed by its symbol: each
/// handler emits the node's IR op(s) into ctx.b and returns the value id of
/// its first output, or kUnsupported naming why (capture_handlers.cc).
const std::unordered_map<c10::Symbol, Handler>& Handlers();

}  // namespace dice::torch_ext::capture_detail
