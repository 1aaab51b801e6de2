// The attention capture pass and its measured decision (attention_pass.h).
#include "attention_pass.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/named_value.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include "graph_pass_util.h"
#include "memory_format_pass.h"

namespace dice::torch_ext {

namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;



bool SingleUse(const Value* v) { return v->uses().size() == 1; }

// The dimension d normalised against `rank` (-1 -> rank - 1), or nullopt when
// it is not a constant int.
std::optional<int64_t> ConstDim(Value* v, int rank) {
  auto iv = torch::jit::toIValue(v);
  if (!iv || !iv->isInt()) return std::nullopt;
  int64_t d = iv->toInt();
  return d < 0 ? d + rank : d;
}


// The value of a constant one-element floating or integral tensor, the form
// torch.jit.trace gives a Python scalar operand (`scores * 0.125` traces as
// aten::mul(Tensor, prim::Constant[value={0.125}])), or nullopt.
std::optional<double> ConstScalarTensor(Value* v) {
  if (v->node()->kind() != c10::prim::Constant) return std::nullopt;
  auto iv = torch::jit::toIValue(v);
  if (!iv || !iv->isTensor()) return std::nullopt;
  const at::Tensor& t = iv->toTensor();
  if (!t.defined() || t.numel() != 1 || t.is_complex() || t.scalar_type() == c10::ScalarType::Bool) {
    return std::nullopt;
  }
  return t.item<double>();
}

std::optional<bool> ConstBool(Value* v) {
  auto iv = torch::jit::toIValue(v);
  if (!iv || !iv->isBool()) return std::nullopt;
  return iv->toBool();
}

// One matched chain, from the score matmul to the output matmul.
struct Chain {
  Value* q = nullptr;
  Value* k = nullptr;
  Value* v = nullptr;
  Value* scale = nullptr;  // float Value multiplying the scores; nullptr = 1.0
  std::optional<double> scale_const;  // the scale when it is a traced constant tensor (then scale == nullptr)
  bool scale_is_divisor = false;
  Value* bool_mask = nullptr;      // masked_fill's mask (True = masked out)
  bool causal = false;             // the mask (bool or additive) is the causal one (IsCausalMask, IsCausalBias)
  Value* additive_mask = nullptr;  // added to the scores
  std::vector<Node*> nodes;        // the chain's nodes, output matmul first
  Node* transpose = nullptr;       // k's transpose (removed when no other use is left)
};

// Whether a constant tensor, read as a bool (nonzero = True), is exactly
// the lower triangle, diagonal included, of its last two dims (square), with
// every leading dim of extent 1: tril(ones(n, n)) as models register it.
bool IsLowerTriangleOfOnes(const at::Tensor& t) {
  if (!t.defined() || t.dim() < 2 || t.size(-1) != t.size(-2)) return false;
  for (int64_t d = 0; d + 2 < t.dim(); ++d) {
    if (t.size(d) != 1) return false;
  }
  const at::Tensor m = t.reshape({t.size(-2), t.size(-1)}).ne(0).cpu();
  return at::equal(m, at::ones_like(m).tril());
}

// Whether a constant tensor is exactly the additive causal bias: -inf
// strictly above the diagonal of its last two dims (square), 0 elsewhere,
// every leading dim of extent 1: full((n, n), -inf).triu(1), GPT-2's form.
bool IsCausalBiasConstant(const at::Tensor& t) {
  if (!t.defined() || !t.is_floating_point() || t.dim() < 2 || t.size(-1) != t.size(-2)) return false;
  for (int64_t d = 0; d + 2 < t.dim(); ++d) {
    if (t.size(d) != 1) return false;
  }
  const at::Tensor m = t.reshape({t.size(-2), t.size(-1)}).cpu();
  const at::Tensor upper = at::ones_like(m, m.options().dtype(at::kBool)).triu(1);
  return at::equal(m.isneginf(), upper) && at::equal(m.eq(0), upper.logical_not());
}

// The constant `x` reads, when `x` is that constant or slices of it from 0
// by one value T on both of its last two dims (and whole on the others);
// nullopt otherwise. This is how `buf[..., :T, :T]` of a registered mask
// buffer looks after freezing.
std::optional<at::Tensor> SquareSliceOfConstant(Value* x) {
  Value* ends[2] = {nullptr, nullptr};  // the slice ends of the rows and the columns
  while (IsAten(x->node(), "slice")) {
    Node* s = x->node();
    const int rank = TensorRank(s->input(0));
    auto dim = ConstDim(s->input(1), rank);
    auto start = torch::jit::toIValue(s->input(2));
    auto step = torch::jit::toIValue(s->input(4));
    if (rank < 2 || !dim || !step || !step->isInt() || step->toInt() != 1) return std::nullopt;
    if (!start || !(start->isNone() || (start->isInt() && start->toInt() == 0))) return std::nullopt;
    if (*dim >= rank - 2) {
      if (ends[*dim - (rank - 2)] != nullptr) return std::nullopt;
      ends[*dim - (rank - 2)] = s->input(3);
    } else {
      auto end = torch::jit::toIValue(s->input(3));  // a leading dim (extent 1 below): from 0 to >= 1
      if (!end || !(end->isNone() || (end->isInt() && end->toInt() >= 1))) return std::nullopt;
    }
    x = s->input(0);
  }
  if (x->node()->kind() != c10::prim::Constant) return std::nullopt;
  auto iv = torch::jit::toIValue(x);
  if (!iv || !iv->isTensor()) return std::nullopt;
  bool square = ends[0] == ends[1];  // both whole, or one value T for both
  if (!square && ends[0] != nullptr && ends[1] != nullptr) {
    auto a = torch::jit::toIValue(ends[0]), b = torch::jit::toIValue(ends[1]);
    square = a && b && a->isInt() && b->isInt() && a->toInt() == b->toInt();
  }
  if (!square) return std::nullopt;
  return iv->toTensor();
}

// Whether the bool mask `m` (True = masked out) is `tril[..., :T, :T] == 0`
// for a constant tril(ones(n, n)) buffer (IsLowerTriangleOfOnes), as minGPT
// writes its causal mask, or a constant equal to such a mask (what freezing
// folds a traced constant T into).
bool IsCausalMask(Value* m) {
  Node* n = m->node();
  if (n->kind() == c10::prim::Constant) {
    auto iv = torch::jit::toIValue(m);
    return iv && iv->isTensor() && IsLowerTriangleOfOnes(iv->toTensor().logical_not());
  }
  if (!IsAten(n, "eq") || n->inputs().size() != 2) return false;
  auto zero = torch::jit::toIValue(n->input(1));
  if (!zero || !(zero->isInt() || zero->isDouble()) || zero->toScalar().toDouble() != 0.0) return false;
  auto base = SquareSliceOfConstant(n->input(0));
  return base && IsLowerTriangleOfOnes(*base);
}

// Whether the additive mask `a` is `bias[..., :T, :T]` of a constant causal
// bias (IsCausalBiasConstant), or such a constant itself.
bool IsCausalBias(Value* a) {
  auto base = SquareSliceOfConstant(a);
  return base && IsCausalBiasConstant(*base);
}

// The sequence extent (dim -2) of a value's TensorType, or -1 when unknown.
int64_t SeqExtent(const Value* v) {
  auto tt = v->type()->cast<c10::TensorType>();
  if (!tt) return -1;
  auto sizes = tt->sizes().concrete_sizes();
  if (!sizes || sizes->size() < 2) return -1;
  return (*sizes)[sizes->size() - 2];
}

// Matches the chain ending at `out` (an aten::matmul), or returns the reason
// it does not match ("" when `out` is not the end of an attention chain at
// all, so nothing is reported).
std::string Match(Node* out, Chain* c) {
  Value* p = out->input(0);
  c->v = out->input(1);
  c->nodes.push_back(out);
  Node* n = p->node();
  if (IsAten(n, "dropout")) {
    auto train = ConstBool(n->input(2));
    if (!train || *train) return "";  // training-mode dropout: not an inference chain
    if (!SingleUse(n->output())) return "";
    c->nodes.push_back(n);
    n = n->input(0)->node();
  }
  if (!IsAten(n, "softmax")) return "";
  Node* softmax = n;
  Value* scores = softmax->input(0);
  const int rank = TensorRank(scores);
  if (rank < 0) return "";
  auto dim = ConstDim(softmax->input(1), rank);
  if (!dim || *dim != rank - 1) return "";
  // From here on it is an attention chain: a mismatch is reported.
  if (softmax->inputs().size() > 2 && !IsConstNone(softmax->input(2))) return "softmax with a dtype argument";
  if (!SingleUse(softmax->output())) return "the softmax output has another use (e.g. returned attention weights)";
  c->nodes.push_back(softmax);
  n = scores->node();
  // Optional mask (outermost), then optional scale.
  if (IsAten(n, "masked_fill")) {
    auto fill = torch::jit::toIValue(n->input(2));
    if (!fill || !(fill->isDouble() || fill->isInt()) || !std::isinf(fill->toScalar().toDouble()) ||
        fill->toScalar().toDouble() > 0) {
      return "masked_fill with a value other than -inf (SDPA's bool mask means -inf)";
    }
    if (TensorDtype(n->input(1)) != c10::ScalarType::Bool) return "masked_fill with a mask of unknown or non-bool dtype";
    if (!SingleUse(n->output())) return "the masked scores have another use";
    c->bool_mask = n->input(1);
    c->nodes.push_back(n);
    n = n->input(0)->node();
  } else if (IsAten(n, "add") && n->inputs().size() == 3) {
    auto alpha = torch::jit::toIValue(n->input(2));
    if (!alpha || alpha->toScalar().toDouble() != 1.0) return "an added mask with alpha != 1";
    Value* mask = n->input(1);
    if (!mask->type()->cast<c10::TensorType>() || !c10::isFloatingType(TensorDtype(mask).value_or(c10::ScalarType::Bool))) {
      return "an added mask that is not a floating tensor";
    }
    if (!SingleUse(n->output())) return "the masked scores have another use";
    c->additive_mask = mask;
    c->nodes.push_back(n);
    n = n->input(0)->node();
  }
  if (IsAten(n, "mul") || IsAten(n, "div")) {
    Value* s = n->input(1);
    if (n->inputs().size() != 2) return "a scale op with a rounding mode";
    if (s->type()->cast<c10::FloatType>()) {
      c->scale = s;
    } else if (auto v = ConstScalarTensor(s)) {
      if (!std::isfinite(*v) || *v == 0.0) return "a constant scale that is zero or not finite";
      c->scale_const = v;
    } else {
      return "a scale that is neither a float scalar nor a constant one-element tensor";
    }
    if (!SingleUse(n->output())) return "the scaled scores have another use";
    c->scale_is_divisor = IsAten(n, "div");
    c->nodes.push_back(n);
    n = n->input(0)->node();
  }
  if (IsAten(n, "masked_fill") || IsAten(n, "add") || IsAten(n, "mul") || IsAten(n, "div")) {
    return "the scale comes after the mask (SDPA scales before it adds the mask)";
  }
  if (!IsAten(n, "matmul")) return "the scores are not a matmul";
  if (!SingleUse(n->output())) return "the scores have another use";
  c->q = n->input(0);
  Node* t = n->input(1)->node();
  if (!IsAten(t, "transpose")) return "the key is not transposed by transpose(-2, -1)";
  c->k = t->input(0);
  const int r = TensorRank(c->k);
  auto d0 = ConstDim(t->input(1), r), d1 = ConstDim(t->input(2), r);
  if (r < 0 || !d0 || !d1 || std::min(*d0, *d1) != r - 2 || std::max(*d0, *d1) != r - 1) {
    return "the key is not transposed by transpose(-2, -1)";
  }
  c->transpose = t;
  c->nodes.push_back(n);
  const int rq = TensorRank(c->q), rv = TensorRank(c->v);
  if (rq != r || rv != r || (r != 3 && r != 4)) return "q, k, v are not all of rank 3 or 4";
  auto dt = TensorDtype(c->q);
  if (!dt || !c10::isFloatingType(*dt) || TensorDtype(c->k) != dt || TensorDtype(c->v) != dt) {
    return "q, k, v do not share one known floating dtype";
  }
  if (c->additive_mask && TensorDtype(c->additive_mask) != dt) return "the added mask's dtype differs from q's";
  // A causal mask whose extent followed the query length when the types were
  // observed (L == S == the mask's n) becomes is_causal: see Apply.
  Value* mask = c->bool_mask != nullptr ? c->bool_mask : c->additive_mask;
  if (mask != nullptr && (c->bool_mask != nullptr ? IsCausalMask(mask) : IsCausalBias(mask))) {
    const int64_t l = SeqExtent(c->q), s = SeqExtent(c->k);
    auto mt = mask->type()->cast<c10::TensorType>();
    auto ms = mt ? mt->sizes().concrete_sizes() : std::nullopt;
    c->causal = l > 1 && l == s && ms && ms->size() >= 2 && (*ms)[ms->size() - 1] == l && (*ms)[ms->size() - 2] == l;
  }
  for (Node* node : c->nodes) {
    if (node->owningBlock() != out->owningBlock()) return "the chain crosses a block";
  }
  return "ok";
}

void Apply(const std::shared_ptr<Graph>& graph, const Chain& c) {
  Node* out = c.nodes.front();
  torch::jit::WithInsertPoint guard(out);
  Value* mask = nullptr;
  Value* causal = graph->insertConstant(false);
  if (c.causal) {
    // SDPA's is_causal aligns the triangle top-left: the same mask as
    // tril[:T, :T] == 0 when the key length equals the query length (T, the
    // mask's extent, follows the query length). When they differ at run time
    // (a query of one row against a longer key, T = 1: the mask was all
    // False), no mask applies: is_causal = (L == S).
    mask = graph->insertConstant(c10::IValue());
    Value* l = graph->insert(c10::aten::size, {c.q, -2});
    Value* s = graph->insert(c10::aten::size, {c.k, -2});
    causal = graph->insert(c10::aten::eq, {l, s});
  } else if (c.bool_mask != nullptr) {
    mask = graph->insert(c10::aten::logical_not, {c.bool_mask});
  } else if (c.additive_mask != nullptr) {
    mask = c.additive_mask;
  } else {
    mask = graph->insertConstant(c10::IValue());
  }
  Value* scale = c.scale;
  if (c.scale_const) {
    scale = graph->insertConstant(c.scale_is_divisor ? 1.0 / *c.scale_const : *c.scale_const);
  } else if (scale == nullptr) {
    scale = graph->insertConstant(1.0);
  } else if (c.scale_is_divisor) {
    scale = graph->insert(c10::aten::div, {graph->insertConstant(1.0), c.scale});
  }
  Value* y = graph->insert(c10::Symbol::aten("scaled_dot_product_attention"),
                           {c.q, c.k, c.v, mask, 0.0, causal}, {torch::jit::NamedValue("scale", scale)});
  y->setType(out->output()->type());
  out->output()->replaceAllUsesWith(y);
  for (Node* n : c.nodes) n->destroy();  // output matmul first: each node's uses are gone when it goes
  if (c.transpose->output()->uses().empty()) c.transpose->destroy();
}


}  // namespace

Expected<AttentionMode> ParseAttentionMode(std::string_view text) {
  if (text == "auto") return AttentionMode::kAuto;
  if (text == "unfused") return AttentionMode::kUnfused;
  if (text == "sdpa") return AttentionMode::kSdpa;
  return Status(StatusCode::kInvalidArgument,
                "unknown attention mode '" + std::string(text) + "' (expected auto, unfused or sdpa)");
}

const char* AttentionModeName(AttentionMode mode) {
  switch (mode) {
    case AttentionMode::kUnfused: return "unfused";
    case AttentionMode::kSdpa: return "sdpa";
    case AttentionMode::kAuto: break;
  }
  return "auto";
}

AttentionPassResult RewriteAttentionToSdpa(const std::shared_ptr<Graph>& graph) {
  AttentionPassResult result;
  std::vector<Chain> chains;
  for (Node* n : graph->block()->nodes()) {
    if (!IsAten(n, "matmul")) continue;
    Chain c;
    const std::string why = Match(n, &c);
    if (why == "ok") {
      chains.push_back(std::move(c));
    } else if (!why.empty()) {
      result.skipped.push_back("attention chain ending at %" + n->output()->debugName() + " left unfused: " + why);
    }
  }
  // Chains never share nodes (each intermediate has one use), so applying one
  // leaves the others' nodes in place.
  for (const Chain& c : chains) {
    Apply(graph, c);
    ++result.rewritten;
    if (c.bool_mask != nullptr || c.additive_mask != nullptr) ++result.masked;
    if (c.causal) ++result.causal;
  }
  // A causal chain leaves its mask's slices and comparison without a use.
  if (result.causal > 0) torch::jit::EliminateDeadCode(graph);
  return result;
}

bool KeepsSdpa(double unfused_us, double sdpa_us) {
  return KeepsMeasuredGain(unfused_us, sdpa_us);
}

namespace {

// Whether every output of the forward graph is typed as a float32 tensor
// (types from ObserveTypes; a tuple or an unknown dtype reads as false).
bool ReturnsFloat32Only(const std::shared_ptr<Graph>& graph) {
  for (const Value* v : graph->outputs()) {
    auto dt = TensorDtype(v);
    if (!dt || *dt != c10::ScalarType::Float) return false;
  }
  return !graph->outputs().empty();
}

}  // namespace

Expected<AttentionOutcome> RunAttentionStep(const std::shared_ptr<Graph>& graph, AttentionMode requested,
                                            const std::vector<c10::IValue>& inputs) {
  AttentionOutcome out;
  if (requested == AttentionMode::kUnfused) {
    out.reason = "unfused requested";
    return out;
  }
  auto candidate = graph->copy();
  out.pass = RewriteAttentionToSdpa(candidate);
  if (out.pass.rewritten == 0) {
    out.reason = out.pass.skipped.empty() ? "no attention chain (matmul, scale, mask, softmax, matmul)"
                                          : out.pass.skipped.front();
    if (requested == AttentionMode::kAuto && CountSdpaCalls(*graph) > 0) {
      auto backend = ChooseSdpaBackend(graph, inputs);  // the model's own SDPA calls
      if (!backend.ok()) return backend.status();
      out.backend = std::move(*backend);
    }
    return out;
  }
  if (requested == AttentionMode::kAuto) {
    if (!HasCudaTensor(inputs)) {
      out.reason = "auto: not measured (no CUDA example inputs); left unfused";
      return out;
    }
    auto backend = ChooseSdpaBackend(candidate, inputs);  // pins the copy's calls when a backend wins
    if (!backend.ok()) return backend.status();
    out.backend = std::move(*backend);
    if (ReturnsFloat32Only(graph)) {
      Status same = CheckForwardAgainstReference(graph, candidate, inputs);
      if (!same.ok()) {
        out.reason = "auto: sdpa disagrees with the unfused forward (" + same.message() + "); left unfused";
        out.backend = SdpaBackendOutcome{};
        return out;
      }
    }
    auto times = TimeGraphsRoundRobin(graph, candidate, inputs, /*warmup=*/3, /*reps=*/10);
    if (!times.ok()) return times.status();
    out.unfused_us = times->first;
    out.sdpa_us = times->second;
    const std::string measured = "sdpa (" + std::string(SdpaBackendName(out.backend.backend)) + ") " +
                                 FormatMicros(out.sdpa_us) + " µs vs unfused " + FormatMicros(out.unfused_us) + " µs";
    if (!KeepsSdpa(out.unfused_us, out.sdpa_us)) {
      out.reason = "auto: " + measured + " (sdpa needs >= 2% less); left unfused";
      out.backend.backend = SdpaBackend::kDispatch;  // nothing is pinned: the graph keeps its chains
      out.backend.reason += "; not kept: the chains stay unfused";
      return out;
    }
    out.reason = "auto: " + measured;
  } else {
    out.reason = "sdpa requested";
  }
  out.pass = RewriteAttentionToSdpa(graph);  // deterministic: the same chains as on the copy
  auto pinned = PinSdpaBackend(graph, out.backend.backend);  // the calls the copy pinned (all of them)
  if (!pinned.ok()) return pinned.status();
  out.choice = "sdpa";
  out.reason += " (" + std::to_string(out.pass.rewritten) + " chain(s), " + std::to_string(out.pass.masked) +
                " masked, " + std::to_string(out.pass.causal) + " of them causal)";
  return out;
}

}  // namespace dice::torch_ext
