// Private: capture rewrites that turn ops no fusion group takes into ops it
// does (issue 18, whole networks), on the frozen, inlined TorchScript forward
// graph: "functional" and "batch_norm" before the memory-format pass,
// "global_pool" after it.
//
// torch.jit.freeze folds a batch_norm into the conv that directly precedes
// it; every other inference batch_norm (pre-activation networks such as
// DenseNet's BN -> ReLU -> conv, or a BN after an activation or a GEMM's
// epilogue) stays aten::batch_norm, an op no fusion group takes, so it cuts
// the elementwise chain around it into two groups. Inductor instead lowers
// it to a per-channel affine and fuses it. FoldInferenceBatchNorm does the
// same: y = x * scale + shift with the constants scale = w / sqrt(var + eps)
// and shift = b - mean * scale (computed in float64, stored in x's dtype,
// viewed [C, 1, ..., 1]), two elementwise ops the fusion pass takes.
//
// TorchScript keeps torchvision's in-place activations (nn.ReLU(inplace=True)
// gives aten::relu_, `out += identity` gives aten::add_), and the fusion
// pass never takes an in-place op. MakeElementwiseFunctional replaces them
// by their functional form where PyTorch's own alias analysis proves nothing
// else sees the write (torch::jit::RemoveTensorMutation, restricted to
// elementwise ops).
// A global average pool (adaptive_avg_pool2d/3d to output size 1, as
// networks end and squeeze-excite blocks pool) is a mean over the spatial
// dims; ATen computes it as one. GlobalPoolAsMean writes it as aten::mean so
// that the elementwise ops before it fuse into the reduction.
// Thread-compatible: mutates the graph it is given.
#pragma once

#include <memory>

namespace torch::jit {
struct Graph;
}  // namespace torch::jit

namespace dice::torch_ext {

/// Rewrites each inference batch_norm of `graph`'s top-level block whose
/// statistics (and weight/bias, when given) are tensor constants [C],
/// training = false, whose input has a known rank >= 2, size C on dim 1 and
/// the statistics' floating dtype, and that has a fusible neighbour (its
/// input's producer or one of its output's readers has
/// UnsupportedReason == "") into aten::mul(x, scale) then aten::add(., shift)
/// (see the file comment). The new ops take the batch_norm output's type
/// (dtype, shape, strides as observed). Other batch_norms are left as they
/// are (a lone one is one cuDNN pass already). Returns how many it rewrote.
/// Values differ from eager's by float rounding only ((x - mean) * invstd *
/// w + b in float there). Throws c10::Error on a PyTorch error (the caller
/// runs capture passes under its fallback).
int FoldInferenceBatchNorm(const std::shared_ptr<torch::jit::Graph>& graph);

/// Replaces in-place elementwise aten ops (relu_, add_, mul_, clamp_, ...:
/// the names of ElementwiseOpNames() with a trailing '_') by their
/// functional forms where torch::jit::RemoveTensorMutation proves it safe (no
/// alias of the written value is read after the write, and the value is not
/// a graph input). Returns whether the graph changed. Throws c10::Error on a
/// PyTorch error.
bool MakeElementwiseFunctional(const std::shared_ptr<torch::jit::Graph>& graph);

/// Rewrites each adaptive_avg_pool2d / adaptive_avg_pool3d of `graph`'s
/// top-level block whose output size is a constant list of 1s and whose
/// input has a known floating dtype and rank (2 or 3 spatial dims, batched
/// or not) into aten::mean(x, spatial dims, keepdim=True), taking the pool
/// output's type. Run after the memory-format pass (which treats the pool as
/// layout-preserving). Returns how many it rewrote. Throws c10::Error on a
/// PyTorch error.
int GlobalPoolAsMean(const std::shared_ptr<torch::jit::Graph>& graph);

/// Removes each aten::clone (memory_format None or torch.preserve_format)
/// and aten::detach of `graph`'s top-level block whose copy nobody can tell
/// from its input: PyTorch's alias analysis finds no writer of either value
/// (in-place ops were made functional before), and the copy is not a graph
/// output (the caller may own and mutate what it gets back). Its readers
/// then read the input. KernelBench level2/20 writes `orig = x.clone().detach()`
/// after a conv: the copy is a full pass over the activation, and it
/// splits the conv's readers, so the conv keeps cuDNN's bias add
/// (conv_bias_pass.h); Inductor removes the same copy. detach only with
/// `remove_detach` (the caller passes whether the module is frozen: a
/// frozen module is an inference one, where detach changes nothing; an
/// unfrozen one may be trained, and there detach stops gradients).
/// Returns how many it removed. Throws c10::Error on a PyTorch error.
int RemoveIdentityCopies(const std::shared_ptr<torch::jit::Graph>& graph, bool remove_detach);

}  // namespace dice::torch_ext
