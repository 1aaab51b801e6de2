// dice/generator/completion_parser.h — turning a DICE model answer into an
// extension-form candidate (torch-free).
//
// The runtime's infilling prompt (prompts.h BuildInfillingSkeleton) asks for
// the program's middle: `source = """..."""`, a Python string holding the
// CUDA kernels and the host function dice_forward(in0, ...) that the suffix
// declares and load_inline builds. The parser takes the answer's first code
// block (ExtractCodeBlock), then the CUDA source: the body of the first
// triple-quoted string (""" or ''') when the block has one — the one
// assigned to `source` when several do — else the whole block (a model that
// answers with bare CUDA). The result must define dice_forward.
#pragma once

#include <string>

#include "dice/core/candidate.h"
#include "dice/core/status.h"

namespace dice::generator {

/// The CUDA source in `generated` (a decoded model answer, UTF-8).
/// Errors: kNotFound "generated text has no code block" (ExtractCodeBlock);
/// kInvalidArgument when the source string is cut off (an opening """ with
/// no closing one: the answer ended, e.g. at max_new_tokens), the source is
/// empty, or it has no dice_forward (each message says which).
Expected<std::string> ParseExtensionSource(const std::string& generated);

/// ParseExtensionSource wrapped into an extension-form Candidate with
/// `origin` ("dice:sample3"); same errors.
Expected<Candidate> ParseExtensionCandidate(const std::string& generated, const std::string& origin);

}  // namespace dice::generator
