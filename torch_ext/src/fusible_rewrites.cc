// fusible_rewrites.cc — see fusible_rewrites.h.
#include "fusible_rewrites.h"

#include <string>
#include <unordered_set>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/remove_mutation.h>

#include "dice/torch_ext/capture.h"
#include "graph_pass_util.h"

namespace dice::torch_ext {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// A 1-D constant [c] of `dtype`, or undefined.
at::Tensor ChannelConst(const Value* v, int64_t c, c10::ScalarType dtype) {
  at::Tensor t = TensorConst(v);
  return t.defined() && t.dim() == 1 && t.size(0) == c && t.scalar_type() == dtype ? t : at::Tensor();
}

bool Fusible(const Node* n) { return n->kind() != c10::prim::Param && UnsupportedReason(n).empty(); }

// The folded {scale, shift} of an eligible batch_norm (header), or {} when
// it is not one.
std::vector<at::Tensor> FoldedAffine(const Node* bn) {
  // aten::batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum, eps, cudnn_enabled)
  if (bn->inputs().size() != 9 || bn->outputs().size() != 1) return {};
  auto training = torch::jit::toIValue(bn->input(5));
  auto eps = ScalarConst(bn->input(7));
  if (!training || !training->isBool() || training->toBool() || !eps) return {};
  auto tt = bn->input(0)->type()->cast<c10::TensorType>();
  const int rank = TensorRank(bn->input(0));
  if (!tt || rank < 2 || !tt->scalarType() || !at::isFloatingType(*tt->scalarType())) return {};
  auto sizes = tt->sizes().concrete_sizes();
  if (!sizes) return {};
  const int64_t c = (*sizes)[1];
  const c10::ScalarType dtype = *tt->scalarType();
  const at::Tensor mean = ChannelConst(bn->input(3), c, dtype);
  const at::Tensor var = ChannelConst(bn->input(4), c, dtype);
  if (!mean.defined() || !var.defined()) return {};
  at::Tensor w, b;
  if (!IsNoneConst(bn->input(1)) && !(w = ChannelConst(bn->input(1), c, dtype)).defined()) return {};
  if (!IsNoneConst(bn->input(2)) && !(b = ChannelConst(bn->input(2), c, dtype)).defined()) return {};
  bool neighbour = Fusible(bn->input(0)->node());
  for (const auto& use : bn->output()->uses()) neighbour = neighbour || Fusible(use.user);
  if (!neighbour) return {};
  const at::Tensor invstd = (var.to(at::kDouble) + *eps).rsqrt();
  const at::Tensor scale = w.defined() ? w.to(at::kDouble) * invstd : invstd;
  const at::Tensor shift = (b.defined() ? b.to(at::kDouble) : at::zeros_like(scale)) - mean.to(at::kDouble) * scale;
  std::vector<int64_t> view(static_cast<size_t>(rank) - 1, 1);
  view[0] = c;
  return {scale.to(dtype).reshape(view).contiguous(), shift.to(dtype).reshape(view).contiguous()};
}

}  // namespace

int FoldInferenceBatchNorm(const std::shared_ptr<torch::jit::Graph>& graph) {
  static const c10::Symbol kBatchNorm = c10::Symbol::aten("batch_norm");
  std::vector<std::pair<Node*, std::vector<at::Tensor>>> found;
  for (Node* n : graph->nodes()) {
    if (n->kind() != kBatchNorm) continue;
    auto affine = FoldedAffine(n);
    if (!affine.empty()) found.emplace_back(n, std::move(affine));
  }
  for (auto& [bn, affine] : found) {
    torch::jit::WithInsertPoint guard(bn);
    Value* scale = graph->insertConstant(affine[0]);
    Value* shift = graph->insertConstant(affine[1]);
    Value* scaled = graph->insert(c10::aten::mul, {bn->input(0), scale});
    scaled->setType(bn->output()->type());
    Value* y = graph->insert(c10::aten::add, {scaled, shift});
    y->setType(bn->output()->type());
    bn->output()->replaceAllUsesWith(y);
    bn->destroy();
  }
  return static_cast<int>(found.size());
}

bool MakeElementwiseFunctional(const std::shared_ptr<torch::jit::Graph>& graph) {
  static const std::unordered_set<c10::Symbol> inplace = [] {
    std::unordered_set<c10::Symbol> s;
    for (const char* n : ElementwiseOpNames()) s.insert(c10::Symbol::aten(std::string(n) + "_"));
    return s;
  }();
  return torch::jit::RemoveTensorMutation(graph, [](Node* n) { return inplace.count(n->kind()) != 0; });
}

int GlobalPoolAsMean(const std::shared_ptr<torch::jit::Graph>& graph) {
  static const c10::Symbol k2d = c10::Symbol::aten("adaptive_avg_pool2d");
  static const c10::Symbol k3d = c10::Symbol::aten("adaptive_avg_pool3d");
  std::vector<std::pair<Node*, std::vector<int64_t>>> found;  // with the dims to average
  for (Node* n : graph->nodes()) {
    if ((n->kind() != k2d && n->kind() != k3d) || n->inputs().size() != 2 || n->outputs().size() != 1) continue;
    const int spatial = n->kind() == k2d ? 2 : 3;
    auto size = ConstIValue(n->input(1));
    auto tt = n->input(0)->type()->cast<c10::TensorType>();
    const int rank = TensorRank(n->input(0));
    if (!size || !size->isIntList() || !tt || !tt->scalarType() || !at::isFloatingType(*tt->scalarType())) continue;
    if (rank != spatial + 1 && rank != spatial + 2) continue;
    const auto out = size->toIntVector();
    if (static_cast<int>(out.size()) != spatial) continue;
    bool ones = true;
    for (int64_t e : out) ones = ones && e == 1;
    if (!ones) continue;
    std::vector<int64_t> dims;
    for (int d = rank - spatial; d < rank; ++d) dims.push_back(d);
    found.emplace_back(n, std::move(dims));
  }
  for (auto& [pool, dims] : found) {
    torch::jit::WithInsertPoint guard(pool);
    Value* mean = graph->insert(c10::aten::mean, {pool->input(0), dims, true});
    mean->setType(pool->output()->type());
    pool->output()->replaceAllUsesWith(mean);
    pool->destroy();
  }
  return static_cast<int>(found.size());
}

int RemoveIdentityCopies(const std::shared_ptr<torch::jit::Graph>& graph, bool remove_detach) {
  static const c10::Symbol kClone = c10::Symbol::aten("clone");
  static const c10::Symbol kDetach = c10::Symbol::aten("detach");
  torch::jit::AliasDb alias_db(graph);
  std::vector<Node*> found;
  for (Node* n : graph->nodes()) {
    const bool clone = n->kind() == kClone, detach = remove_detach && n->kind() == kDetach;
    if ((!clone && !detach) || n->inputs().empty() || n->outputs().size() != 1) continue;
    Value* in = n->input(0);
    Value* out = n->output();
    if (!in->type()->cast<c10::TensorType>()) continue;
    if (clone) {  // memory_format None or torch.preserve_format only: contiguous_format may reorder
      if (n->inputs().size() != 2) continue;
      auto format = ConstIValue(n->input(1));
      if (!format) continue;
      if (!format->isNone() &&
          !(format->isInt() && format->toInt() == static_cast<int64_t>(c10::MemoryFormat::Preserve)))
        continue;
    }
    // Returned (directly or inside a tuple / list): the caller owns it.
    if (alias_db.mayContainAlias(out, graph->outputs())) continue;
    if (alias_db.hasWriters(in) || alias_db.hasWriters(out)) continue;
    found.push_back(n);
  }
  for (Node* n : found) {
    n->output()->replaceAllUsesWith(n->input(0));
    n->destroy();
  }
  return static_cast<int>(found.size());
}

}  // namespace dice::torch_ext
