// The fusion pass: supported nodes -> dice::FusionGroup nodes (fusion_pass.h).
#include "dice/torch_ext/fusion_pass.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/pass_manager.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/passes/utils/subgraph_utils.h>

#include "dice/torch_ext/optimize.h"

namespace dice::torch_ext {

c10::Symbol FusionGroupSymbol() {
  static const c10::Symbol sym = c10::Symbol::fromQualString("dice::FusionGroup");
  return sym;
}
c10::Symbol IrAttr() {
  static const c10::Symbol sym = c10::Symbol::attr("dice_ir");
  return sym;
}
c10::Symbol GroupIdAttr() {
  static const c10::Symbol sym = c10::Symbol::attr("dice_group_id");
  return sym;
}

namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

bool IsTensorValue(const Value* v) { return v->type()->kind() == c10::TypeKind::TensorType; }

// Nodes not worth listing as "left out": plumbing that is never fused.
bool IsPlumbing(const Node* n) {
  static const std::unordered_set<c10::Symbol> kinds = {
      c10::prim::Constant,      c10::prim::GetAttr,      c10::prim::ListConstruct, c10::prim::ListUnpack,
      c10::prim::TupleConstruct, c10::prim::TupleUnpack, c10::prim::Return,        c10::prim::Param,
      c10::prim::profile,       c10::prim::profile_ivalue, c10::prim::NumToTensor, c10::prim::device,
      c10::prim::dtype,         c10::prim::RaiseException, c10::prim::Uninitialized};
  return kinds.count(n->kind()) != 0;
}

// A non-tensor outer value the subgraph can own: a constant or a list of constants.
bool IsInlinableConstant(const Value* v) {
  if (IsTensorValue(v)) return IsScalarTensorConstant(v);
  const Node* n = v->node();
  if (n->kind() == c10::prim::Constant) return true;
  if (n->kind() != c10::prim::ListConstruct) return false;
  for (const Value* e : n->inputs())
    if (e->node()->kind() != c10::prim::Constant) return false;
  return true;
}

// The reduced axes of a reduction node, as a comparable signature: "" for a
// node that reduces nothing; "dims:1" / "dims:0,2" (normalised with the input
// rank when known) or "dims:all" for ops with a `dim` argument; a signature
// unique to the node where the axes cannot be named (group_norm's channel
// groups, unknown ranks); layer_norm / rms_norm name their last axes.
std::string ReductionSignature(const Node* n) {
  static const std::unordered_set<std::string> with_dim = {
      "aten::sum",     "aten::mean",        "aten::amax",       "aten::amin",     "aten::max",
      "aten::min",     "aten::softmax",     "aten::log_softmax", "aten::_softmax", "aten::_log_softmax",
      "aten::logsumexp", "aten::norm",      "aten::linalg_vector_norm", "aten::prod", "aten::var",
      "aten::std",     "aten::argmax",      "aten::argmin",     "aten::all",      "aten::any"};
  static const std::unordered_set<std::string> implicit = {
      "aten::layer_norm", "aten::group_norm", "aten::instance_norm", "aten::rms_norm",
      "aten::native_layer_norm", "aten::native_group_norm"};
  const std::string kind = n->kind().toQualString();
  if (!implicit.count(kind) && !with_dim.count(kind)) return "";
  const std::string unique = "node:" + std::to_string(reinterpret_cast<uintptr_t>(n));
  if (n->inputs().empty()) return unique;
  std::optional<size_t> rank;
  if (auto tt = n->input(0)->type()->cast<c10::TensorType>()) rank = tt->dim();
  if (implicit.count(kind)) {
    // layer_norm / rms_norm reduce over the last len(normalized_shape) axes.
    const c10::FunctionSchema* schema = n->maybeSchema();
    auto idx = schema ? schema->argumentIndexWithName("normalized_shape") : std::nullopt;
    auto iv = idx ? torch::jit::toIValue(n->input(*idx)) : std::nullopt;
    if (!iv || !iv->isIntList() || !rank || iv->toIntVector().size() > *rank) return unique;
    const size_t k = iv->toIntVector().size();
    std::string sig = "dims:";
    for (size_t d = *rank - k; d < *rank; ++d) sig += (d > *rank - k ? "," : "") + std::to_string(d);
    return sig;
  }
  const c10::FunctionSchema* schema = n->maybeSchema();
  if (schema == nullptr) return unique;
  auto idx = schema->argumentIndexWithName("dim");
  if (!idx) {
    // Binary max/min (elementwise) reduce nothing; a whole-tensor sum/amax does.
    if ((kind == "aten::max" || kind == "aten::min") && n->inputs().size() == 2) return "";
    return "dims:all";
  }
  auto iv = torch::jit::toIValue(n->input(*idx));
  if (!iv) return unique;
  std::vector<int64_t> dims;
  if (iv->isInt()) dims.push_back(iv->toInt());
  else if (iv->isIntList()) dims = iv->toIntVector();
  else if (iv->isNone()) return "dims:all";
  else return unique;
  for (auto& d : dims)
    if (d < 0 && rank) d += static_cast<int64_t>(*rank);
  std::sort(dims.begin(), dims.end());
  if (dims.empty()) return "dims:all";
  std::string sig = "dims:";
  for (size_t i = 0; i < dims.size(); ++i) sig += (i ? "," : "") + std::to_string(dims[i]);
  return sig;
}

// Reduction signatures of a node or of every node inside a fusion group.
void CollectReductions(const Node* n, std::unordered_set<std::string>* sigs) {
  if (n->kind() == FusionGroupSymbol()) {
    for (const Node* inner : n->g(c10::attr::Subgraph)->nodes()) CollectReductions(inner, sigs);
    return;
  }
  std::string sig = ReductionSignature(n);
  if (!sig.empty()) sigs->insert(std::move(sig));
}

// Moves non-tensor constant inputs of `group` into its subgraph.
void InlineConstantInputs(Node* group) {
  auto subgraph = group->g(c10::attr::Subgraph);
  for (int64_t i = static_cast<int64_t>(group->inputs().size()) - 1; i >= 0; --i) {
    Value* outer = group->input(i);
    if (!IsInlinableConstant(outer)) continue;
    Node* def = outer->node();
    torch::jit::WithInsertPoint guard(subgraph->block()->nodes().front());
    Value* inner;
    if (def->kind() == c10::prim::Constant) {
      Node* clone = subgraph->createClone(def, [](Value* v) -> Value* { return v; });
      subgraph->insertNode(clone);
      inner = clone->output();
    } else {
      std::vector<Value*> elems;
      for (Value* e : def->inputs()) {
        Node* c = subgraph->createClone(e->node(), [](Value* v) -> Value* { return v; });
        subgraph->insertNode(c);
        elems.push_back(c->output());
      }
      Node* list = subgraph->createList(outer->type()->expectRef<c10::ListType>().getElementType(), elems);
      subgraph->insertNode(list);
      inner = list->output();
    }
    subgraph->inputs()[i]->replaceAllUsesWith(inner);
    subgraph->eraseInput(i);
    group->removeInput(i);
  }
}

// Turns tensor constants that SubgraphUtils cloned into the subgraph back into
// group inputs: the IR has no tensor constants (weights are kernel inputs).
void LiftTensorConstants(Node* group) {
  auto subgraph = group->g(c10::attr::Subgraph);
  std::vector<Node*> consts;
  for (Node* n : subgraph->nodes())
    if (n->kind() == c10::prim::Constant && IsTensorValue(n->output()) && !IsScalarTensorConstant(n->output()))
      consts.push_back(n);
  for (Node* inner : consts) {
    Node* outer = group->owningGraph()->createClone(inner, [](Value* v) -> Value* { return v; });
    outer->insertBefore(group);
    outer->output()->setType(inner->output()->type());
    group->addInput(outer->output());
    Value* in = subgraph->addInput()->copyMetadata(inner->output());
    inner->output()->replaceAllUsesWith(in);
    inner->destroy();
  }
}

class Fuser {
 public:
  Fuser(std::shared_ptr<torch::jit::Graph> graph, int min_nontrivial)
      : graph_(std::move(graph)), min_nontrivial_(min_nontrivial) {}

  FusionPassResult Run() {
    FusionPassResult result;
    Block* block = graph_->block();
    // Support decisions are made once, on the original nodes.
    for (Node* n : block->nodes()) {
      if (n->kind() == FusionGroupSymbol()) continue;
      std::string reason = UnsupportedReason(n);
      if (reason.empty()) {
        supported_.insert(n);
      } else if (!IsPlumbing(n)) {
        result.left_out.push_back({n->kind().toQualString(), reason});
      }
    }
    if (supported_.empty() && !HasGroups()) return result;

    alias_db_ = std::make_unique<torch::jit::AliasDb>(graph_);
    bool any_changed = true;
    while (any_changed) {
      any_changed = false;
      for (auto it = block->nodes().rbegin(); it != block->nodes().rend();) {
        bool changed = false;
        it = ScanNode(*it, &changed);
        any_changed |= changed;
      }
    }

    // Finalise: constants in, IR out, trivial groups dissolved.
    std::vector<Node*> groups;
    for (Node* n : block->nodes())
      if (n->kind() == FusionGroupSymbol()) groups.push_back(n);
    for (Node* group : groups) {
      InlineConstantInputs(group);
      LiftTensorConstants(group);
      auto subgraph = group->g(c10::attr::Subgraph);
      auto captured = CaptureSubgraph(*subgraph);
      if (!captured.ok()) {
        result.left_out.push_back({FusionGroupSymbol().toQualString(), captured.status().message()});
        torch::jit::SubgraphUtils::unmergeSubgraph(group);
        continue;
      }
      int nontrivial = 0;
      for (Node* n : subgraph->nodes())
        if (n->kind() != c10::prim::Constant && n->kind() != c10::prim::ListConstruct && IsNonTrivial(n)) ++nontrivial;
      if (nontrivial < min_nontrivial_) {
        torch::jit::SubgraphUtils::unmergeSubgraph(group);
        continue;
      }
      if (group->hasAttribute(IrAttr()) && group->s(IrAttr()) == captured->canonical &&
          group->hasAttribute(GroupIdAttr())) {
        result.group_ids.push_back(static_cast<int>(group->i(GroupIdAttr())));
        continue;  // unchanged group from an earlier run
      }
      int id = RegisterGroup(*captured);
      group->s_(IrAttr(), captured->canonical);
      group->i_(GroupIdAttr(), id);
      result.group_ids.push_back(id);
    }
    torch::jit::EliminateDeadCode(graph_);
    torch::jit::RemoveTensorTypeSpecializations(graph_);
    return result;
  }

 private:
  bool HasGroups() const {
    for (Node* n : graph_->nodes())
      if (n->kind() == FusionGroupSymbol()) return true;
    return false;
  }

  bool Fusible(Node* n) const { return n->kind() == FusionGroupSymbol() || supported_.count(n) != 0; }

  // Grows the group rooted at `n` by one producer; returns where to continue.
  torch::jit::graph_node_list_iterator ScanNode(Node* n, bool* changed) {
    if (!Fusible(n)) return ++n->reverseIterator();
    Node* group = n;
    if (n->kind() != FusionGroupSymbol()) {
      supported_.erase(n);
      group = torch::jit::SubgraphUtils::createSingletonSubgraph(n, FusionGroupSymbol());
      RebuildAliasDb();
    }
    std::vector<Node*> producers;
    for (Value* in : group->inputs()) {
      Node* p = in->node();
      if (p->owningBlock() == group->owningBlock() && p != group && Fusible(p) &&
          std::find(producers.begin(), producers.end(), p) == producers.end())
        producers.push_back(p);
    }
    // Latest producer first: it is the one that can move next to the group.
    std::sort(producers.begin(), producers.end(), [](Node* a, Node* b) { return a->isAfter(b); });
    std::unordered_set<std::string> group_reductions;
    CollectReductions(group, &group_reductions);
    for (Node* p : producers) {
      // One kernel reduces over one set of axes (the row templates' rows):
      // a producer reducing over other axes than the group starts its own
      // group (group_norm feeding amin over channels: two groups, two kernels).
      std::unordered_set<std::string> sigs = group_reductions;
      CollectReductions(p, &sigs);
      if (sigs.size() > 1) continue;
      if (!alias_db_->moveBeforeTopologicallyValid(p, group)) continue;
      supported_.erase(p);
      torch::jit::SubgraphUtils::mergeNodeIntoSubgraph(p, group);
      RebuildAliasDb();
      *changed = true;
      return group->reverseIterator();
    }
    return ++group->reverseIterator();
  }

  void RebuildAliasDb() { alias_db_ = std::make_unique<torch::jit::AliasDb>(graph_); }

  std::shared_ptr<torch::jit::Graph> graph_;
  int min_nontrivial_;
  std::unordered_set<Node*> supported_;
  std::unique_ptr<torch::jit::AliasDb> alias_db_;
};

bool DiceModeEnabled() {
  const char* env = std::getenv("DICE_MODE");
  if (!env) return false;
  auto mode = ParseMode(env);
  return mode.ok() && *mode != Mode::kOff;
}

// Runs DiceModePass inside the graph executors (before their own fusers).
const torch::jit::GraphPassNameType kDiceModePassRegistration = torch::jit::registerPrePass(DiceModePass);

}  // namespace

FusionPassResult FuseDiceGroups(const std::shared_ptr<torch::jit::Graph>& graph, int min_nontrivial_ops) {
  return Fuser(graph, min_nontrivial_ops).Run();
}

void DiceModePass(std::shared_ptr<torch::jit::Graph>& graph) {
  if (!DiceModeEnabled()) return;
  AbsorbProfiledTypes(graph);
  FuseDiceGroups(graph, GetRuntimeOptions().min_nontrivial_ops);
}

}  // namespace dice::torch_ext
