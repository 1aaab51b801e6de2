// dice/torch_ext/optimize.h — the C++ entry point of the TorchScript frontend.
//
// optimize(module, options) inlines (and by default freezes) the module's
// forward graph, observes value types from example inputs, runs the fusion
// pass (fusion_pass.h) and returns the fusion groups it formed plus the nodes
// it left with PyTorch and why. Each group becomes a `dice::FusionGroup` node
// that, at run time, launches a cached winner kernel when one exists for the
// concrete shapes (modes cache / tune / tune-sync) and otherwise runs the
// original subgraph (the fallback), recording per-group statistics.
//
// No-code-change use: a LibTorch program that links dice_torch_ext (link it
// with -Wl,--no-as-needed, or call EnsureRegistered() once) and sets
// DICE_MODE (observe|cache|tune|tune-sync) gets the fusion pass run by the
// profiling graph executor as a custom pre-fusion pass. DICE_MODE=off or
// unset disables it. DICE_CACHE_DIR picks the cache (default ~/.cache/dice).
//
// Thread-safety: optimize() mutates the module it is given (call it before
// sharing the module between threads). The runtime options and the group
// statistics are process-wide and guarded by a mutex; the op's cache-hit path
// takes no global lock.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "dice/core/status.h"
#include "dice/runtime/tuner.h"
#include "dice/torch_ext/capture.h"
#include "dice/torch_ext/group_stats.h"
#include "dice/torch_ext/mode.h"

namespace torch::jit {
struct Module;
}  // namespace torch::jit

namespace dice::torch_ext {

/// The layout optimize()'s memory-format pass gives the connected regions of
/// convolutions (torch_ext/src/memory_format_pass.h; issue 18 item 2).
enum class MemoryFormat {
  kAuto,          ///< channels_last when measured >= 2% faster on CUDA example inputs, else contiguous
  kContiguous,    ///< leave every tensor as eager has it (the pass does nothing)
  kChannelsLast,  ///< convert every region (channels_last_3d for 5-D), unmeasured
};

/// "auto" | "contiguous" | "channels_last" (DICE_MEMORY_FORMAT, --memory-format).
/// Errors: kInvalidArgument naming the value and the accepted ones.
Expected<MemoryFormat> ParseMemoryFormat(std::string_view text);
/// The name ParseMemoryFormat reads back.
const char* MemoryFormatName(MemoryFormat format);

/// What optimize()'s attention pass does with attention written out op by op
/// (matmul, scale, mask, softmax, matmul; torch_ext/src/attention_pass.h,
/// issue 18 item 3).
enum class AttentionMode {
  kAuto,     ///< scaled_dot_product_attention when measured >= 2% faster on CUDA example inputs, else unfused
  kUnfused,  ///< leave the ops as written (the pass does nothing)
  kSdpa,     ///< rewrite every matching chain, unmeasured
};
/// "auto" | "unfused" | "sdpa" (DICE_ATTENTION).
/// Errors: kInvalidArgument naming the value and the accepted ones.
Expected<AttentionMode> ParseAttentionMode(std::string_view text);
/// The name ParseAttentionMode reads back.
const char* AttentionModeName(AttentionMode mode);
/// One of PyTorch's SDPA kernels as the attention pass measured it
/// (torch_ext/src/sdpa_backend.h, issue 18 item 3).
struct SdpaCandidate {
  std::string backend;  ///< "dispatch" (PyTorch's run-time choice), "flash", "efficient", "cudnn" or "math"
  double us = 0;        ///< median µs of the whole forward with every call on it; 0 = not timed
  std::string error;    ///< why it was not timed: does not fit a call, failed, or disagrees; empty when timed
};

/// Runtime and capture options. The process keeps every field but
/// example_inputs, memory_format and attention past optimize() (as RuntimeSettings in
/// torch_ext/src/runtime_state.h: a new field goes there too, and into the
/// two conversions in optimize.cc).
struct Options {
  Mode mode = Mode::kObserve;
  std::string cache_dir;          ///< "" = cache::DefaultCacheDir()
  runtime::TuneOptions tune;               ///< used in tune / tune-sync modes and by TuneGroups
  bool freeze = true;             ///< freeze the module (eval mode; parameters become constants)
  std::vector<c10::IValue> example_inputs;  ///< forward() arguments (without self) used to observe types
  int min_nontrivial_ops = 1;     ///< a group needs at least this many non-cast ops
  /// The conv regions' layout (capture only). kAuto defers to
  /// DICE_MEMORY_FORMAT when that is set (auto|contiguous|channels_last; an
  /// unknown value is a report warning and reads as auto); an explicit
  /// kContiguous / kChannelsLast wins over the variable.
  MemoryFormat memory_format = MemoryFormat::kAuto;
  /// Attention chains (capture only). kAuto defers to DICE_ATTENTION when
  /// that is set (auto|unfused|sdpa; an unknown value is a report warning and
  /// reads as auto); an explicit kUnfused / kSdpa wins over the variable.
  AttentionMode attention = AttentionMode::kAuto;

  /// Defaults with mode from DICE_MODE (unset = kOff) and cache_dir from
  /// DICE_CACHE_DIR. Errors: kInvalidArgument for an unknown DICE_MODE.
  static Expected<Options> FromEnv();
};

/// Sets/reads the process-wide options the dice::FusionGroup ops use (mode,
/// cache dir, tune options). optimize() sets them; until then they come from
/// Options::FromEnv() (an invalid DICE_MODE reads as kOff).
void SetRuntimeOptions(const Options& options);

/// Sets the kernel generators the process's tuner asks, in order (default,
/// and when `generators` is empty: the TemplateGenerator alone). E.g.
/// {TemplateGenerator, DiceGenerator} for `dice tune --generator both`.
/// Takes effect for the next tuned task (waits for a running one).
void SetGenerators(std::vector<std::shared_ptr<KernelGenerator>> generators);
Options GetRuntimeOptions();

/// One fusion group formed in a graph.
struct GroupInfo {
  int id = 0;                ///< process-wide group id (the node's dice_group_id attribute)
  CapturedGroup group;       ///< IR, canonical text, summary, torch ops
};

/// What optimize() did.
struct OptimizeReport {
  std::vector<GroupInfo> groups;
  std::vector<LeftOutNode> left_out;  ///< nodes that stayed with PyTorch (constants/attribute reads omitted)
  std::string graph;                  ///< the optimized forward graph, printed
  /// True when the module was frozen (options.freeze and torch.jit.freeze
  /// succeeded); false when freezing was off or failed and the module was
  /// captured unfrozen (then `warnings` names the failure).
  bool frozen = false;
  /// One line per capture pass that failed and was skipped, naming the pass
  /// and PyTorch's first error line ("torch.jit.freeze failed: ...").
  std::vector<std::string> warnings;
  /// The conv regions' layout the memory-format pass kept: "contiguous" or
  /// "channels_last" (then the forward graph holds the conversions).
  std::string memory_format = "contiguous";
  /// Why, in one line: the two measured times, "channels_last requested",
  /// "auto: not measured (no CUDA example inputs); ...", "no conv region ...".
  std::string memory_format_reason;
  /// Median µs of the frozen forward (contiguous, channels_last), timed
  /// round-robin with CUDA events before the fusion pass; {0, 0} = not timed.
  std::pair<double, double> memory_format_us{0, 0};
  /// What the attention pass kept: "unfused", or "sdpa" (then the forward
  /// graph calls aten::scaled_dot_product_attention for each chain).
  std::string attention = "unfused";
  /// Why, in one line: the two measured times, "sdpa requested", "auto: not
  /// measured (no CUDA example inputs); ...", the first reason a chain was
  /// left unfused, or "no attention chain ...".
  std::string attention_reason;
  /// Median µs of the forward (unfused, sdpa), timed round-robin with CUDA
  /// events after the memory-format pass; {0, 0} = not timed.
  std::pair<double, double> attention_us{0, 0};
  /// How the convs outside fusion groups get their cuDNN algorithm:
  /// "heuristic" (as ATen asks, cuDNN's heuristics unless the process set
  /// torch.backends.cudnn.benchmark) or "benchmark" (each conv is an
  /// aten::_convolution with benchmark = true: cuDNN times its algorithms on
  /// the first call of a shape; torch_ext/src/conv_algo_pass.h).
  /// DICE_CONV_ALGORITHM=auto|heuristic|benchmark; auto keeps "benchmark"
  /// only when measured >= 2% faster on CUDA example inputs.
  std::string conv_algorithm = "heuristic";
  /// Why, in one line: the two measured times, forced, not measured, no conv.
  std::string conv_algorithm_reason;
  /// Median µs of the forward before the fusion pass (heuristic, benchmark),
  /// timed round-robin with CUDA events; {0, 0} = not timed.
  std::pair<double, double> conv_algorithm_us{0, 0};
  /// The kernel the forward's scaled_dot_product_attention calls (the
  /// pass's and the model's own) are pinned to: "dispatch" (PyTorch chooses
  /// at run time) or "flash" | "efficient" | "cudnn" | "math", kept when
  /// measured >= 2% faster than the dispatcher and its outputs agree.
  std::string attention_backend = "dispatch";
  /// Why, in one line: each backend's µs, or why nothing was measured.
  std::string attention_backend_reason;
  /// Every backend tried, "dispatch" first; empty when none was measured.
  std::vector<SdpaCandidate> attention_backends;
  /// Inference batch_norms the capture rewrote as x * scale + shift so that
  /// they fuse with their neighbours (fusible_rewrites.h: the ones
  /// torch.jit.freeze could not fold into a conv).
  int batch_norms_folded = 0;
  /// True when in-place elementwise ops (relu_, add_, ...) were made
  /// functional so that fusion groups can take them (fusible_rewrites.h).
  bool functional = false;
  /// clone / detach copies removed because nothing can tell them from
  /// their input (fusible_rewrites.h: RemoveIdentityCopies).
  int identity_copies_removed = 0;
  /// Global average pools (adaptive_avg_pool to size 1) written as a mean
  /// over the spatial dims, so they fuse with the ops before them.
  int global_pools_as_mean = 0;
};

/// Freezes (options.freeze; the module is put in eval mode) or inlines the
/// module's forward, observes types by running it once on
/// options.example_inputs (when given; otherwise the graph's own complete
/// types are used), runs the fusion pass on the forward graph and sets the
/// runtime options. With options.mode == kOff no fusion group is inserted
/// (the groups that would form are still reported).
/// Freezing is Python's torch.jit.freeze: freeze_module, then PyTorch's
/// frozen-graph folding (a batch_norm or a constant add/sub/mul/div folded
/// into the conv or linear before it); a failure of the folding alone keeps
/// the frozen module without it, with the warning "torch.jit.freeze's
/// conv/linear folding (OptimizeFrozenGraph) failed: <cause>; ...".
/// A failure inside torch.jit.freeze (PyTorch's own passes, e.g. its
/// conv folding asserting on a model) never fails the call: the module is
/// captured unfrozen, report.frozen is false and report.warnings names the
/// pass and the cause. Neither does an exception in a later capture pass
/// (inlining, type observation, the fusion pass): the module is left as it
/// was before that pass (frozen when freezing worked), report.groups is
/// empty and report.warnings says "capture pass '<name>' failed: <cause>".
/// Between type observation and the fusion pass, the memory-format pass
/// (options.memory_format, in every mode) may run conv regions in
/// channels_last; it is measured, see MemoryFormat and report.memory_format*.
/// Its failure leaves the graph as it was (contiguous) with the warning
/// "capture pass 'memory_format' failed: <cause>", and the rest still runs.
/// Then the attention pass (options.attention) may replace attention chains
/// by aten::scaled_dot_product_attention, measured the same way (see
/// AttentionMode and report.attention*); its failure leaves them unfused with
/// the warning "capture pass 'attention' failed: <cause>".
/// Before type observation, in-place elementwise ops are made functional
/// where alias analysis proves it safe, and clone / detach copies that
/// nothing can tell from their input are removed
/// (report.identity_copies_removed); after it, inference batch_norms with
/// a fusible neighbour become a per-channel multiply-add (report.functional,
/// report.batch_norms_folded); after the memory-format pass a global average
/// pool becomes a mean (report.global_pools_as_mean). A failure of any leaves the module as it
/// was with the warning "capture pass '<name>' failed: <cause>".
/// DICE_INJECT_CAPTURE_FAILURE=freeze|frozen_folding|inline|functional|identity_copies|observe|batch_norm|memory_format|attention|global_pool|conv_bias|fusion
/// makes that step fail (tests of these fallbacks).
/// REQUIRES: when options.freeze is false, forward has not been run yet (its
/// graph executor would keep the old graph).
/// Errors: kInvalidArgument when the module has no forward or the example run
/// fails; kInternal for a PyTorch error outside the capture passes.
Expected<OptimizeReport> optimize(torch::jit::Module& module, const Options& options);

/// Makes sure the dice::FusionGroup operator and the DICE_MODE pass are
/// registered (call once from a program that does not link with
/// -Wl,--no-as-needed). Idempotent and cheap.
void EnsureRegistered();

/// While enabled, every group records the inputs of its first call per input
/// signature (a CapturedCall, capture_result.h). TakeCapturedCalls returns
/// (and clears) what was recorded.
void SetCaptureInputs(bool enabled);
std::vector<CapturedCall> TakeCapturedCalls();

/// The TargetInfo of CUDA device `ordinal` as used in task keys (arch, name,
/// driver major from the driver; NVRTC version). Without a GPU: the defaults
/// of TargetInfo with the NVRTC version filled in.
TargetInfo CurrentTarget(int ordinal);

/// Tunes one captured group call with the process-wide tuner (one Tune at a
/// time; the generators of SetGenerators); sets the runtime options to
/// `options` first. `on_progress` (optional) hears the Tune's phases
/// (tuner.h TuneProgress) on this thread. Errors: as Tuner::Tune,
/// kInvalidArgument when the specs do not match the graph, cache open errors.
Expected<runtime::TuneReport> TuneCapturedCall(const CapturedCall& call, const Options& options,
                                      const runtime::TuneProgressCallback& on_progress = {});

/// One progress event of TuneGroups: the Tuner's event (tune) for the
/// `group`-th of `groups` distinct group tasks (1-based, in first-call order).
struct GroupTuneProgress {
  int group = 0;
  int groups = 0;
  int group_id = 0;   ///< the fusion group's process-wide id (GroupInfo::id)
  runtime::TuneProgress tune;  ///< tune.description is valid only during the callback
};

/// Called by TuneGroups on its caller's thread; must not start another tune.
using GroupTuneProgressCallback = std::function<void(const GroupTuneProgress&)>;

/// Runs `module` (already optimize()d) once on `inputs` with input capture on,
/// then tunes every distinct captured group task with the template generator
/// (captured inputs added to verification), storing winners in the cache of
/// options.cache_dir. Per-task tuner errors are reported in the returned
/// list's description with baseline 0; kNoDevice without a GPU unless
/// options.tune.compile_only. `on_progress` (optional) hears each group's
/// Tuner events, tagged "group i of N" (`dice tune` prints them).
/// Errors: kInvalidArgument when running fails,
/// kIoError/kCorrupt when the cache cannot be opened.
Expected<std::vector<runtime::TuneReport>> TuneGroups(torch::jit::Module& module, const std::vector<c10::IValue>& inputs,
                                             const Options& options,
                                             const GroupTuneProgressCallback& on_progress = {});

}  // namespace dice::torch_ext
