// cli/model_inputs.h — the forward() inputs of `dice tune | run | profile |
// warmup`, checked before anything runs so that every malformed --input is
// bad input (exit 2) with one line that names the flag (docs/CLI.md):
//
//   1. each spec parses ("8x4096:f32", "scalar:bf16": ir::ParseInputSpec),
//      every size is at least 1, and the tensor's bytes fit in int64;
//   2. the specs fit the model's forward() signature: as many tensors as it
//      takes, each argument one that accepts a Tensor, of the rank the
//      schema declares when it declares one;
//   3. a PyTorch error on the first run with these inputs (a TorchScript
//      interpreter error carries a ~19-line traceback) is cut to its cause.
//
// Defined in model_commands.cc, the CLI's LibTorch boundary (warmup.cc uses
// them too), so this header includes no torch header.
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "dice/core/ir.h"
#include "dice/core/status.h"

namespace torch::jit {
struct Module;
}  // namespace torch::jit

namespace dice::cli {

/// Parses `spec`, one tensor of the --input value `flag` (the whole value
/// for tune/run/profile; warmup's comma-separated set holds several specs).
/// Errors (kInvalidArgument), each "--input '<flag>': ...": what
/// ir::ParseInputSpec rejects (no ':dtype', an unknown dtype, rank above 8,
/// a dimension that is not a size - said in the user's terms: an empty one
/// as in "8x:f32", a negative size, a size beyond int64, anything else with
/// the expected form), a size of 0, and sizes whose element count times the
/// element size (bytes) overflow int64.
Expected<ir::TensorSpec> ParseInputFlag(const std::string& spec, const std::string& flag);

/// Checks `specs` (forward's arguments after self, in order) against
/// `module`'s forward() schema. `flags` is how the user wrote them, for the
/// message ("--input '8x8:f32' --input '8:f32'"). Errors (kInvalidArgument,
/// "<flags>: the model does not run on these inputs: <why>"): no forward();
/// fewer specs than forward's arguments without a default, or more than all
/// of them; an argument that cannot take a Tensor (int, List[int], ...);
/// a spec whose rank differs from the one the schema declares (traced or
/// scripted code usually declares none: then the first run finds it).
Status CheckInputsFitForward(const torch::jit::Module& module, const std::vector<ir::TensorSpec>& specs,
                             const std::string& flags);

/// "--input 'a' --input 'b'" for the values `values` (the prefix of the
/// messages above).
std::string InputFlags(const std::vector<std::string>& values);

/// The cause of a PyTorch failure, on one line: the last non-empty line of
/// c10::Error::what_without_backtrace() (or of what() for any other
/// exception, e.g. the interpreter's own), which is where TorchScript puts it
/// ("RuntimeError: self must be a matrix"), without the "[enforce fail at
/// file:line] condition. " prefix of PyTorch's internal checks.
std::string TorchErrorCause(const std::exception& e);

}  // namespace dice::cli
