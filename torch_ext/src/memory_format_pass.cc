// The memory-format capture pass and its measured decision
// (memory_format_pass.h). This is the one torch-including file of the pass.
#include "memory_format_pass.h"

#include "graph_pass_util.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <c10/core/Event.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/interpreter.h>

namespace dice::torch_ext {

namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// Ops whose result has the layout of their (same-rank) tensor operands and
// that accept any dense layout: elementwise (and their in-place forms),
// batch_norm, pooling, dropout (identity in eval).
const std::unordered_set<c10::Symbol>& PreservingKinds() {
  static const std::unordered_set<c10::Symbol> kinds = [] {
    const char* others[] = {"batch_norm", "max_pool2d", "max_pool3d", "avg_pool2d", "avg_pool3d",
                            "adaptive_avg_pool2d", "adaptive_avg_pool3d"};
    std::unordered_set<c10::Symbol> s;
    for (const char* n : ElementwiseOpNames()) {
      s.insert(c10::Symbol::aten(n));
      s.insert(c10::Symbol::aten(std::string(n) + "_"));
    }
    for (const char* n : others) s.insert(c10::Symbol::aten(n));
    return s;
  }();
  return kinds;
}

// 4 or 5 when `n` is a conv of a frozen 4-D/5-D weight constant on a batched
// activation of that rank (the seeds of a region); 0 otherwise.
int ConvSeedRank(const Node* n) {
  if (!IsConvNode(n) || n->inputs().size() < 2 || n->outputs().size() != 1) return 0;
  const Value* w = n->input(1);
  if (w->node()->kind() != c10::prim::Constant) return 0;
  auto iv = torch::jit::toIValue(w);
  if (!iv || !iv->isTensor() || !iv->toTensor().defined()) return 0;
  const int r = static_cast<int>(iv->toTensor().dim());
  if (r != 4 && r != 5) return 0;
  return TensorRank(n->input(0)) == r && TensorRank(n->output()) == r ? r : 0;
}

// A keepdim reduction whose output is the same memory in either layout:
// over every spatial dim (a global pool written as aten::mean/sum/amax/amin:
// [N, C, 1, ...]) or over the channels (aten::amin/amax/sum/mean/logsumexp
// over a dim list holding 1, aten::min/max over dim 1: [N, 1, ...]). The
// region (and its exit copy) can end after it instead of before it, where a
// full-size activation would be copied back to contiguous only to be
// reduced (level2/44: mean over [2, 3] twice after a ConvTranspose2d;
// level2/25: min over the channels after a Conv2d, whose exit copy moved
// 2.1 GB). Inductor keeps such reductions in channels_last the same way.
bool IsLayoutFreeReduce(const Node* n, int rank) {
  static const std::unordered_set<c10::Symbol> list_kinds = {
      c10::Symbol::aten("mean"), c10::Symbol::aten("sum"), c10::Symbol::aten("amax"), c10::Symbol::aten("amin"),
      c10::Symbol::aten("logsumexp")};
  static const std::unordered_set<c10::Symbol> int_kinds = {c10::Symbol::aten("max"), c10::Symbol::aten("min")};
  const bool by_list = list_kinds.count(n->kind()) != 0, by_int = int_kinds.count(n->kind()) != 0;
  if ((!by_list && !by_int) || n->inputs().size() < 3) return false;
  // min/max(x, int dim, keepdim) -> (values, indices); the others one output.
  if (n->outputs().size() != (by_int ? 2u : 1u)) return false;
  if (TensorRank(n->input(0)) != rank) return false;
  for (const Value* out : n->outputs())
    if (TensorRank(out) != rank) return false;
  auto keepdim = torch::jit::toIValue(n->input(2));
  auto dims = ConstIValue(n->input(1));
  if (!keepdim || !keepdim->isBool() || !keepdim->toBool() || !dims) return false;
  std::vector<int64_t> got;
  if (by_int && dims->isInt()) {
    got.push_back(dims->toInt());
  } else if (by_list && dims->isIntList()) {
    got = dims->toIntVector();
  } else {
    return false;
  }
  for (int64_t& d : got) d = d < 0 ? d + rank : d;
  std::sort(got.begin(), got.end());
  // A dtype argument (mean/sum's 4th) other than None changes the values' type: not taken.
  if (by_list && n->inputs().size() > 3 && !IsNoneConst(n->input(3))) return false;
  if (std::binary_search(got.begin(), got.end(), int64_t{1})) return true;  // [N, 1, ...]
  for (int64_t d = 2; d < rank; ++d)
    if (!std::binary_search(got.begin(), got.end(), d)) return false;
  return true;  // [N, C, 1, ...]
}

// Whether `n` preserves a rank-`rank` layout: a preserving kind with one
// output of that rank and every tensor operand of known rank.
bool IsPreserving(const Node* n, int rank) {
  if (IsLayoutFreeReduce(n, rank)) return true;
  if (PreservingKinds().count(n->kind()) == 0 || n->outputs().size() != 1 || TensorRank(n->output()) != rank) {
    return false;
  }
  for (const Value* in : n->inputs()) {
    if (in->type()->cast<c10::TensorType>() && TensorRank(in) < 0) return false;
  }
  return true;
}

bool Joins(const Node* n, int rank) { return ConvSeedRank(n) == rank || IsPreserving(n, rank); }

// Whether region member `n` reads `v` (at `offset`) as an activation in the
// region's layout: a conv's input 0, a preserving op's same-rank operand.
bool ReadsAsActivation(const Node* n, size_t offset, const Value* v, int rank) {
  if (TensorRank(v) != rank || v->node()->kind() == c10::prim::Constant) return false;
  return !IsConvNode(n) || offset == 0;
}

struct Region {
  int rank = 0;
  std::unordered_set<Node*> members;
  std::vector<Node*> convs;
};

// The connected regions of the top-level block: seeded at convs, grown
// through same-rank values to producers and consumers that join.
std::vector<Region> FindRegions(const std::shared_ptr<Graph>& graph) {
  std::vector<Region> regions;
  std::unordered_set<Node*> taken;
  for (Node* seed : graph->nodes()) {
    const int rank = ConvSeedRank(seed);
    if (rank == 0 || taken.count(seed) != 0) continue;
    Region r;
    r.rank = rank;
    std::vector<Node*> queue = {seed};
    r.members.insert(seed);
    taken.insert(seed);
    auto visit = [&](Node* n) {
      if (n->owningBlock() != graph->block() || taken.count(n) != 0 || !Joins(n, rank)) return;
      r.members.insert(n);
      taken.insert(n);
      queue.push_back(n);
    };
    while (!queue.empty()) {
      Node* n = queue.back();
      queue.pop_back();
      if (ConvSeedRank(n) == rank) r.convs.push_back(n);
      for (Value* out : n->outputs()) {
        for (const torch::jit::Use& u : out->uses()) visit(u.user);
      }
      for (size_t i = 0; i < n->inputs().size(); ++i) {
        if (ReadsAsActivation(n, i, n->input(i), rank)) visit(n->input(i)->node());
      }
    }
    regions.push_back(std::move(r));
  }
  return regions;
}

// A converted value: `value` gets a copy in the other layout, inserted
// before `at`, and the uses `uses` read the copy.
struct Edge {
  Value* value = nullptr;
  Node* at = nullptr;
  std::vector<torch::jit::Use> uses;
};

struct RegionPlan {
  std::vector<Edge> entries;
  std::vector<Edge> exits;
};

class Positions {
 public:
  explicit Positions(const std::shared_ptr<Graph>& graph) : graph_(graph) {
    size_t i = 0;
    for (Node* n : graph->nodes()) pos_[n] = i++;
    pos_[graph->return_node()] = i;
  }
  // The top-level node that holds `n` (itself when top-level).
  Node* TopLevel(Node* n) const {
    while (n->owningBlock() != graph_->block()) n = n->owningBlock()->owningNode();
    return n;
  }
  size_t Of(Node* n) const { return pos_.at(TopLevel(n)); }

 private:
  std::shared_ptr<Graph> graph_;
  std::unordered_map<Node*, size_t> pos_;
};

RegionPlan PlanRegion(const Region& r, const Positions& pos) {
  RegionPlan plan;
  std::unordered_map<Value*, size_t> entry_of;
  for (Node* n : r.members) {
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      Value* v = n->input(i);
      if (r.members.count(v->node()) != 0 || !ReadsAsActivation(n, i, v, r.rank)) continue;
      auto [it, fresh] = entry_of.try_emplace(v, plan.entries.size());
      if (fresh) plan.entries.push_back({v, n, {}});
      Edge& e = plan.entries[it->second];
      e.uses.push_back({n, i});
      if (pos.Of(n) < pos.Of(e.at)) e.at = n;
    }
    for (Value* out : n->outputs()) {
      Edge e{out, nullptr, {}};
      for (const torch::jit::Use& u : out->uses()) {
        if (u.user->owningBlock() == n->owningBlock() && r.members.count(u.user) != 0) continue;
        e.uses.push_back(u);
        Node* top = pos.TopLevel(u.user);
        if (e.at == nullptr || pos.Of(top) < pos.Of(e.at)) e.at = top;
      }
      if (!e.uses.empty()) plan.exits.push_back(std::move(e));
    }
  }
  return plan;
}

// Whether a node at or after `at` (top-level order, sub-blocks included)
// writes to an alias of `v`: a copy made at `at` would go stale.
bool WrittenFrom(const torch::jit::AliasDb& db, const std::shared_ptr<Graph>& graph, const Positions& pos, Value* v,
                 Node* at) {
  const torch::jit::ValueSet vs = {v};
  std::function<bool(torch::jit::Block*)> block_writes = [&](torch::jit::Block* b) {
    for (Node* n : b->nodes()) {
      if (db.writesToAlias(n, vs)) return true;
      for (torch::jit::Block* sub : n->blocks())
        if (block_writes(sub)) return true;
    }
    return false;
  };
  const size_t from = pos.Of(at);
  for (Node* n : graph->nodes()) {
    if (pos.Of(n) < from) continue;
    if (db.writesToAlias(n, vs)) return true;
    for (torch::jit::Block* sub : n->blocks())
      if (block_writes(sub)) return true;
  }
  return false;
}

c10::TensorTypePtr WithoutStrides(const c10::TypePtr& type, int rank) {
  auto tt = type->cast<c10::TensorType>();
  return tt->withStrides(c10::VaryingShape<c10::Stride>(static_cast<size_t>(rank)));
}

// aten::contiguous(v, memory_format=format) inserted before `at`.
Value* InsertContiguous(const std::shared_ptr<Graph>& graph, Value* v, Node* at, c10::MemoryFormat format) {
  torch::jit::WithInsertPoint guard(at);
  return graph->insert(c10::aten::contiguous, {v},
                       {torch::jit::NamedValue("memory_format", static_cast<int64_t>(format))});
}

void ApplyRegion(const std::shared_ptr<Graph>& graph, const Region& r, const RegionPlan& plan,
                 MemoryFormatPassResult* result) {
  const c10::MemoryFormat cl = r.rank == 5 ? c10::MemoryFormat::ChannelsLast3d : c10::MemoryFormat::ChannelsLast;
  for (Node* conv : r.convs) {
    Value* w = conv->input(1);
    const at::Tensor frozen = torch::jit::toIValue(w)->toTensor();
    at::Tensor t = frozen.detach().contiguous(cl);
    t.requires_grad_(frozen.requires_grad());
    torch::jit::WithInsertPoint guard(conv);
    conv->replaceInput(1, graph->insertConstant(t));
    if (!w->hasUses()) w->node()->destroy();
    ++result->convs;
  }
  for (const Edge& e : plan.exits) {
    const c10::TypePtr eager_type = e.value->type();
    Value* copy = InsertContiguous(graph, e.value, e.at, c10::MemoryFormat::Contiguous);
    copy->setType(eager_type);
    for (const torch::jit::Use& u : e.uses) u.user->replaceInput(u.offset, copy);
    ++result->exits;
  }
  for (Node* n : r.members) {
    for (Value* out : n->outputs()) out->setType(WithoutStrides(out->type(), r.rank));
  }
  for (const Edge& e : plan.entries) {
    Value* copy = InsertContiguous(graph, e.value, e.at, cl);
    copy->setType(WithoutStrides(e.value->type(), r.rank));
    for (const torch::jit::Use& u : e.uses) u.user->replaceInput(u.offset, copy);
    ++result->entries;
  }
  ++result->regions;
}


}  // namespace

Expected<MemoryFormat> ParseMemoryFormat(std::string_view text) {
  if (text == "auto") return MemoryFormat::kAuto;
  if (text == "contiguous") return MemoryFormat::kContiguous;
  if (text == "channels_last") return MemoryFormat::kChannelsLast;
  return Status(StatusCode::kInvalidArgument,
                "unknown memory format '" + std::string(text) + "' (expected auto, contiguous or channels_last)");
}

const char* MemoryFormatName(MemoryFormat f) {
  switch (f) {
    case MemoryFormat::kAuto: return "auto";
    case MemoryFormat::kContiguous: return "contiguous";
    case MemoryFormat::kChannelsLast: return "channels_last";
  }
  return "auto";
}

bool KeepsChannelsLast(double contiguous_us, double channels_last_us) {
  return KeepsMeasuredGain(contiguous_us, channels_last_us);
}

MemoryFormatPassResult ConvertConvRegionsToChannelsLast(const std::shared_ptr<Graph>& graph) {
  MemoryFormatPassResult result;
  std::vector<Region> regions = FindRegions(graph);
  if (regions.empty()) return result;
  // Plan every region on the unchanged graph, then apply the safe ones.
  const Positions pos(graph);
  std::vector<RegionPlan> plans;
  std::vector<bool> safe;
  {
    torch::jit::AliasDb db(graph);
    for (size_t i = 0; i < regions.size(); ++i) {
      plans.push_back(PlanRegion(regions[i], pos));
      bool ok = true;
      for (const auto* edges : {&plans.back().entries, &plans.back().exits}) {
        for (const Edge& e : *edges) ok = ok && !WrittenFrom(db, graph, pos, e.value, e.at);
      }
      if (!ok) {
        result.skipped.push_back("region " + std::to_string(i + 1) + " (" + std::to_string(regions[i].convs.size()) +
                                 " conv(s)): a value it would copy is written in place; left contiguous");
      }
      safe.push_back(ok);
    }
  }
  for (size_t i = 0; i < regions.size(); ++i) {
    if (safe[i]) ApplyRegion(graph, regions[i], plans[i], &result);
  }
  return result;
}

Expected<std::vector<double>> TimeGraphsRoundRobinN(const std::vector<std::shared_ptr<Graph>>& graphs,
                                                   const std::vector<c10::IValue>& inputs, int warmup, int reps) {
  const at::Tensor* cuda = nullptr;
  for (const auto& iv : inputs) {
    if (iv.isTensor() && iv.toTensor().defined() && iv.toTensor().is_cuda()) {
      cuda = &iv.toTensor();
      break;
    }
  }
  if (cuda == nullptr) return Status(StatusCode::kInvalidArgument, "no CUDA tensor among the inputs");
  const int n = static_cast<int>(graphs.size());
  try {
    c10::AutoGradMode no_grad(false);
    std::vector<torch::jit::Code> codes;
    codes.reserve(graphs.size());
    for (int v = 0; v < n; ++v) codes.emplace_back(graphs[v]->copy(), "dice_timed_graph_" + std::to_string(v));
    auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    const c10::Stream stream = impl->getStream(cuda->device());
    auto time_once = [&](int v) {
      torch::jit::Stack stack(inputs.begin(), inputs.end());
      c10::Event start(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
      c10::Event end(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
      start.record(stream);
      torch::jit::InterpreterState(codes[v]).run(stack);
      end.record(stream);
      end.synchronize();
      return start.elapsedTime(end) * 1000.0;
    };
    for (int w = 0; w < warmup; ++w) {
      for (int v = 0; v < n; ++v) time_once(v);
    }
    std::vector<std::vector<double>> us(n);
    for (int r = 0; r < reps; ++r) {
      for (int i = 0; i < n; ++i) {
        const int v = (i + r) % n;  // each round starts one graph later
        us[v].push_back(time_once(v));
      }
    }
    std::vector<double> medians;
    for (auto& t : us) {
      std::sort(t.begin(), t.end());
      medians.push_back(t[t.size() / 2]);
    }
    return medians;
  } catch (const std::exception& e) {
    return Status(StatusCode::kInvalidArgument, "timing the forward " + std::to_string(n) +
                                                    " ways failed: " + FirstLine(e));
  }
}

Expected<std::pair<double, double>> TimeGraphsRoundRobin(const std::shared_ptr<Graph>& a,
                                                         const std::shared_ptr<Graph>& b,
                                                         const std::vector<c10::IValue>& inputs, int warmup,
                                                         int reps) {
  auto medians = TimeGraphsRoundRobinN({a, b}, inputs, warmup, reps);
  if (!medians.ok()) return medians.status();
  return std::make_pair((*medians)[0], (*medians)[1]);
}

Expected<MemoryFormatOutcome> RunMemoryFormatStep(const std::shared_ptr<Graph>& graph, MemoryFormat requested,
                                                  const std::vector<c10::IValue>& inputs) {
  MemoryFormatOutcome out;
  if (requested == MemoryFormat::kContiguous) {
    out.reason = "contiguous requested";
    return out;
  }
  auto candidate = graph->copy();
  out.pass = ConvertConvRegionsToChannelsLast(candidate);
  if (out.pass.regions == 0) {
    out.reason = "no conv region to convert (a conv with a frozen 4-D/5-D weight on an activation of known rank)";
    if (!out.pass.skipped.empty()) out.reason = out.pass.skipped.front();
    return out;
  }
  if (requested == MemoryFormat::kAuto) {
    if (!HasCudaTensor(inputs)) {
      out.reason = "auto: not measured (no CUDA example inputs); left contiguous";
      return out;
    }
    auto times = TimeGraphsRoundRobin(graph, candidate, inputs, /*warmup=*/3, /*reps=*/10);
    if (!times.ok()) return times.status();
    out.contiguous_us = times->first;
    out.channels_last_us = times->second;
    const std::string measured = "channels_last " + FormatMicros(out.channels_last_us) + " µs vs contiguous " +
                                 FormatMicros(out.contiguous_us) + " µs";
    if (!KeepsChannelsLast(out.contiguous_us, out.channels_last_us)) {
      out.reason = "auto: " + measured + " (channels_last needs >= 2% less); left contiguous";
      return out;
    }
    out.reason = "auto: " + measured;
  } else {
    out.reason = "channels_last requested";
  }
  // The pass is deterministic: it does on the graph what it did on the copy.
  out.pass = ConvertConvRegionsToChannelsLast(graph);
  out.format = "channels_last";
  out.reason += " (" + std::to_string(out.pass.regions) + " region(s), " + std::to_string(out.pass.convs) +
                " conv(s), " + std::to_string(out.pass.entries) + " entry and " + std::to_string(out.pass.exits) +
                " exit conversion(s))";
  return out;
}

}  // namespace dice::torch_ext
