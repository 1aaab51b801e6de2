// A forward's result as its tensors (dice/torch_ext/outputs.h).
#include "dice/torch_ext/outputs.h"

namespace dice::torch_ext {

namespace {

void Append(const c10::IValue& v, std::vector<at::Tensor>* out) {
  if (v.isTensor()) {
    out->push_back(v.toTensor());
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) Append(e, out);
  } else if (v.isList()) {  // every list, a tensor list too
    for (const c10::IValue& e : v.toListRef()) Append(e, out);
  }
}

}  // namespace

std::vector<at::Tensor> FlattenOutputs(const c10::IValue& result) {
  std::vector<at::Tensor> out;
  Append(result, &out);
  return out;
}

}  // namespace dice::torch_ext
