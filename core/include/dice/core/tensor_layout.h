// dice/core/tensor_layout.h — the memory layouts the generated-kernel path
// serves, and eager's rule for the layout of the outputs (issue 18 item 2:
// "templates must handle dense channels_last tensors instead of falling back").
//
// A fusion group's kernel is generated for the element strides of its task's
// input and output specs (the task key holds them). The task a worker tunes
// must therefore equal the task serving looks up, and both derive the output
// specs here, from sizes and strides alone: which layout an input is in
// (ClassifyLayout: contiguous, channels_last, channels_last_3d, or refused),
// the canonical strides that name that layout in a task (LayoutStrides,
// ServedInputSpec), and the strides of the outputs (FollowInputLayout:
// eager's rule that an elementwise result of channels_last inputs is
// channels_last; ApplyOutputLayouts: a layout copy's stated format).
// Serving (torch_ext run_group.cc, optimize.cc) builds its
// tasks with MakeServedTask; the worker applies ApplyOutputLayouts to the
// output specs of a tune request (runtime/worker/verifier.cc), which carries
// none. Torch-free; plain functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dice/core/ir.h"
#include "dice/core/status.h"
#include "dice/core/task.h"

namespace dice {
inline namespace core {

/// The layout of one tensor, as PyTorch's memory formats name it.
enum class TensorLayout : uint8_t {
  kContiguous,      ///< row-major dense (at::MemoryFormat::Contiguous); wins when both apply
  kChannelsLast,    ///< rank 4, dense in (N, H, W, C) order (at::MemoryFormat::ChannelsLast)
  kChannelsLast3d,  ///< rank 5, dense in (N, D, H, W, C) order (at::MemoryFormat::ChannelsLast3d)
  kStrided,         ///< non-overlapping but neither of the above (slices, transposes, other orders)
  kOverlapping,     ///< some elements share memory (expand, stride 0 along a dim of size > 1)
};

/// Classifies a tensor of `rank` dims from its sizes and element strides, by
/// PyTorch's rules (c10 compute_contiguous / compute_channels_last_contiguous_2d
/// and _3d): strides of size-1 dims are ignored. Empty tensors are
/// contiguous. Allocates nothing (the per-call eligibility check runs it).
TensorLayout ClassifyLayout(const int64_t* sizes, const int64_t* strides, size_t rank);

/// ClassifyLayout of a spec's shape and strides; kStrided when the spec has
/// not one stride per dim.
TensorLayout ClassifyLayout(const ir::TensorSpec& spec);

/// Whether the kernel path serves inputs in `layout` (contiguous,
/// channels_last, channels_last_3d).
bool Servable(TensorLayout layout);

/// The fallback reason for input `input` in a layout the kernel path does
/// not serve: "non-contiguous input <i>" (kStrided: the text every
/// non-contiguous input gave before channels_last was served) or
/// "non-contiguous input <i> (overlapping: expanded or stride 0)". "" for a
/// servable layout.
std::string LayoutRefusal(TensorLayout layout, size_t input);

/// PyTorch's strides (elements) for a fresh tensor of `shape` in `layout`
/// (at::empty(shape, memory_format)): size-0 dims count as 1 in contiguous
/// strides; channels_last ones use the raw sizes, as c10's
/// get_channels_last_strides_2d / _3d do. kStrided and kOverlapping, and a
/// channels_last layout of the wrong rank, give the contiguous strides.
std::vector<int64_t> LayoutStrides(const std::vector<int64_t>& shape, TensorLayout layout);

/// The spec of a served input: `spec` itself when contiguous (task keys of
/// contiguous calls stay byte-identical), else the canonical strides of its
/// layout (LayoutStrides), so the strides of size-1 dims, which PyTorch
/// leaves arbitrary, never split one layout into several task keys.
ir::TensorSpec ServedInputSpec(ir::TensorSpec spec, TensorLayout layout);

/// Eager's output-layout rule, applied in place to `outputs` (as
/// ir::InferOutputSpecs made them, contiguous): an output takes the
/// channels_last / channels_last_3d strides (LayoutStrides) of the first
/// input of exactly its shape when that input is in that layout and not also
/// contiguous (TensorIterator's result of channels_last operands). Others
/// stay as given; contiguous inputs change nothing.
void FollowInputLayout(const std::vector<ir::TensorSpec>& inputs, std::vector<ir::TensorSpec>* outputs);

/// The layout of a group output produced by an ir::OpKind::kContiguous op:
/// its ivalue's format (0 contiguous, 1 channels_last, 2 channels_last_3d).
/// kStrided (meaning: no stated layout) for any other producer or an
/// ivalue out of range. `output` indexes graph.outputs.
TensorLayout StatedOutputLayout(const ir::Graph& graph, size_t output);

/// The output-layout rule of a group, in place on `outputs` (one spec per
/// graph output, contiguous as ir::InferOutputSpecs made them): an output
/// produced by a layout copy (kContiguous) takes the strides of its stated
/// format (LayoutStrides: a region's exit copy fused into the epilogue writes
/// NCHW, an entry copy writes channels_last), every other output follows
/// FollowInputLayout. In a graph holding a pool (avg_pool / max_pool), an
/// output of no input's shape, of the rank and N, C of a channels_last(_3d)
/// input, takes that layout (eager's pools keep their input's format). A
/// graph without a layout copy or a pool gets exactly FollowInputLayout's
/// strides, so no existing task key changes. This is
/// eager's result for the group when a layout copy's value has no reader
/// inside the group (the fusion policy keeps it so: fusion_policy.h rule 5).
void ApplyOutputLayouts(const ir::Graph& graph, const std::vector<ir::TensorSpec>& inputs,
                        std::vector<ir::TensorSpec>* outputs);

/// The task serving builds for one call, and the worker tunes: Task::Make,
/// then ApplyOutputLayouts on its outputs. `inputs` should be
/// ServedInputSpec's. Errors: those of Task::Make (kInvalidArgument when the
/// specs do not fit the graph).
Expected<Task> MakeServedTask(ir::Graph graph, std::vector<ir::TensorSpec> inputs, TargetInfo target);

}  // namespace core
}  // namespace dice
