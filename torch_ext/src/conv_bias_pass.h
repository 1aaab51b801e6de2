// Private: the "conv bias" capture pass (issue 18 item 2). PyTorch's cuDNN
// convolution adds its bias in a pass of its own over the output (ATen's
// _convolution: output.add_(bias viewed [1, K, 1, ...])), one more read and
// write of the whole activation; Inductor instead folds the bias into the
// Triton epilogue after the conv. On a frozen, inlined, type-observed
// TorchScript forward graph this pass does the same for the fusion groups:
// a conv (conv2d, conv3d, conv_transpose2d/3d, _convolution, convolution)
// whose bias is a 1-D tensor constant [K] and whose output's readers (one or
// more: x * tanh(softplus(x)) reads it twice) are all ops the fusion pass can
// fuse (UnsupportedReason == ""), becomes the conv without bias followed by
// aten::add(y, bias viewed [K, 1, 1(, 1)]), which every reader then reads and
// which joins the epilogue's fusion group. The values are eager's: the
// bias is added after the conv in the output's dtype either way. Convs whose
// bias is None or not a constant, whose output has a reader outside any
// group (or no reader), or that the fusion pass takes into a conv group
// of its own (DICE_CONV_GROUPS: the conv template fuses the bias), are left
// as they are.
// Thread-compatible: mutates the graph it is given.
#pragma once

#include <memory>

namespace torch::jit {
struct Graph;
}  // namespace torch::jit

namespace dice::torch_ext {

/// Rewrites every eligible conv of `graph`'s top-level block (see the file
/// comment) and returns how many it moved the bias of. The new add's output
/// takes the conv output's type (dtype, shape, strides as observed), so the
/// fusion pass reads complete types. Throws c10::Error on a PyTorch error
/// (the caller runs capture passes under its fallback).
int MoveConvBiasIntoEpilogue(const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace dice::torch_ext
