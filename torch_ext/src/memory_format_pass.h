// Private: the "memory format" capture pass (issue 18 item 2). On a frozen,
// inlined TorchScript forward graph it finds the connected regions of
// convolutions (aten::conv2d/conv3d/conv_transpose2d/3d/_convolution/
// convolution with a frozen 4-D or 5-D weight constant) and of the
// layout-preserving ops between them (elementwise, batch_norm, pooling,
// dropout, and a mean/sum/amax/amin over every spatial dim with keepdim: a
// global pool, whose [N, C, 1, ...] output is the same memory in both
// layouts), and runs each region in channels_last (channels_last_3d for 5-D):
//   - each conv weight constant is replaced by its channels_last copy;
//   - one aten::contiguous(x, memory_format=channels_last) is inserted per
//     activation entering the region (its input edges);
//   - one aten::contiguous(x) per value leaving the region, before its first
//     consumer outside it (view/reshape/flatten/linear/... and the graph's
//     outputs), so those consumers and the model's outputs see the strides
//     eager gives them.
// What it leaves alone: nodes inside sub-blocks (prim::If/Loop bodies; a use
// there is a region exit), values of unknown rank (types come from
// ObserveTypes), convs whose weight is not a constant, 1-D convs. A region
// where a converted value is written in place after its copy point (the copy
// would go stale) is skipped with a reason.
//
// The choice between the layouts (RunMemoryFormatStep) is measured: the
// frozen forward is timed both ways on the example inputs with CUDA events,
// round-robin, and channels_last is kept only when it is >= 2% faster.
// Thread-compatible: mutates the graph it is given.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "dice/core/status.h"
#include "dice/torch_ext/optimize.h"

namespace torch::jit {
struct Graph;
}  // namespace torch::jit

namespace dice::torch_ext {

/// What ConvertConvRegionsToChannelsLast did to a graph.
struct MemoryFormatPassResult {
  int regions = 0;  ///< connected conv regions converted
  int convs = 0;    ///< conv nodes whose weight constant became channels_last
  int entries = 0;  ///< aten::contiguous(x, channels_last[_3d]) inserted at region inputs
  int exits = 0;    ///< aten::contiguous(x) inserted where a value leaves a region
  std::vector<std::string> skipped;  ///< one line per region left contiguous, with the reason
};

/// Rewrites every convertible conv region of `graph`'s top-level block to
/// channels_last (see the file comment). Tensor ranks are read from the
/// values' TensorTypes (complete after ObserveTypes); a value of unknown
/// rank is never converted. The new values' strides are left unknown in
/// their types (the caller re-observes them). A graph without a region is
/// left unchanged (result.regions == 0). Throws c10::Error / std::exception
/// on a PyTorch error (the caller applies it to a copy first).
MemoryFormatPassResult ConvertConvRegionsToChannelsLast(const std::shared_ptr<torch::jit::Graph>& graph);

/// Median µs of one run of each of two graphs taking the same inputs
/// (`inputs`: the forward's arguments, self first), timed with CUDA events on
/// the current stream of the first CUDA tensor input: `warmup` untimed runs
/// of each, then `reps` rounds, each running both graphs, the order
/// alternating per round. Runs without autograd. REQUIRES: reps >= 1.
/// Errors: kInvalidArgument when no input is a CUDA tensor or a run throws
/// (the message carries PyTorch's first line).
Expected<std::pair<double, double>> TimeGraphsRoundRobin(const std::shared_ptr<torch::jit::Graph>& a,
                                                         const std::shared_ptr<torch::jit::Graph>& b,
                                                         const std::vector<c10::IValue>& inputs, int warmup,
                                                         int reps);

/// TimeGraphsRoundRobin for any number of graphs taking the same inputs:
/// `warmup` untimed runs of each, then `reps` rounds running every graph
/// once, each round starting one graph later; the median µs of each graph,
/// in the order given. Runs without autograd. REQUIRES: reps >= 1, graphs
/// not empty. Errors: kInvalidArgument when no input is a CUDA tensor or a
/// run throws (the message carries PyTorch's first line).
Expected<std::vector<double>> TimeGraphsRoundRobinN(const std::vector<std::shared_ptr<torch::jit::Graph>>& graphs,
                                                   const std::vector<c10::IValue>& inputs, int warmup, int reps);

/// The measured rule of kAuto: channels_last is kept only when its median
/// is at least 2% below the contiguous one (channels_last_us <= 0.98 ×
/// contiguous_us). A time that is not positive (not measured) keeps
/// contiguous. Pure; µs.
bool KeepsChannelsLast(double contiguous_us, double channels_last_us);

/// What RunMemoryFormatStep chose (copied into OptimizeReport).
struct MemoryFormatOutcome {
  std::string format = "contiguous";  ///< "contiguous" or "channels_last"
  std::string reason;                 ///< one line: why (measured times, forced, not measured)
  double contiguous_us = 0;           ///< median µs of the frozen forward as is; 0 = not timed
  double channels_last_us = 0;        ///< median µs with the regions converted; 0 = not timed
  MemoryFormatPassResult pass;        ///< what the pass did (or would do, when not kept)
};

/// The memory-format step of optimize(): `requested` kContiguous leaves the
/// graph; kChannelsLast converts every region; kAuto converts them only when
/// `inputs` (self first) hold a CUDA tensor and the converted forward times
/// >= 2% faster (TimeGraphsRoundRobin: 3 warmup runs, median of 10), and
/// otherwise leaves the graph, saying why in the reason. The graph is changed
/// only after the pass has succeeded on a copy.
/// Errors: a timing run's error (kInvalidArgument); the graph is unchanged.
Expected<MemoryFormatOutcome> RunMemoryFormatStep(const std::shared_ptr<torch::jit::Graph>& graph,
                                                  MemoryFormat requested, const std::vector<c10::IValue>& inputs);

}  // namespace dice::torch_ext
