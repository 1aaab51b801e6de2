// TorchScript node -> fusion-group IR translation (see capture.h).
#include "dice/torch_ext/capture.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_map>

#include <torch/csrc/jit/ir/ir.h>

#include "capture_builder.h"
#include "dice/reference/reference_executor.h"
#include "graph_pass_util.h"
#include "layout_copy.h"

namespace dice::torch_ext {
namespace {

using namespace capture_detail;  // NOLINT: this file and capture_handlers.cc share it

// Checks the node's value output (output 0; extra outputs are judged by the
// handlers): a float tensor when its type is known.
Status CheckOutputs(const Node* node) {
  for (size_t i = 0; i < 1 && i < node->outputs().size(); ++i) {
    const Value* out = node->output(i);
    if (!IsTensor(out)) return Unsupported(node, "output " + std::to_string(i) + " is not a tensor");
    auto tt = out->type()->expect<c10::TensorType>();
    if (auto st = tt->scalarType()) {
      if (!reference::FromScalarType(*st).ok())
        return Unsupported(node, std::string("output dtype ") + c10::toString(*st) + " unsupported");
    }
  }
  return Status::Ok();
}

// Translates `node` into `b`; binds its first output.
Status TranslateNode(const Node* node, Builder& b) {
  const auto& table = Handlers();
  auto it = table.find(node->kind());
  if (it == table.end()) return Unsupported(node, "not a fusible op");
  if (!node->maybeSchema()) return Unsupported(node, "no matching schema");
  if (!node->blocks().empty()) return Unsupported(node, "has sub-blocks");
  DICE_RETURN_IF_ERROR(CheckOutputs(node));
  for (size_t i = 1; i < node->outputs().size(); ++i) {
    if (node->output(i)->hasUses() && node->kind() != aten::max && node->kind() != aten::min)
      return Unsupported(node, "multiple outputs");
  }
  Ctx ctx{node, b};
  Expected<int32_t> id = Status(StatusCode::kInternal, "unset");
  try {
    id = it->second(ctx);
  } catch (const c10::Error& e) {
    return Unsupported(node, std::string("schema mismatch: ") + e.what_without_backtrace());
  }
  if (!id.ok()) return id.status();
  b.Bind(node->output(0), *id);
  return Status::Ok();
}

// Translates `node` alone into `b`: its tensor operands (0-d constants aside)
// become inputs 0, 1, ... in operand order, with their observed types.
Status TranslateAlone(const Node* node, Builder& b) {
  size_t index = 0;
  for (const Value* in : node->inputs()) {
    if (IsTensor(in) && !b.Has(in) && !ZeroDimConst(in)) {
      auto t = TypeOf(in, index);
      if (!t.ok()) return Status(StatusCode::kUnsupported, std::string(node->kind().toQualString()) + ": " +
                                                               t.status().message());
      b.AddInput(in, t->first, t->second);
    }
    ++index;
  }
  return TranslateNode(node, b);
}

}  // namespace

std::string UnsupportedReason(const Node* node) {
  if (Handlers().count(node->kind()) == 0) return "not a fusible op";
  Builder b;
  Status st = TranslateAlone(node, b);
  if (!st.ok()) {
    // The message starts with the op name; the reason is what follows.
    const std::string& m = st.message();
    auto pos = m.find(": ");
    return pos == std::string::npos ? m : m.substr(pos + 2);
  }
  b.graph.outputs.push_back(b.graph.num_values() - 1);
  Status v = ir::Validate(b.graph);
  if (!v.ok()) return "IR rejected it: " + v.message();
  return "";
}

bool IsEpilogueOp(const Node* node) {
  if (Handlers().count(node->kind()) == 0) return false;
  Builder b;
  if (!TranslateAlone(node, b).ok()) return false;
  const ir::Op* only = nullptr;
  for (const ir::Op& op : b.graph.ops) {
    if (op.kind == ir::OpKind::kConstant) continue;
    if (only != nullptr) return false;  // add with alpha != 1: mul + add
    only = &op;
  }
  if (only == nullptr || only->kind == ir::OpKind::kCast || only->kind == ir::OpKind::kContiguous) return false;
  const ir::OpCategory cat = ir::GetOpInfo(only->kind).category;
  if (cat != ir::OpCategory::kUnary && cat != ir::OpCategory::kBinary) return false;
  // Its tensor arguments are the inputs 0, 1, ... in operand order (not rsub's swap, not x + x).
  const int32_t n_inputs = static_cast<int32_t>(b.graph.inputs.size());
  int32_t next = 0;
  for (int32_t arg : only->args) {
    if (arg >= n_inputs) continue;  // a weak constant
    if (arg != next) return false;
    ++next;
  }
  return next == n_inputs;
}

bool IsScalarTensorConstant(const Value* value) { return ZeroDimConst(value).has_value(); }

bool IsNonTrivial(const Node* node) {
  return node->kind() != aten::to && node->kind() != aten::type_as;
}

Expected<CapturedGroup> CaptureSubgraph(const torch::jit::Graph& subgraph) {
  Builder b;
  CapturedGroup out;
  size_t index = 0;
  for (const Value* in : subgraph.inputs()) {
    auto t = TypeOf(in, index);
    if (!t.ok()) return t.status().WithContext("group input " + std::to_string(index));
    b.AddInput(in, t->first, t->second);
    ++index;
  }
  for (const Node* node : subgraph.nodes()) {
    // Constants (and constant int lists) are read through ConstIValue.
    if (node->kind() == c10::prim::Constant) continue;
    if (node->kind() == c10::prim::ListConstruct && ConstIValue(node->output())) continue;
    DICE_RETURN_IF_ERROR(TranslateNode(node, b));
    out.torch_ops.push_back(node->kind().toQualString());
  }
  for (const Value* o : subgraph.outputs()) {
    auto id = b.Find(o);
    if (!id) return Status(StatusCode::kUnsupported, "group output %" + o->debugName() + " is not computed in the group");
    b.graph.outputs.push_back(*id);
  }
  DICE_RETURN_IF_ERROR(ir::Validate(b.graph));
  out.graph = std::move(b.graph);
  out.canonical = ir::Canonical(out.graph);
  out.summary = ir::Summary(out.graph);
  return out;
}

}  // namespace dice::torch_ext
