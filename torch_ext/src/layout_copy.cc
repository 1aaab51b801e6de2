// layout_copy.cc — see layout_copy.h.
#include "layout_copy.h"

#include <string>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "dice/core/tensor_layout.h"

namespace dice::torch_ext {

Expected<int64_t> LayoutCopyFormat(const torch::jit::Node* node) {
  auto refuse = [](const std::string& why) {
    return Status(StatusCode::kUnsupported, "aten::contiguous: " + why);
  };
  int64_t format = 0;  // ir.h: 0 contiguous, 1 channels_last, 2 channels_last_3d
  TensorLayout target = TensorLayout::kContiguous;
  const auto* schema = node->maybeSchema();
  if (schema != nullptr && schema->argumentIndexWithName("memory_format")) {
    const torch::jit::Value* arg = node->namedInput(c10::Symbol::attr("memory_format"));
    auto iv = torch::jit::toIValue(arg);
    if (!iv || !(iv->isInt() || iv->isNone())) return refuse("non-constant memory_format");
    if (iv->isInt()) {
      switch (static_cast<at::MemoryFormat>(iv->toInt())) {
        case at::MemoryFormat::Contiguous: break;
        case at::MemoryFormat::ChannelsLast: format = 1; target = TensorLayout::kChannelsLast; break;
        case at::MemoryFormat::ChannelsLast3d: format = 2; target = TensorLayout::kChannelsLast3d; break;
        default: return refuse("memory_format other than contiguous / channels_last[_3d]");
      }
    }
  }
  auto tt = node->input(0)->type()->cast<c10::TensorType>();
  auto sizes = tt ? tt->sizes().concrete_sizes() : std::nullopt;
  auto strides = tt ? tt->strides().concrete_sizes() : std::nullopt;
  if (!sizes || !strides || sizes->size() != strides->size())
    return refuse("input strides unknown (a layout copy joins a group only where it changes a known layout)");
  const TensorLayout from = ClassifyLayout(sizes->data(), strides->data(), sizes->size());
  if (!Servable(from)) return refuse("input is a strided view (neither contiguous nor channels_last)");
  if (from == target) return refuse("input already in that memory format (PyTorch's copy is free)");
  return format;
}

}  // namespace dice::torch_ext
