// dice/torch_ext/run_group.h — the dispatcher op for graph frontends that
// pass IR text (the torch.compile backend in torch_ext/python/dice_torch).
//
// The TorchScript frontend bakes a fusion group into a dice::FusionGroup
// node; a torch.fx frontend cannot add JIT nodes, so it calls a PyTorch
// dispatcher operator with the group's IR canonical text as its first
// argument. Registered with TORCH_LIBRARY (namespace `dice`, in run_group.cc
// next to dice::FusionGroup, whose operator it shares: group table and
// statistics, task keys per input signature, cache lookup, winner launch,
// background tuning):
//
//   dice::run_group(str ir, Tensor[] inputs) -> Tensor[]
//       CPU and CUDA kernels: RunGroup below. Meta kernel (fake tensors,
//       torch.compile tracing, torch.library.opcheck): MetaOutputs below.
//   dice::register_group(str ir, str[] torch_ops) -> int
//       RegisterIrGroup below (group id; raises on invalid IR).
//   dice::set_options(str mode, str cache_dir) -> ()
//       mode as ParseMode ("" keeps DICE_MODE), cache_dir "" = default.
//   dice::get_mode() -> str
//   dice::group_stats() -> str
//       GroupStatsJson (group_stats.h).
//
// The ops throw c10::Error (PyTorch's convention at the framework boundary)
// carrying the Status message of the functions below.
// Thread-safety: as dice::FusionGroup; the IR-text -> group lookup takes a
// shared (reader) lock on the hot path, an exclusive one only for a new text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <ATen/ATen.h>

#include "dice/core/status.h"
#include "dice/torch_ext/group_stats.h"

namespace dice::torch_ext {

/// Parses and validates `ir_text` (ir::Parse) and registers it as a fusion
/// group with the process-wide group table (once per canonical text: the
/// same text registered twice returns the same id). `torch_ops` are the
/// framework op names the group came from ("aten.gelu.default"), kept for
/// reports. Errors: kInvalidArgument with the parser's message (line number).
Expected<int> RegisterIrGroup(std::string_view ir_text, const std::vector<std::string>& torch_ops);

/// Runs the group `ir_text` on `inputs` (float32/float16/bfloat16 tensors of
/// the declared dtypes and ranks, shapes that broadcast as the IR says):
/// serves the cached winner kernel for these exact shapes when the current
/// mode allows it (cache / tune / tune-sync) and every input is a contiguous,
/// 16-byte aligned CUDA tensor; otherwise runs the IR with ATen
/// (dice/reference/reference_executor.h, i.e. what PyTorch eager computes)
/// and counts the fallback with its reason ("no GPU", "no winner",
/// "mode off", "tuning in progress", ...; see GroupStats). A new input
/// signature (dtypes + shapes) is a new task key. Outputs are fresh,
/// contiguous tensors (never aliases of inputs), in the IR's output order.
/// Registers the group on first sight (RegisterIrGroup with no torch ops).
/// Errors: kInvalidArgument for invalid IR, a wrong input count, an input
/// of another dtype or rank than declared, or shapes ATen rejects.
Expected<std::vector<at::Tensor>> RunGroup(std::string_view ir_text, const std::vector<at::Tensor>& inputs);

/// Output tensors of the group for `inputs` without computing anything:
/// dtypes and ranks from ir::InferTypes, sizes by the IR's shape rules
/// (ir::InferShapes: broadcasting, reduced dims, normalisations keep the
/// shape) evaluated on symbolic sizes (c10::SymInt), so dynamic shapes stay
/// symbolic. Outputs are contiguous, on `inputs[0]`'s device (meta under
/// fake tensors). Errors: as RunGroup's input checks.
Expected<std::vector<at::Tensor>> MetaOutputs(std::string_view ir_text, const std::vector<at::Tensor>& inputs);

}  // namespace dice::torch_ext
