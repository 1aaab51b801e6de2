// The fusion pass: supported nodes -> dice::FusionGroup nodes (fusion_pass.h).
// Which nodes go together is the shared policy's call (fusion_policy.h, also
// exposed to the FX frontend as the op dice::fusion_groups, registered here);
// this file describes TorchScript nodes to it and builds the groups it names.
#include "dice/torch_ext/fusion_pass.h"

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
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/library.h>

#include "dice/reference/reference_executor.h"
#include "dice/torch_ext/optimize.h"
#include "fusion_policy.h"

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

// Adds to `inputs` the top-level nodes whose values `block` reads (at any depth).
void AddBlockReads(const Block* block, const std::unordered_map<const Node*, int>& index, std::vector<int>* inputs) {
  auto add = [&](const Value* v) {
    auto it = index.find(v->node());
    if (it != index.end()) inputs->push_back(it->second);
  };
  for (const Node* n : block->nodes()) {
    for (const Value* v : n->inputs()) add(v);
    for (const Block* b : n->blocks()) AddBlockReads(b, index, inputs);
  }
  for (const Value* v : block->return_node()->inputs()) add(v);
}

// What the reduction rule of the policy reads about `n` (fusion_policy.h).
void AddReductionFacts(const Node* n, PolicyNode* out) {
  out->operands = static_cast<int>(n->inputs().size());
  for (const Value* v : n->inputs())
    if (IsTensorValue(v)) ++out->tensor_operands;
  if (!n->inputs().empty())
    if (auto tt = n->input(0)->type()->cast<c10::TensorType>())
      if (auto rank = tt->dim()) out->rank = static_cast<int>(*rank);
  const c10::FunctionSchema* schema = n->maybeSchema();
  if (schema == nullptr) {
    out->dim = DimArg::kUnknown;
    return;
  }
  auto constant = [&](const std::optional<int>& idx) -> std::optional<c10::IValue> {
    if (!idx || static_cast<size_t>(*idx) >= n->inputs().size()) return std::nullopt;
    return torch::jit::toIValue(n->input(*idx));
  };
  auto shape = constant(schema->argumentIndexWithName("normalized_shape"));
  if (shape && shape->isIntList()) out->normalized_dims = static_cast<int>(shape->toIntVector().size());
  auto dim_idx = schema->argumentIndexWithName("dim");
  if (!dim_idx) return;  // DimArg::kAbsent
  auto dim = constant(dim_idx);
  out->dim = DimArg::kUnknown;
  if (!dim) return;
  if (dim->isNone()) {
    out->dim = DimArg::kNone;
  } else if (dim->isInt()) {
    out->dim = DimArg::kList;
    out->dims = {dim->toInt()};
  } else if (dim->isIntList()) {
    out->dim = DimArg::kList;
    out->dims = dim->toIntVector();
  }
}

// The shape of `operand` against `output` (fusion_policy.h Extent).
Extent ExtentOf(const Value* operand, const Value* output) {
  auto a = operand->type()->cast<c10::TensorType>();
  auto o = output->type()->cast<c10::TensorType>();
  if (!a || !o) return Extent::kUnknown;
  auto as = a->sizes().concrete_sizes();
  auto os = o->sizes().concrete_sizes();
  if (!as || !os) return Extent::kUnknown;
  if (*as == *os) return Extent::kFull;
  if (os->empty() || as->empty() || as->back() != os->back()) return Extent::kOther;
  for (size_t d = 0; d + 1 < as->size(); ++d)
    if ((*as)[d] != 1) return Extent::kOther;
  return Extent::kRow;
}

// What the GEMM rule of the policy reads about `n` (fusion_policy.h rule 4).
void AddEpilogueFacts(const Node* n, const std::unordered_map<const Node*, int>& index, PolicyNode* out) {
  out->epilogue_op = IsEpilogueOp(n);
  if (!out->epilogue_op) return;
  for (const Value* v : n->inputs()) {
    if (!IsTensorValue(v) || IsScalarTensorConstant(v)) continue;
    auto it = index.find(v->node());
    out->epilogue_operands.push_back({it == index.end() ? -1 : it->second, ExtentOf(v, n->output(0))});
  }
}

// Why the GEMM gate (DICE_GEMM_GROUPS) keeps the supported `n` out of groups,
// or "" when it does not (it is no GEMM, or the gate lets it in).
// The gate's reason for a linear whose output dtype is `dt` (an error: not known).
// A conv (`conv`) is gated by DICE_CONV_GROUPS instead (ConvGroupsFromEnv).
std::string GemmGateReasonFor(GemmGroups setting, const Expected<ir::DType>& dt, bool conv = false) {
  if (setting == GemmGroups::kOff) return "not a fusible op";  // as before GEMM groups
  if (dt.ok() && GemmGroupAllowed(setting, *dt)) return "";
  return std::string(dt.ok() ? ir::DTypeName(*dt) : "unknown-dtype") +
         (conv ? " conv2d: conv groups take float32 only (DICE_CONV_GROUPS=all also takes bf16/f16)"
               : " linear: GEMM groups take float32 only (DICE_GEMM_GROUPS=all also takes bf16/f16)");
}

// The IR dtype of `n`'s first output; an error when its type names none or
// one the IR lacks.
Expected<ir::DType> OutputDType(const Node* n) {
  auto tt = n->output(0)->type()->cast<c10::TensorType>();
  auto st = tt ? tt->scalarType() : std::nullopt;
  return st ? reference::FromScalarType(*st) : Expected<ir::DType>(Status(StatusCode::kUnsupported, "?"));
}

std::string GemmGateReason(const Node* n, GemmGroups setting) {
  if (!IsGemmKind(n->kind().toQualString())) return "";
  const bool conv = IsConvKind(n->kind().toQualString());
  return GemmGateReasonFor(conv ? ConvGroupsFromEnv() : setting, OutputDType(n), conv);
}

// Whether the linear `n` forms a group under `setting` only with an epilogue
// op (fusion_policy.h GemmGroupNeedsEpilogue); false for a conv or an unknown dtype.
bool GemmNeedsEpilogue(const Node* n, GemmGroups setting) {
  if (n->kind() != c10::aten::linear) return false;
  const auto dt = OutputDType(n);
  return dt.ok() && GemmGroupNeedsEpilogue(setting, *dt);
}

// Why a linear with needs_epilogue was left out of every group (rule 4).
constexpr const char* kLoneGemmReason =
    "linear: a bf16/f16 GEMM forms a group only with an epilogue op after it (DICE_GEMM_GROUPS=epilogue; "
    "=all also takes it alone)";

// The policy's view of a top-level node; `index` maps the nodes before it.
PolicyNode DescribeNode(const Node* n, bool fusible, const std::unordered_map<const Node*, int>& index) {
  PolicyNode out;
  out.kind = n->kind().toQualString();
  out.fusible = fusible;
  for (const Value* v : n->inputs()) {
    auto it = index.find(v->node());
    if (it != index.end()) out.inputs.push_back(it->second);
  }
  for (const Block* b : n->blocks()) AddBlockReads(b, index, &out.inputs);
  for (const Value* o : n->outputs())
    for (const torch::jit::Use& u : o->uses())
      if (u.user->kind() == c10::prim::Return && u.user->owningBlock() == n->owningBlock()) out.escapes = true;
  if (!fusible) return out;
  if (n->kind() == FusionGroupSymbol()) {
    for (const Node* inner : n->g(c10::attr::Subgraph)->nodes()) {
      if (inner->kind() == c10::prim::Constant || inner->kind() == c10::prim::ListConstruct) continue;
      PolicyNode p;
      p.kind = inner->kind().toQualString();
      p.fusible = true;
      AddReductionFacts(inner, &p);
      out.inner.push_back(std::move(p));
    }
    return out;
  }
  AddReductionFacts(n, &out);
  AddEpilogueFacts(n, index, &out);
  return out;
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

// The [N, K] weight of `x @ c` when `c` is a 2-D tensor constant whose
// transpose is contiguous (how torch.jit.freeze folds `w.t()` of a Linear-
// layout weight): c.t(), a view of the same storage; else nullopt.
std::optional<at::Tensor> TransposedConstantWeight(const Value* c) {
  if (c->node()->kind() != c10::prim::Constant || !IsTensorValue(c)) return std::nullopt;
  auto iv = torch::jit::toIValue(c);
  if (!iv || !iv->isTensor()) return std::nullopt;
  const at::Tensor& t = iv->toTensor();
  if (!t.defined() || t.dim() != 2 || !t.t().is_contiguous()) return std::nullopt;
  return t.t();
}

// Respells, in the top-level block, aten::matmul(x, C) and aten::addmm(b, x,
// C, beta=1, alpha=1) with C a frozen `w.t()` (TransposedConstantWeight) as
// aten::linear(x, C.t()[, b]), when that linear is one the GEMM gate lets
// into a group. at::linear computes exactly that matmul / addmm call on the
// same strides, so eager and fallback results stay bit-identical and no
// weight is copied. Nothing changes under DICE_GEMM_GROUPS=0.
void SpellConstantWeightGemmsAsLinear(const std::shared_ptr<torch::jit::Graph>& graph, GemmGroups gemm) {
  if (gemm == GemmGroups::kOff) return;
  std::vector<Node*> candidates;
  for (Node* n : graph->block()->nodes())
    if (n->kind() == c10::aten::matmul || n->kind() == c10::aten::addmm) candidates.push_back(n);
  for (Node* n : candidates) {
    const bool addmm = n->kind() == c10::aten::addmm;
    if (n->inputs().size() != (addmm ? 5u : 2u) || n->outputs().size() != 1) continue;
    Value* x = n->input(addmm ? 1 : 0);
    auto weight = TransposedConstantWeight(n->input(addmm ? 2 : 1));
    if (!weight || !IsTensorValue(x)) continue;
    if (addmm) {
      auto beta = torch::jit::toIValue(n->input(3)), alpha = torch::jit::toIValue(n->input(4));
      auto is_one = [](const std::optional<c10::IValue>& v) {
        return v && ((v->isInt() && v->toInt() == 1) || (v->isDouble() && v->toDouble() == 1.0));
      };
      if (!is_one(beta) || !is_one(alpha)) continue;
    }
    torch::jit::WithInsertPoint guard(n);
    Value* w = graph->insertConstant(*weight);
    Value* b = addmm ? n->input(0) : graph->insertConstant(c10::IValue());
    Node* linear = graph->create(c10::aten::linear, {x, w, b});
    linear->insertBefore(n);
    linear->output()->setType(n->output()->type());
    if (UnsupportedReason(linear).empty() && GemmGateReason(linear, gemm).empty()) {
      n->output()->replaceAllUsesWith(linear->output());
      n->destroy();
    } else {
      linear->destroy();
      w->node()->destroy();
      if (!addmm) b->node()->destroy();
    }
  }
}

// Describes the top-level block to the fusion policy (fusion_policy.h), forms
// the groups it proposes, then captures each group's IR.
class Fuser {
 public:
  Fuser(std::shared_ptr<torch::jit::Graph> graph, int min_nontrivial)
      : graph_(std::move(graph)), min_nontrivial_(min_nontrivial) {}

  FusionPassResult Run() {
    FusionPassResult result;
    // Support decisions are made once, on the original nodes.
    std::vector<Node*> nodes;
    std::vector<PolicyNode> described;
    std::unordered_map<const Node*, int> index;
    bool any_fusible = false;
    const GemmGroups gemm = GemmGroupsFromEnv();
    SpellConstantWeightGemmsAsLinear(graph_, gemm);
    for (Node* n : graph_->block()->nodes()) {
      bool fusible = n->kind() == FusionGroupSymbol();  // formed by an earlier run
      if (!fusible) {
        std::string reason = UnsupportedReason(n);
        if (reason.empty()) reason = GemmGateReason(n, gemm);
        fusible = reason.empty();
        if (!fusible && !IsPlumbing(n)) result.left_out.push_back({n->kind().toQualString(), reason});
      }
      any_fusible |= fusible;
      described.push_back(DescribeNode(n, fusible, index));
      described.back().needs_epilogue = fusible && GemmNeedsEpilogue(n, gemm);
      index.emplace(n, static_cast<int>(nodes.size()));
      nodes.push_back(n);
    }
    if (!any_fusible) return result;
    auto groups = ProposeFusionGroups(described, min_nontrivial_);
    if (!groups.ok()) {
      result.left_out.push_back({FusionGroupSymbol().toQualString(), groups.status().message()});
      return result;
    }
    std::vector<bool> grouped(nodes.size(), false);
    for (const auto& members : *groups)
      for (int m : members) grouped[m] = true;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (described[i].needs_epilogue && !grouped[i]) result.left_out.push_back({"aten::linear", kLoneGemmReason});
    alias_db_ = std::make_unique<torch::jit::AliasDb>(graph_);
    for (const auto& members : *groups) FormGroup(nodes, members);
    Finalize(&result);
    torch::jit::EliminateDeadCode(graph_);
    torch::jit::RemoveTensorTypeSpecializations(graph_);
    return result;
  }

 private:
  // Makes one dice::FusionGroup of `members` (ascending indices into `nodes`):
  // the last member becomes the group, then the others are merged into it,
  // latest first, each when AliasDb can move it next to the group (the policy
  // saw data edges only; mutation and side effects are checked here).
  void FormGroup(const std::vector<Node*>& nodes, const std::vector<int>& members) {
    Node* group = nodes[members.back()];
    if (group->kind() != FusionGroupSymbol()) {
      group = torch::jit::SubgraphUtils::createSingletonSubgraph(group, FusionGroupSymbol());
      RebuildAliasDb();
    }
    for (auto it = members.rbegin() + 1; it != members.rend(); ++it) {
      Node* p = nodes[*it];
      if (!alias_db_->moveBeforeTopologicallyValid(p, group)) continue;
      torch::jit::SubgraphUtils::mergeNodeIntoSubgraph(p, group);
      RebuildAliasDb();
    }
  }

  // Constants in, IR out; groups that do not capture, or hold too few
  // non-casts (a member AliasDb would not move may be missing), dissolved.
  void Finalize(FusionPassResult* result) {
    std::vector<Node*> groups;
    for (Node* n : graph_->block()->nodes())
      if (n->kind() == FusionGroupSymbol()) groups.push_back(n);
    for (Node* group : groups) {
      InlineConstantInputs(group);
      LiftTensorConstants(group);
      auto subgraph = group->g(c10::attr::Subgraph);
      auto captured = CaptureSubgraph(*subgraph);
      if (!captured.ok()) {
        result->left_out.push_back({FusionGroupSymbol().toQualString(), captured.status().message()});
        torch::jit::SubgraphUtils::unmergeSubgraph(group);
        continue;
      }
      int nontrivial = 0;
      for (Node* n : subgraph->nodes())
        if (n->kind() != c10::prim::Constant && n->kind() != c10::prim::ListConstruct &&
            !IsCastOrProjection(n->kind().toQualString()))
          ++nontrivial;
      if (nontrivial < min_nontrivial_) {
        torch::jit::SubgraphUtils::unmergeSubgraph(group);
        continue;
      }
      if (group->hasAttribute(IrAttr()) && group->s(IrAttr()) == captured->canonical &&
          group->hasAttribute(GroupIdAttr())) {
        result->group_ids.push_back(static_cast<int>(group->i(GroupIdAttr())));
        continue;  // unchanged group from an earlier run
      }
      int id = RegisterGroup(*captured);
      group->s_(IrAttr(), captured->canonical);
      group->i_(GroupIdAttr(), id);
      result->group_ids.push_back(id);
    }
  }

  void RebuildAliasDb() { alias_db_ = std::make_unique<torch::jit::AliasDb>(graph_); }

  std::shared_ptr<torch::jit::Graph> graph_;
  int min_nontrivial_;
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

// dice::fusion_groups: the policy for the FX partitioner (partition.py).
// `nodes`: the JSON of ParsePolicyNodes. Returns, per node, the index of its
// group (groups numbered by first node) or -1. Throws c10::Error with the
// parser's message on a malformed list.
std::vector<int64_t> FusionGroupsOp(c10::string_view nodes, int64_t min_nontrivial_ops) {
  auto described = ParsePolicyNodes(std::string_view(nodes.data(), nodes.size()));
  TORCH_CHECK(described.ok(), described.status().ToString());
  auto groups = ProposeFusionGroups(*described, static_cast<int>(min_nontrivial_ops));
  TORCH_CHECK(groups.ok(), groups.status().ToString());
  std::vector<int64_t> group_of(described->size(), -1);
  for (size_t g = 0; g < groups->size(); ++g)
    for (int m : (*groups)[g]) group_of[m] = static_cast<int64_t>(g);
  return group_of;
}

// dice::gemm_group_gate: why DICE_GEMM_GROUPS keeps a linear whose output
// has ir::DType `dtype` (0 f32, 1 f16, 2 bf16) out of groups, or "" when it
// lets it in: the TorchScript pass's gate (GemmGateReason) under the FX
// backend's default (kFxGemmGroupsDefault), for the FX partitioner. Read at
// each call. Throws c10::Error on an unknown dtype id.
std::string GemmGroupGateOp(int64_t dtype) {
  TORCH_CHECK(dtype >= 0 && dtype <= 2, "gemm_group_gate: unknown dtype id ", dtype);
  return GemmGateReasonFor(GemmGroupsFromEnv(kFxGemmGroupsDefault), static_cast<ir::DType>(dtype));
}

// dice::gemm_group_lone_reason: for the FX partitioner, "" when a linear
// whose output has ir::DType `dtype` may form a group alone, else why it
// needs an epilogue op (PolicyNode::needs_epilogue; the left-out reason).
// Same gate and errors as gemm_group_gate.
std::string GemmGroupLoneReasonOp(int64_t dtype) {
  TORCH_CHECK(dtype >= 0 && dtype <= 2, "gemm_group_lone_reason: unknown dtype id ", dtype);
  return GemmGroupNeedsEpilogue(GemmGroupsFromEnv(kFxGemmGroupsDefault), static_cast<ir::DType>(dtype))
             ? kLoneGemmReason
             : "";
}

TORCH_LIBRARY_FRAGMENT(dice, m) {
  m.def("fusion_groups(str nodes, int min_nontrivial_ops=1) -> int[]", TORCH_FN(FusionGroupsOp));
  m.def("gemm_group_gate(int dtype) -> str", TORCH_FN(GemmGroupGateOp));
  m.def("gemm_group_lone_reason(int dtype) -> str", TORCH_FN(GemmGroupLoneReasonOp));
}

}  // namespace

Status ObserveTypes(const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<c10::IValue>& inputs) {
  auto copy = graph->copy();
  std::vector<Value*> originals;
  auto add = [&](Value* orig, Value* twin) {
    if (orig->type()->kind() != c10::TypeKind::TensorType) return;
    originals.push_back(orig);
    copy->registerOutput(twin);
  };
  if (graph->inputs().size() != inputs.size())
    return Status(StatusCode::kInvalidArgument, "graph takes " + std::to_string(graph->inputs().size()) +
                                                    " inputs (self included), got " + std::to_string(inputs.size()));
  size_t n_out = graph->outputs().size();
  for (size_t i = 0; i < graph->inputs().size(); ++i) add(graph->inputs()[i], copy->inputs()[i]);
  auto it = graph->nodes().begin();
  auto jt = copy->nodes().begin();
  for (; it != graph->nodes().end() && jt != copy->nodes().end(); ++it, ++jt) {
    for (size_t i = 0; i < it->outputs().size(); ++i) add(it->output(i), jt->output(i));
  }
  torch::jit::Stack stack(inputs.begin(), inputs.end());
  try {
    torch::jit::Code code(copy, "dice_observe_types");
    torch::jit::InterpreterState state(code);
    state.run(stack);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInvalidArgument, std::string("running the graph on the example inputs failed: ") + e.what());
  }
  if (stack.size() != n_out + originals.size())
    return Status(StatusCode::kInternal, "observe run returned " + std::to_string(stack.size()) + " values");
  for (size_t i = 0; i < originals.size(); ++i) {
    const auto& iv = stack[n_out + i];
    if (iv.isTensor() && iv.toTensor().defined()) originals[i]->setType(c10::TensorType::create(iv.toTensor()));
  }
  return Status::Ok();
}

int AbsorbProfiledTypes(const std::shared_ptr<torch::jit::Graph>& graph) {
  int removed = 0;
  for (auto it = graph->nodes().begin(); it != graph->nodes().end();) {
    Node* n = *it;
    ++it;
    if (n->kind() != c10::prim::profile || n->inputs().size() != 1 || n->outputs().size() != 1) continue;
    if (n->hasAttribute(c10::attr::profiled_type)) {
      auto ty = n->ty(c10::attr::profiled_type)->cast<c10::TensorType>();
      Value* in = n->input(0);
      if (ty && in->type()->kind() == c10::TypeKind::TensorType) in->setType(ty);
    }
    n->output()->replaceAllUsesWith(n->input(0));
    n->destroy();
    ++removed;
  }
  return removed;
}

FusionPassResult FuseDiceGroups(const std::shared_ptr<torch::jit::Graph>& graph, int min_nontrivial_ops) {
  return Fuser(graph, min_nontrivial_ops).Run();
}

void DiceModePass(std::shared_ptr<torch::jit::Graph>& graph) {
  if (!DiceModeEnabled()) return;
  AbsorbProfiledTypes(graph);
  FuseDiceGroups(graph, GetRuntimeOptions().min_nontrivial_ops);
}

}  // namespace dice::torch_ext
