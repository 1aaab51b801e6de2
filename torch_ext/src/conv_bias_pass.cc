// conv_bias_pass.cc — see conv_bias_pass.h.
#include "conv_bias_pass.h"

#include <utility>
#include <vector>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "dice/reference/reference_executor.h"
#include "dice/torch_ext/capture.h"
#include "fusion_policy.h"
#include "graph_pass_util.h"

namespace dice::torch_ext {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// The conv's bias constant [K] (input 2 in every conv schema), or undefined.
at::Tensor ConstantBias(const Node* conv) {
  if (conv->inputs().size() < 3) return at::Tensor();
  at::Tensor b = TensorConst(conv->input(2));
  return b.defined() && b.dim() == 1 ? b : at::Tensor();
}

// Whether the fusion pass takes `conv` itself into a conv group
// (DICE_CONV_GROUPS, fusion_policy.h rule 4): the conv template then fuses
// the bias in its epilogue, and this pass leaves it there.
bool TakenAsConvGroup(const Node* conv) {
  if (!IsConvKind(conv->kind().toQualString())) return false;
  auto tt = conv->output()->type()->cast<c10::TensorType>();
  const GemmGroups setting = ConvGroupsFromEnv();
  // An unknown or unsupported dtype: only DICE_CONV_GROUPS=all takes every conv.
  if (!tt || !tt->scalarType().has_value()) return setting == GemmGroups::kAll;
  auto dtype = reference::FromScalarType(tt->scalarType().value());
  return dtype.ok() ? GemmGroupAllowed(setting, *dtype) : setting == GemmGroups::kAll;
}

}  // namespace

int MoveConvBiasIntoEpilogue(const std::shared_ptr<torch::jit::Graph>& graph) {
  std::vector<std::pair<Node*, at::Tensor>> convs;  // with their bias
  for (Node* n : graph->nodes()) {
    if (!IsConvNode(n) || n->outputs().size() != 1) continue;
    const int rank = TensorRank(n->output());
    if (rank != 4 && rank != 5) continue;
    at::Tensor bias = ConstantBias(n);
    if (!bias.defined() || n->output()->uses().empty() || TakenAsConvGroup(n)) continue;
    // Every reader fuses (x * tanh(softplus(x)) reads the conv output twice):
    // the add then lands in their group, and no reader outside a group pays
    // for a pass that cuDNN's own bias add would have made.
    bool all_fuse = true;
    for (const auto& use : n->output()->uses()) {
      const Node* reader = use.user;
      all_fuse = all_fuse && reader->owningBlock() == graph->block() && UnsupportedReason(reader).empty();
    }
    if (!all_fuse) continue;
    convs.emplace_back(n, std::move(bias));
  }
  for (auto& [conv, bias] : convs) {
    std::vector<int64_t> shape(static_cast<size_t>(TensorRank(conv->output())) - 1, 1);
    shape[0] = bias.size(0);
    Value* none = nullptr;
    {
      torch::jit::WithInsertPoint before(conv);
      none = graph->insertConstant(c10::IValue());
    }
    torch::jit::WithInsertPoint guard(conv->next());
    Value* view = graph->insertConstant(bias.reshape(shape).contiguous());
    Value* y = conv->output();
    Value* sum = graph->insert(c10::aten::add, {y, view});
    sum->setType(y->type());
    y->replaceAllUsesAfterNodeWith(sum->node(), sum);
    conv->replaceInput(2, none);
  }
  return static_cast<int>(convs.size());
}

}  // namespace dice::torch_ext
