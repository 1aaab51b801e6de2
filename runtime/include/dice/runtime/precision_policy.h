// dice/runtime/precision_policy.h — may a task's winner use TF32 (reduced precision)?
//
// The rule follows PyTorch's own switches per op class (issue 18 item 1,
// docs/DECISIONS.md "Precision follows PyTorch's switches"):
//   - a task whose graph holds an ir::OpKind::kConv2d follows
//     TuneOptions::tf32_conv (torch.backends.cudnn.allow_tf32, PyTorch's
//     default on);
//   - one holding a GEMM (ir::OpKind::kLinear) follows
//     TuneOptions::tf32_matmul (torch.backends.cuda.matmul.allow_tf32,
//     default off);
//   - a group with both needs both; any other task (elementwise, reduction,
//     normalisation) allows it only through the explicit override
//     TuneOptions::allow_reduced_precision, which allows every task;
//   - $DICE_STRICT_FP32=1 refuses it always, override or not.
// The Tuner applies it to candidate filtering, the worker's verification
// tolerance and the winner selection, and refuses to serve a cached winner
// marked reduced precision that the policy now refuses (a miss: re-tuned
// under the current policy), and likewise one built against other library
// versions (winner_versions.h). The torch extension fills tf32_conv and
// tf32_matmul from PyTorch's switches at each tune and each resolution.
// Pure functions of their arguments and the environment; thread-safe.
#pragma once

#include <string>

#include "dice/cache/store.h"
#include "dice/core/ir.h"
#include "dice/runtime/tuner.h"

namespace dice::runtime {

/// Why `options` refuse reduced-precision (TF32 or lower inside,
/// Candidate::reduced_precision) candidates for a task whose graph is
/// `graph`, or "" when they are allowed (rule in the header comment). The
/// reason names the switch: "DICE_STRICT_FP32=1 is set",
/// "torch.backends.cudnn.allow_tf32 is off",
/// "torch.backends.cuda.matmul.allow_tf32 is off" (both joined by " and "
/// for a group with a conv and a GEMM), or "the group has no convolution
/// or GEMM (only TuneOptions::allow_reduced_precision allows it there)".
std::string ReducedPrecisionRefusal(const TuneOptions& options, const ir::Graph& graph);

/// True when `options` allow reduced-precision candidates for `graph`
/// (ReducedPrecisionRefusal is empty).
inline bool AllowsReducedPrecision(const TuneOptions& options, const ir::Graph& graph) {
  return ReducedPrecisionRefusal(options, graph).empty();
}

/// Why the stored `winner` of a task whose graph is `graph` must not be
/// served under `options`, or "" when it may: an extension-form winner built
/// against another torch (options.torch_version) or CUTLASS version
/// (winner_versions.h StaleBuildReason: "winner <origin> was built against
/// torch 2.10.0; this process runs 2.11.0"), or a winner marked
/// reduced_precision under a policy that refuses it ("winner <origin> uses
/// TF32 (reduced precision) and torch.backends.cudnn.allow_tf32 is off").
/// A refused winner is a cache miss (re-tuned in tune modes; the new winner
/// replaces the row), never served blind; the row is left as it is.
std::string RefusedWinnerReason(const TuneOptions& options, const ir::Graph& graph,
                                const cache::WinnerRecord& winner);

}  // namespace dice::runtime
