// cli/capture_decisions.h — what optimize()'s capture passes decided
// (memory format, attention form and SDPA backend, the convs' cuDNN
// algorithm, the rewrites), shown as `dice:` notices and copied into the
// tune document's end-to-end part (report.h). Used by `dice tune`.
#pragma once

#include "dice/torch_ext/optimize.h"
#include "report.h"

namespace dice::cli {

/// The decisions in `layout` as `dice:` notices (cli/progress.h): the memory
/// format (a debug line for a model without a conv region), the attention
/// form (when there was an attention chain), the convs' cuDNN algorithm
/// (when there is a conv), the SDPA backend (when one was measured), and the
/// batch_norm folds, global pools, copies and in-place ops rewritten.
void NoticeCaptureDecisions(const dice::torch_ext::OptimizeReport& layout);

/// Copies the decisions (choices, reasons, measured µs) of `layout` into
/// `e2e`'s fields of the same names; the SDPA backends' rows replace any
/// there.
void CopyCaptureDecisions(const dice::torch_ext::OptimizeReport& layout, EndToEnd* e2e);

}  // namespace dice::cli
