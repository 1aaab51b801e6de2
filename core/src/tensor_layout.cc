// tensor_layout.cc — layout classification and eager's output-layout rule
// (dice/core/tensor_layout.h).
#include "dice/core/tensor_layout.h"

#include <algorithm>
#include <utility>

namespace dice {
inline namespace core {
namespace {

// Dims of the channels_last orders, innermost first (C, then W, H[, D], N).
constexpr int kChannelsLast2d[] = {1, 3, 2, 0};
constexpr int kChannelsLast3d[] = {1, 4, 3, 2, 0};

// Dense in the order `inner_first` (a permutation of all dims), ignoring
// size-1 dims.
bool DenseIn(const int64_t* sizes, const int64_t* strides, const int* inner_first, size_t rank) {
  int64_t expected = 1;
  for (size_t k = 0; k < rank; ++k) {
    const int d = inner_first[k];
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// Some element reachable from two index tuples: a stride-0 dim of size > 1,
// or, dims sorted by stride, one dim's stride below the extent of the inner ones.
bool Overlaps(const int64_t* sizes, const int64_t* strides, size_t rank) {
  constexpr size_t kMaxRank = 16;
  if (rank > kMaxRank) return false;  // not classified further: refused as strided
  size_t dims[kMaxRank];
  size_t n = 0;
  for (size_t d = 0; d < rank; ++d) {
    if (sizes[d] <= 1) continue;
    if (strides[d] == 0) return true;
    dims[n++] = d;
  }
  std::sort(dims, dims + n, [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t extent = 1;  // elements spanned by the inner dims
  for (size_t k = 0; k < n; ++k) {
    if (strides[dims[k]] < extent) return true;
    extent = strides[dims[k]] * sizes[dims[k]];
  }
  return false;
}

}  // namespace

TensorLayout ClassifyLayout(const int64_t* sizes, const int64_t* strides, size_t rank) {
  int64_t expected = 1;
  bool contiguous = true;
  for (size_t d = rank; d-- > 0;) {
    if (sizes[d] == 0) return TensorLayout::kContiguous;
    if (sizes[d] != 1 && strides[d] != expected) contiguous = false;
    expected *= sizes[d];
  }
  if (contiguous) return TensorLayout::kContiguous;
  if (rank == 4 && DenseIn(sizes, strides, kChannelsLast2d, rank)) return TensorLayout::kChannelsLast;
  if (rank == 5 && DenseIn(sizes, strides, kChannelsLast3d, rank)) return TensorLayout::kChannelsLast3d;
  return Overlaps(sizes, strides, rank) ? TensorLayout::kOverlapping : TensorLayout::kStrided;
}

TensorLayout ClassifyLayout(const ir::TensorSpec& spec) {
  if (spec.strides.size() != spec.shape.size()) return TensorLayout::kStrided;
  return ClassifyLayout(spec.shape.data(), spec.strides.data(), spec.shape.size());
}

bool Servable(TensorLayout layout) {
  return layout == TensorLayout::kContiguous || layout == TensorLayout::kChannelsLast ||
         layout == TensorLayout::kChannelsLast3d;
}

std::string LayoutRefusal(TensorLayout layout, size_t input) {
  if (Servable(layout)) return std::string();
  std::string text = "non-contiguous input " + std::to_string(input);
  if (layout == TensorLayout::kOverlapping) text += " (overlapping: expanded or stride 0)";
  return text;
}

std::vector<int64_t> LayoutStrides(const std::vector<int64_t>& shape, TensorLayout layout) {
  const size_t rank = shape.size();
  const int* order = nullptr;
  if (layout == TensorLayout::kChannelsLast && rank == 4) order = kChannelsLast2d;
  if (layout == TensorLayout::kChannelsLast3d && rank == 5) order = kChannelsLast3d;
  std::vector<int64_t> strides(rank, 1);
  int64_t stride = 1;
  for (size_t k = 0; k < rank; ++k) {
    const size_t d = order ? static_cast<size_t>(order[k]) : rank - 1 - k;
    strides[d] = stride;
    stride *= order ? shape[d] : std::max<int64_t>(shape[d], 1);  // c10's get_channels_last_strides_*d: raw sizes
  }
  return strides;
}

ir::TensorSpec ServedInputSpec(ir::TensorSpec spec, TensorLayout layout) {
  if (layout == TensorLayout::kChannelsLast || layout == TensorLayout::kChannelsLast3d)
    spec.strides = LayoutStrides(spec.shape, layout);
  return spec;
}

void FollowInputLayout(const std::vector<ir::TensorSpec>& inputs, std::vector<ir::TensorSpec>* outputs) {
  for (auto& out : *outputs) {
    for (const auto& in : inputs) {
      if (in.shape != out.shape) continue;
      const TensorLayout layout = ClassifyLayout(in);
      if (layout == TensorLayout::kChannelsLast || layout == TensorLayout::kChannelsLast3d)
        out.strides = LayoutStrides(out.shape, layout);
      break;  // the first input of the output's shape decides
    }
  }
}

TensorLayout StatedOutputLayout(const ir::Graph& graph, size_t output) {
  if (output >= graph.outputs.size()) return TensorLayout::kStrided;
  const int64_t op_index = static_cast<int64_t>(graph.outputs[output]) - static_cast<int64_t>(graph.inputs.size());
  if (op_index < 0 || op_index >= static_cast<int64_t>(graph.ops.size())) return TensorLayout::kStrided;
  const ir::Op& op = graph.ops[static_cast<size_t>(op_index)];
  if (op.kind != ir::OpKind::kContiguous) return TensorLayout::kStrided;
  switch (op.ivalue) {
    case 0: return TensorLayout::kContiguous;
    case 1: return TensorLayout::kChannelsLast;
    case 2: return TensorLayout::kChannelsLast3d;
    default: return TensorLayout::kStrided;
  }
}

namespace {
// Eager's pools keep their input's memory format (avg_pool2d / max_pool2d of
// a channels_last tensor is channels_last), and the elementwise ops after
// them follow it. In a group holding a pool, an output that
// FollowInputLayout left as given, of the rank of a channels_last(_3d) input
// with that input's N and C, takes that layout. Graphs without a pool are
// untouched, so no existing task key changes.
void FollowPoolLayout(const ir::Graph& graph, const std::vector<ir::TensorSpec>& inputs,
                      std::vector<ir::TensorSpec>* outputs) {
  bool pool = false;
  for (const ir::Op& op : graph.ops) pool = pool || ir::GetOpInfo(op.kind).category == ir::OpCategory::kPool;
  if (!pool) return;
  for (auto& out : *outputs) {
    if (ClassifyLayout(out) != TensorLayout::kContiguous || out.shape.size() < 4) continue;
    bool same_shape_input = false;
    for (const auto& in : inputs) same_shape_input = same_shape_input || in.shape == out.shape;
    if (same_shape_input) continue;  // FollowInputLayout's rule decided
    for (const auto& in : inputs) {
      if (in.shape.size() != out.shape.size() || in.shape[0] != out.shape[0] || in.shape[1] != out.shape[1]) continue;
      const TensorLayout layout = ClassifyLayout(in);
      if (layout == TensorLayout::kChannelsLast || layout == TensorLayout::kChannelsLast3d)
        out.strides = LayoutStrides(out.shape, layout);
      break;
    }
  }
}
}  // namespace

void ApplyOutputLayouts(const ir::Graph& graph, const std::vector<ir::TensorSpec>& inputs,
                        std::vector<ir::TensorSpec>* outputs) {
  FollowInputLayout(inputs, outputs);
  FollowPoolLayout(graph, inputs, outputs);
  for (size_t o = 0; o < outputs->size(); ++o) {
    const TensorLayout stated = StatedOutputLayout(graph, o);
    if (stated == TensorLayout::kStrided) continue;
    (*outputs)[o].strides = LayoutStrides((*outputs)[o].shape, stated);
  }
}

Expected<Task> MakeServedTask(ir::Graph graph, std::vector<ir::TensorSpec> inputs, TargetInfo target) {
  auto task = Task::Make(std::move(graph), std::move(inputs), std::move(target));
  if (!task.ok()) return task.status();
  ApplyOutputLayouts(task->graph, task->inputs, &task->outputs);
  return task;
}

}  // namespace core
}  // namespace dice
