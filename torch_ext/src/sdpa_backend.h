// Private: the SDPA backend step of the attention pass (issue 18 item 3).
// PyTorch's aten::scaled_dot_product_attention picks one of its kernels at
// run time by a fixed priority (flash, memory-efficient, cuDNN, math, as far
// as each one's constraints allow); it never measures. This step measures
// them: every scaled_dot_product_attention call of a forward graph (the ones
// the attention pass wrote for op-by-op chains and the ones the model calls
// itself) is pinned, all together, to each backend in turn:
//   flash      aten::_scaled_dot_product_flash_attention   (no mask; 4-D; fp16/bf16 on CUDA)
//   efficient  aten::_scaled_dot_product_efficient_attention (no mask or an additive one; 4-D)
//   cudnn      aten::_scaled_dot_product_cudnn_attention   (no mask or an additive one; 4-D; fp16/bf16)
//   math       aten::_scaled_dot_product_attention_math     (anything)
// Each pinned forward is checked against the dispatcher's forward (the same
// attention, fused, softmax in float32 either way) with the verifier's
// per-dtype limits (dice/runtime/comparator.h, DESIGN.md
// "Verification": float32 1e-4, float16/bfloat16 1e-2), then timed
// round-robin beside the dispatcher's choice; a pinned backend is kept only
// when >= 2% faster than the dispatcher (KeepsPinnedBackend). A backend
// that does not fit a call, or fails, or disagrees with the reference, is
// reported with its cause and never kept.
// Thread-compatible: mutates the graph it is given.
#pragma once

#include <ATen/core/ivalue.h>

#include <memory>
#include <string>
#include <vector>

#include "dice/core/status.h"
#include "dice/torch_ext/optimize.h"

namespace torch::jit {
struct Graph;
}  // namespace torch::jit

namespace dice::torch_ext {

/// The kernels one scaled_dot_product_attention call can be pinned to.
/// kDispatch leaves the call to PyTorch's run-time choice.
enum class SdpaBackend { kDispatch, kFlash, kEfficient, kCudnn, kMath };

/// "dispatch" | "flash" | "efficient" | "cudnn" | "math".
const char* SdpaBackendName(SdpaBackend backend);

/// The number of aten::scaled_dot_product_attention nodes in `graph`'s
/// top-level block.
int CountSdpaCalls(const torch::jit::Graph& graph);

/// Replaces every aten::scaled_dot_product_attention node of `graph`'s
/// top-level block with `backend`'s op (the file comment's table), taking
/// its first output (the attention output, the same logical shape
/// [B, H, L, Dv] and dtype). kDispatch changes nothing. The graph is
/// changed only when every call fits: all of them or none.
/// Returns the number of calls pinned.
/// Errors: kInvalidArgument naming the first call that `backend` cannot
/// take and why: dropout_p not the constant 0, enable_gqa not the constant
/// false, q/k/v not of known rank 4 (flash, efficient, cudnn), a mask
/// (flash), a bool mask (efficient and cudnn take an additive bias), a
/// dtype other than float16/bfloat16 (flash and cudnn).
Expected<int> PinSdpaBackend(const std::shared_ptr<torch::jit::Graph>& graph, SdpaBackend backend);

/// The measured rule: a pinned backend is kept only when its median is at
/// least 2% below the dispatcher's (pinned_us <= 0.98 × dispatch_us). A time
/// that is not positive keeps the dispatcher. Pure; µs.
bool KeepsPinnedBackend(double dispatch_us, double pinned_us);

/// What ChooseSdpaBackend did.
struct SdpaBackendOutcome {
  SdpaBackend backend = SdpaBackend::kDispatch;  ///< the backend the graph's calls now use
  std::string reason;                            ///< one line: measured times, or why nothing was measured
  std::vector<SdpaCandidate> candidates;         ///< "dispatch" first, then flash, efficient, cudnn, math
};

/// Checks `candidate`'s outputs against `ref_graph`'s on `inputs` (self
/// first; both graphs take the same inputs; run once each without
/// autograd). Every tensor output (tensors, tuples and lists of them,
/// flattened in order) must match in shape and satisfy
/// |got - ref| <= atol + rtol * |ref| with Tolerance::ForDType of the
/// reference's dtype (float32 1e-4, float16/bfloat16 1e-2; other dtypes
/// must be equal), NaN and ±Inf where the reference has them.
/// Errors: kInvalidArgument naming the first output that differs (index,
/// the comparator's reason) or PyTorch's first error line of a run.
Status CheckForwardAgainstReference(const std::shared_ptr<torch::jit::Graph>& ref_graph,
                                    const std::shared_ptr<torch::jit::Graph>& candidate,
                                    const std::vector<c10::IValue>& inputs);

/// The step: when `graph` has scaled_dot_product_attention calls and
/// `inputs` hold a CUDA tensor, pins them to each backend on a copy
/// (PinSdpaBackend), checks each copy against `graph` as it is
/// (CheckForwardAgainstReference), times the dispatcher's graph and the
/// checked copies round-robin (TimeGraphsRoundRobinN: 3 warmup runs, median
/// of 10) and pins `graph` to the fastest when KeepsPinnedBackend holds.
/// Without calls, or without a CUDA input, it measures nothing and says so.
/// Errors: a failed run of the dispatcher's graph (its check run or its
/// timing; kInvalidArgument); `graph` is unchanged then.
Expected<SdpaBackendOutcome> ChooseSdpaBackend(const std::shared_ptr<torch::jit::Graph>& graph,
                                               const std::vector<c10::IValue>& inputs);

}  // namespace dice::torch_ext
