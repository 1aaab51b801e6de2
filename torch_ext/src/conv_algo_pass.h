// Private: the conv-algorithm capture pass (issue 18 item 2: "the cuDNN
// engine or algorithm is chosen by measurement for the shape"). ATen's
// convolutions ask cuDNN's heuristics for an algorithm unless
// torch.backends.cudnn.benchmark is set, a process-wide switch that
// PyTorch and Inductor leave off. With benchmark on, the first call of each
// conv shape times every cuDNN algorithm (cudnnFind) and the process keeps
// the fastest for that shape. This pass asks for that per conv, in the
// graph, without touching the process's switch: every conv of the forward
// (conv1d/2d/3d, conv_transpose1d/2d/3d with int padding, convolution,
// _convolution) becomes
//   aten::_convolution(x, w, b, stride, padding, dilation, transposed,
//                      output_padding, groups, benchmark=True,
//                      deterministic, cudnn_enabled, allow_tf32)
// with deterministic, cudnn_enabled and allow_tf32 as ATen's context reads
// them when the model is captured (torch.backends.cudnn.deterministic,
// .enabled, .allow_tf32 for convolutions). The values are the conv's own;
// only the algorithm may differ, and cuDNN's algorithms all compute the
// same convolution (a TF32 one only where allow_tf32 already allowed it).
// The choice (RunConvAlgorithmStep) is measured like the memory format's:
// the forward is timed both ways on CUDA example inputs (round-robin, CUDA
// events, after warm-up runs that include cuDNN's search) and the rewrite is
// kept only when >= 2% faster. Cost when kept: the first forward of each
// conv shape in a process pays cuDNN's search (milliseconds per conv).
// Thread-compatible: mutates the graph it is given.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/ivalue.h>

#include "dice/core/status.h"

namespace torch::jit {
struct Graph;
}  // namespace torch::jit

namespace dice::torch_ext {

/// What the conv-algorithm pass does (DICE_CONV_ALGORITHM).
enum class ConvAlgorithm {
  kAuto,       ///< cuDNN's search when measured >= 2% faster on CUDA example inputs, else its heuristics
  kHeuristic,  ///< leave the convs as they are (cuDNN's heuristics unless the process set benchmark)
  kBenchmark,  ///< every conv asks for cuDNN's search, unmeasured
};

/// "auto" | "heuristic" | "benchmark".
/// Errors: kInvalidArgument naming the value and the accepted ones.
Expected<ConvAlgorithm> ParseConvAlgorithm(std::string_view text);

/// Rewrites every conv of `graph`'s top-level block (the file comment's
/// list) as aten::_convolution
/// with benchmark = true, and returns how many. A conv with a string
/// padding ("same", "valid") is left as it is. The new value takes the old
/// one's type. Throws c10::Error on a PyTorch error (the caller applies it
/// to a copy first, or runs it under the capture passes' fallback).
int AskCudnnToSearch(const std::shared_ptr<torch::jit::Graph>& graph);

/// What RunConvAlgorithmStep chose (copied into OptimizeReport).
struct ConvAlgorithmOutcome {
  std::string choice = "heuristic";  ///< "heuristic" or "benchmark"
  std::string reason;                ///< one line: measured times, forced, not measured, no conv
  double heuristic_us = 0;           ///< median µs of the forward as is; 0 = not timed
  double benchmark_us = 0;           ///< median µs with cuDNN's search; 0 = not timed
  int convs = 0;                     ///< convs rewritten (or that would be)
};

/// The measured decision of kAuto: the rewrite is kept only when its median
/// is at least 2% below the forward's as is (benchmark_us <= 0.98 ×
/// heuristic_us). A time that is not positive keeps the heuristics. Pure; µs.
bool KeepsCudnnSearch(double heuristic_us, double benchmark_us);

/// The decision, made on `graph` before the fusion pass: kHeuristic says so;
/// kBenchmark chooses the rewrite unmeasured; kAuto, when `inputs` (self
/// first) hold a CUDA tensor, rewrites a copy and times both forwards
/// (TimeGraphsRoundRobin: 3 warm-up runs, which include cuDNN's search, then
/// the median of 10) and chooses the rewrite by KeepsCudnnSearch. `graph` is
/// not changed: the caller applies AskCudnnToSearch when the choice is
/// "benchmark" (optimize() does so before the fusion pass, whose conv-group
/// capture reads an _convolution as it reads a conv2d).
/// Errors: a timing run's error (kInvalidArgument).
Expected<ConvAlgorithmOutcome> RunConvAlgorithmStep(const std::shared_ptr<torch::jit::Graph>& graph,
                                                    ConvAlgorithm requested, const std::vector<c10::IValue>& inputs);

}  // namespace dice::torch_ext
