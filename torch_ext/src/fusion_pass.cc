// The fusion pass: supported nodes -> dice::FusionGroup nodes (fusion_pass.h).
#include "dice/torch_ext/fusion_pass.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include <torch/csrc/jit/ir/alias_analysis.h>
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
    for (Node* p : producers) {
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
