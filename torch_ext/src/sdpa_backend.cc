// The SDPA backend step (sdpa_backend.h).
#include "sdpa_backend.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/named_value.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <string>
#include <vector>

#include "dice/reference/device_compare.h"
#include "dice/reference/reference_executor.h"
#include "dice/runtime/comparator.h"
#include "dice/torch_ext/outputs.h"
#include "graph_pass_util.h"
#include "memory_format_pass.h"

namespace dice::torch_ext {

namespace {

using torch::jit::Graph;
using torch::jit::NamedValue;
using torch::jit::Node;
using torch::jit::Value;

const c10::Symbol kSdpa = c10::Symbol::aten("scaled_dot_product_attention");

// The named input of an SDPA node (the schema of PyTorch 2.11:
// query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa).
Value* Arg(Node* n, const char* name) { return n->namedInput(c10::Symbol::attr(name)); }

// Why `backend` cannot take the SDPA call `n`, or "" when it can.
std::string Misfit(Node* n, SdpaBackend backend) {
  auto dropout = torch::jit::toIValue(Arg(n, "dropout_p"));
  if (!dropout || !dropout->isDouble() || dropout->toDouble() != 0.0) return "dropout_p is not the constant 0";
  auto gqa = torch::jit::toIValue(Arg(n, "enable_gqa"));
  if (!gqa || !gqa->isBool() || gqa->toBool()) return "enable_gqa is not the constant false";
  if (backend == SdpaBackend::kMath) return "";
  for (const char* name : {"query", "key", "value"}) {
    if (TensorRank(Arg(n, name)) != 4) return std::string(name) + " is not of known rank 4";
  }
  Value* mask = Arg(n, "attn_mask");
  const bool has_mask = !IsConstNone(mask);
  if (backend == SdpaBackend::kFlash && has_mask) return "it has a mask (flash takes none)";
  if (has_mask && TensorDtype(mask) != TensorDtype(Arg(n, "query"))) {
    return "its mask is not an additive bias of the query's dtype";
  }
  if (backend == SdpaBackend::kCudnn || backend == SdpaBackend::kFlash) {
    auto dt = TensorDtype(Arg(n, "query"));
    if (dt != c10::ScalarType::Half && dt != c10::ScalarType::BFloat16) return "its dtype is not float16 or bfloat16";
  }
  return "";
}

// Replaces `n` with `backend`'s op; the new value takes n's output type.
void Pin(Graph* graph, Node* n, SdpaBackend backend) {
  torch::jit::WithInsertPoint guard(n);
  Value* q = Arg(n, "query");
  Value* k = Arg(n, "key");
  Value* v = Arg(n, "value");
  Value* mask = Arg(n, "attn_mask");
  Value* dropout = Arg(n, "dropout_p");
  Value* causal = Arg(n, "is_causal");
  NamedValue scale("scale", Arg(n, "scale"));
  Value* no = graph->insertConstant(false);
  Value* out = nullptr;
  switch (backend) {
    case SdpaBackend::kFlash:
      out = graph->insert(c10::Symbol::aten("_scaled_dot_product_flash_attention"), {q, k, v, dropout, causal, no},
                          {scale});
      break;
    case SdpaBackend::kEfficient:
      out = graph->insert(c10::Symbol::aten("_scaled_dot_product_efficient_attention"),
                          {q, k, v, mask, no, dropout, causal}, {scale});
      break;
    case SdpaBackend::kCudnn:
      out = graph->insert(c10::Symbol::aten("_scaled_dot_product_cudnn_attention"),
                          {q, k, v, mask, no, dropout, causal, no}, {scale});
      break;
    case SdpaBackend::kMath:
      out = graph->insert(c10::Symbol::aten("_scaled_dot_product_attention_math"),
                          {q, k, v, mask, dropout, causal, graph->insertConstant(c10::IValue())},
                          {scale, NamedValue("enable_gqa", Arg(n, "enable_gqa"))});
      break;
    case SdpaBackend::kDispatch: return;
  }
  // A multi-output builtin comes back packed in a prim::TupleConstruct: take
  // the op's first output and drop the tuple.
  Value* y = out;
  if (out->node()->kind() == c10::prim::TupleConstruct) {
    Node* tuple = out->node();
    y = tuple->input(0);
    tuple->destroy();
  }
  y->setType(n->output()->type());
  n->output()->replaceAllUsesWith(y);
  n->destroy();
}

std::vector<at::Tensor> RunForward(const std::shared_ptr<Graph>& graph, const std::vector<c10::IValue>& inputs) {
  c10::AutoGradMode no_grad(false);
  torch::jit::Code code(graph->copy(), "dice_sdpa_check");
  torch::jit::Stack stack(inputs.begin(), inputs.end());
  torch::jit::InterpreterState(code).run(stack);
  std::vector<at::Tensor> out;
  for (const auto& iv : stack) {
    auto tensors = FlattenOutputs(iv);
    out.insert(out.end(), tensors.begin(), tensors.end());
  }
  return out;
}

// `candidate`'s outputs on `inputs` against `ref` (CheckForwardAgainstReference's rule).
Status CheckForward(const std::vector<at::Tensor>& ref, const std::shared_ptr<Graph>& candidate,
                    const std::vector<c10::IValue>& inputs) {
  std::vector<at::Tensor> got;
  try {
    got = RunForward(candidate, inputs);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInvalidArgument, "the forward failed: " + FirstLine(e));
  }
  if (ref.size() != got.size()) {
    return Status(StatusCode::kInvalidArgument,
                  "it returns " + std::to_string(got.size()) + " tensors, the reference " + std::to_string(ref.size()));
  }
  for (size_t i = 0; i < ref.size(); ++i) {
    const std::string which = "output " + std::to_string(i);
    if (!ref[i].defined() || !got[i].defined()) {
      if (ref[i].defined() != got[i].defined()) return Status(StatusCode::kInvalidArgument, which + " is undefined");
      continue;
    }
    if (ref[i].sizes() != got[i].sizes() || ref[i].scalar_type() != got[i].scalar_type()) {
      return Status(StatusCode::kInvalidArgument, which + " has another shape or dtype than the reference's");
    }
    const at::Tensor r = ref[i].to(got[i].device());
    auto dtype = reference::FromScalarType(r.scalar_type());
    if (!at::isFloatingType(r.scalar_type()) || !dtype.ok()) {
      if (!at::equal(got[i], r)) return Status(StatusCode::kInvalidArgument, which + " differs from the reference's");
      continue;
    }
    runtime::CompareResult c = reference::CompareTensors(got[i], r, runtime::Tolerance::ForDType(*dtype));
    if (!c.ok) return Status(StatusCode::kInvalidArgument, which + ": " + c.reason);
  }
  return Status::Ok();
}

}  // namespace

const char* SdpaBackendName(SdpaBackend backend) {
  switch (backend) {
    case SdpaBackend::kFlash: return "flash";
    case SdpaBackend::kEfficient: return "efficient";
    case SdpaBackend::kCudnn: return "cudnn";
    case SdpaBackend::kMath: return "math";
    case SdpaBackend::kDispatch: break;
  }
  return "dispatch";
}

int CountSdpaCalls(const Graph& graph) {
  int n = 0;
  for (const Node* node : graph.block()->nodes()) n += node->kind() == kSdpa ? 1 : 0;
  return n;
}

Expected<int> PinSdpaBackend(const std::shared_ptr<Graph>& graph, SdpaBackend backend) {
  std::vector<Node*> calls;
  for (Node* n : graph->block()->nodes()) {
    if (n->kind() == kSdpa) calls.push_back(n);
  }
  if (backend == SdpaBackend::kDispatch) return static_cast<int>(calls.size());
  for (Node* n : calls) {
    if (n->maybeSchema() == nullptr) {
      return Status(StatusCode::kInvalidArgument,
                    "scaled_dot_product_attention %" + n->output()->debugName() + " has no schema PyTorch knows");
    }
    const std::string why = Misfit(n, backend);
    if (!why.empty()) {
      return Status(StatusCode::kInvalidArgument, std::string(SdpaBackendName(backend)) +
                                                      " cannot take scaled_dot_product_attention %" +
                                                      n->output()->debugName() + ": " + why);
    }
  }
  for (Node* n : calls) Pin(graph.get(), n, backend);
  return static_cast<int>(calls.size());
}

bool KeepsPinnedBackend(double dispatch_us, double pinned_us) {
  return KeepsMeasuredGain(dispatch_us, pinned_us);
}

Status CheckForwardAgainstReference(const std::shared_ptr<Graph>& ref_graph, const std::shared_ptr<Graph>& candidate,
                                    const std::vector<c10::IValue>& inputs) {
  std::vector<at::Tensor> ref;
  try {
    ref = RunForward(ref_graph, inputs);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInvalidArgument, "the reference forward failed: " + FirstLine(e));
  }
  return CheckForward(ref, candidate, inputs);
}

Expected<SdpaBackendOutcome> ChooseSdpaBackend(const std::shared_ptr<Graph>& graph,
                                               const std::vector<c10::IValue>& inputs) {
  SdpaBackendOutcome out;
  const int calls = CountSdpaCalls(*graph);
  out.candidates.push_back({"dispatch", 0, ""});
  if (calls == 0) {
    out.reason = "no scaled_dot_product_attention call";
    return out;
  }
  if (!HasCudaTensor(inputs)) {
    out.reason = "not measured (no CUDA example inputs); PyTorch's dispatcher chooses";
    return out;
  }
  std::vector<at::Tensor> ref;
  try {
    ref = RunForward(graph, inputs);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInvalidArgument, "the forward with PyTorch's dispatcher failed: " + FirstLine(e));
  }
  std::vector<std::shared_ptr<Graph>> timed = {graph};
  std::vector<size_t> timed_row = {0};
  std::vector<SdpaBackend> timed_backend = {SdpaBackend::kDispatch};
  for (SdpaBackend b : {SdpaBackend::kFlash, SdpaBackend::kEfficient, SdpaBackend::kCudnn, SdpaBackend::kMath}) {
    SdpaCandidate row{SdpaBackendName(b), 0, ""};
    auto copy = graph->copy();
    auto pinned = PinSdpaBackend(copy, b);
    Status checked = pinned.ok() ? CheckForward(ref, copy, inputs) : pinned.status();
    if (!checked.ok()) {
      row.error = checked.message();
    } else {
      timed.push_back(copy);
      timed_row.push_back(out.candidates.size());
      timed_backend.push_back(b);
    }
    out.candidates.push_back(row);
  }
  ref.clear();  // the reference outputs' memory back before timing
  auto medians = TimeGraphsRoundRobinN(timed, inputs, /*warmup=*/3, /*reps=*/10);
  if (!medians.ok()) return medians.status();
  for (size_t i = 0; i < timed.size(); ++i) out.candidates[timed_row[i]].us = (*medians)[i];
  size_t best = 0;
  for (size_t i = 1; i < timed.size(); ++i) {
    if ((*medians)[i] < (*medians)[best]) best = i;
  }
  const double dispatch_us = (*medians)[0];
  std::string measured;
  for (const SdpaCandidate& c : out.candidates) {
    if (c.us > 0) measured += (measured.empty() ? "" : ", ") + c.backend + " " + FormatMicros(c.us) + " µs";
  }
  if (best == 0 || !KeepsPinnedBackend(dispatch_us, (*medians)[best])) {
    out.reason = measured + " (a pinned backend needs >= 2% less than dispatch); PyTorch's dispatcher chooses";
    return out;
  }
  auto pinned = PinSdpaBackend(graph, timed_backend[best]);  // the same calls as on the copy
  if (!pinned.ok()) return pinned.status();
  out.backend = timed_backend[best];
  out.reason = measured + " (" + std::to_string(calls) + " call(s) pinned to " + SdpaBackendName(out.backend) + ")";
  return out;
}

}  // namespace dice::torch_ext
