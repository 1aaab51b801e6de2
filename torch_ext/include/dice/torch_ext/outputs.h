// dice/torch_ext/outputs.h — a forward's result as the list of tensors the
// output checks compare (`dice tune`'s check against eager, the attention
// pass's check of each SDPA backend). Links LibTorch. Thread-safe (pure).
#pragma once

#include <vector>

#include <ATen/core/ivalue.h>

namespace dice::torch_ext {

/// The tensors of `result` in order: a tensor itself; the elements of a
/// tuple or a list (a tensor list included), flattened depth-first. Other
/// values (None, scalars, strings) contribute nothing. Never throws.
std::vector<at::Tensor> FlattenOutputs(const c10::IValue& result);

}  // namespace dice::torch_ext
