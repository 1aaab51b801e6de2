// Private: which aten::contiguous nodes are layout copies a fusion group
// takes (ir::OpKind::kContiguous; issue 18 item 2). The memory-format pass
// (memory_format_pass.h) puts one at each edge of a channels_last conv
// region; as group ops they get the tiled-transpose kernels of the templates,
// and a region's exit copy ends its epilogue group (fusion_policy.h rule 5).
// Taken only where the copy changes a known, served layout (contiguous <->
// channels_last / channels_last_3d); a copy PyTorch makes for free (the input
// is already in that format) or one of a strided view (a transpose, which the
// kernels do not serve) stays with PyTorch, with the reason.
#pragma once

#include <cstdint>

#include "dice/core/status.h"

namespace torch::jit {
struct Node;
}  // namespace torch::jit

namespace dice::torch_ext {

/// The kContiguous ivalue (0 contiguous, 1 channels_last, 2
/// channels_last_3d) of the aten::contiguous `node`. Reads the input's
/// observed sizes and strides (ObserveTypes). Errors: kUnsupported,
/// "aten::contiguous: <why>": a non-constant or preserve memory_format,
/// unknown strides, a strided input, an input already in the format.
Expected<int64_t> LayoutCopyFormat(const torch::jit::Node* node);

}  // namespace dice::torch_ext
