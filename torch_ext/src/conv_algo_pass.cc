// The conv-algorithm capture pass and its measured decision (conv_algo_pass.h).
#include "conv_algo_pass.h"

#include <string>
#include <vector>

#include <ATen/Context.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "graph_pass_util.h"
#include "memory_format_pass.h"

namespace dice::torch_ext {

namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// The arguments of one conv in _convolution's order, or why it is left.
struct ConvArgs {
  Value *x = nullptr, *w = nullptr, *b = nullptr, *stride = nullptr, *padding = nullptr, *dilation = nullptr;
  Value *transposed = nullptr, *output_padding = nullptr, *groups = nullptr;
  // An _convolution's own deterministic, cudnn_enabled, allow_tf32; nullptr:
  // ATen's context decides (the other convs read it at run time).
  Value *deterministic = nullptr, *enabled = nullptr, *tf32 = nullptr;
};

// A string padding ("same", "valid") or an unbatched input (rank below the
// weight's) has no _convolution form: nullopt.
std::optional<ConvArgs> ReadConv(Graph* graph, Node* n) {
  const bool plain = IsAten(n, "conv1d") || IsAten(n, "conv2d") || IsAten(n, "conv3d");
  const bool transpose = IsAten(n, "conv_transpose1d") || IsAten(n, "conv_transpose2d") || IsAten(n, "conv_transpose3d");
  const bool general = IsAten(n, "convolution") || IsAten(n, "_convolution");
  if (!plain && !transpose && !general) return std::nullopt;
  ConvArgs a;
  a.x = n->input(0);
  a.w = n->input(1);
  const int rank = TensorRank(a.w);
  if (rank < 3 || TensorRank(a.x) != rank) return std::nullopt;
  if (general) {
    if (n->inputs().size() < 9) return std::nullopt;
    a.b = n->input(2), a.stride = n->input(3), a.padding = n->input(4), a.dilation = n->input(5);
    a.transposed = n->input(6), a.output_padding = n->input(7), a.groups = n->input(8);
    if (IsAten(n, "_convolution")) {
      if (n->inputs().size() < 13) return std::nullopt;  // the deprecated overload
      a.deterministic = n->input(10), a.enabled = n->input(11), a.tf32 = n->input(12);
    }
    return a;
  }
  if (n->inputs().size() < 7 || !n->input(4)->type()->cast<c10::ListType>()) return std::nullopt;  // str padding
  a.b = n->input(2), a.stride = n->input(3), a.padding = n->input(4);
  if (plain) {
    a.dilation = n->input(5), a.groups = n->input(6);
    a.transposed = graph->insertConstant(false);
    a.output_padding = graph->insertConstant(std::vector<int64_t>(rank - 2, 0));
  } else {
    if (n->inputs().size() < 8) return std::nullopt;
    a.output_padding = n->input(5), a.groups = n->input(6), a.dilation = n->input(7);
    a.transposed = graph->insertConstant(true);
  }
  return a;
}

}  // namespace

Expected<ConvAlgorithm> ParseConvAlgorithm(std::string_view text) {
  if (text == "auto") return ConvAlgorithm::kAuto;
  if (text == "heuristic") return ConvAlgorithm::kHeuristic;
  if (text == "benchmark") return ConvAlgorithm::kBenchmark;
  return Status(StatusCode::kInvalidArgument,
                "unknown conv algorithm mode '" + std::string(text) + "' (expected auto, heuristic or benchmark)");
}

int AskCudnnToSearch(const std::shared_ptr<Graph>& graph) {
  const at::Context& ctx = at::globalContext();
  const bool deterministic = ctx.deterministicCuDNN();
  const bool enabled = ctx.userEnabledCuDNN();
  const bool tf32 = ctx.allowTF32CuDNN(at::Float32Op::CONV);
  std::vector<Node*> convs;
  for (Node* n : graph->block()->nodes()) {
    if (IsConvNode(n) || IsAten(n, "conv1d") || IsAten(n, "conv_transpose1d")) convs.push_back(n);
  }
  int rewritten = 0;
  for (Node* n : convs) {
    torch::jit::WithInsertPoint guard(n);
    auto a = ReadConv(graph.get(), n);
    if (!a) continue;
    auto flag = [&](Value* own, bool context) { return own != nullptr ? own : graph->insertConstant(context); };
    Value* y = graph->insert(c10::Symbol::aten("_convolution"),
                             {a->x, a->w, a->b, a->stride, a->padding, a->dilation, a->transposed, a->output_padding,
                              a->groups, graph->insertConstant(true), flag(a->deterministic, deterministic),
                              flag(a->enabled, enabled), flag(a->tf32, tf32)});
    y->setType(n->output()->type());
    n->output()->replaceAllUsesWith(y);
    n->destroy();
    ++rewritten;
  }
  return rewritten;
}

bool KeepsCudnnSearch(double heuristic_us, double benchmark_us) {
  return KeepsMeasuredGain(heuristic_us, benchmark_us);
}

Expected<ConvAlgorithmOutcome> RunConvAlgorithmStep(const std::shared_ptr<Graph>& graph, ConvAlgorithm requested,
                                                    const std::vector<c10::IValue>& inputs) {
  ConvAlgorithmOutcome out;
  if (requested == ConvAlgorithm::kHeuristic) {
    out.reason = "heuristic requested";
    return out;
  }
  auto candidate = graph->copy();
  out.convs = AskCudnnToSearch(candidate);
  if (out.convs == 0) {
    out.reason = "no conv with a batched input of known rank and an int padding";
    return out;
  }
  if (requested == ConvAlgorithm::kAuto) {
    if (!HasCudaTensor(inputs)) {
      out.reason = "auto: not measured (no CUDA example inputs); cuDNN's heuristics";
      return out;
    }
    auto times = TimeGraphsRoundRobin(graph, candidate, inputs, /*warmup=*/3, /*reps=*/10);
    if (!times.ok()) return times.status();
    out.heuristic_us = times->first;
    out.benchmark_us = times->second;
    const std::string measured = "cuDNN's search " + FormatMicros(out.benchmark_us) + " µs vs its heuristics " +
                                 FormatMicros(out.heuristic_us) + " µs";
    if (!KeepsCudnnSearch(out.heuristic_us, out.benchmark_us)) {
      out.reason = "auto: " + measured + " (the search needs >= 2% less); cuDNN's heuristics";
      return out;
    }
    out.reason = "auto: " + measured;
  } else {
    out.reason = "benchmark requested";
  }
  out.choice = "benchmark";
  out.reason += " (" + std::to_string(out.convs) + " conv(s))";
  return out;
}

}  // namespace dice::torch_ext
