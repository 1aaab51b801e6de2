// cli/model_inputs.h — the forward() inputs of `dice tune | run | profile |
// warmup`, checked before anything runs so that every malformed --input is
// bad input (exit 2) with one line that names the flag (docs/CLI.md):
//
//   1. each spec parses ("8x4096:f32", "scalar:bf16", "8x128:i64:0..50257":
//      ParseInputFlag, input_spec.h), every size is at least 1, and the
//      tensor's bytes fit in int64;
//   2. the specs fit the model's forward() signature: as many tensors as it
//      takes, each argument one that accepts a Tensor, of the rank the
//      schema declares when it declares one;
//   3. a PyTorch error on the first run with these inputs (a TorchScript
//      interpreter error carries a ~19-line traceback) is cut to its cause.
//
// Then RandomInput draws each tensor's values. Defined in model_commands.cc,
// the CLI's LibTorch boundary (warmup.cc uses them too), so this header
// includes no torch header.
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "dice/core/status.h"
#include "input_spec.h"

namespace at {
class Tensor;
}  // namespace at
namespace c10 {
struct Device;
}  // namespace c10
namespace torch::jit {
struct Module;
}  // namespace torch::jit

namespace dice::cli {

/// Checks `specs` (forward's arguments after self, in order) against
/// `module`'s forward() schema. `flags` is how the user wrote them, for the
/// message ("--input '8x8:f32' --input '8:f32'"). Errors (kInvalidArgument,
/// "<flags>: the model does not run on these inputs: <why>"): no forward();
/// fewer specs than forward's arguments without a default, or more than all
/// of them; an argument that cannot take a Tensor (int, List[int], ...);
/// a spec whose rank differs from the one the schema declares (traced or
/// scripted code usually declares none: then the first run finds it).
Status CheckInputsFitForward(const torch::jit::Module& module, const std::vector<InputSpec>& specs,
                             const std::string& flags);

/// A tensor of `spec` on `device` with random values from PyTorch's global
/// generator (seed it with torch::manual_seed first): randn for a float
/// input, torch.randint(spec.low, spec.high) as int64 / int32 for an integer
/// one, true/false with p = 0.5 for b8. Throws what PyTorch throws (a
/// c10::Error when the bytes cannot be allocated on `device`).
at::Tensor RandomInput(const InputSpec& spec, const c10::Device& device);

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
