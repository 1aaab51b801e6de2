// Implementation of dice/core/task.h.
#include "dice/core/task.h"

namespace dice {
inline namespace core {

Expected<Task> Task::Make(ir::Graph graph, std::vector<ir::TensorSpec> inputs, TargetInfo target) {
  auto outputs = ir::InferOutputSpecs(graph, inputs);
  if (!outputs.ok()) return outputs.status();
  Task t;
  t.graph = std::move(graph);
  t.inputs = std::move(inputs);
  t.outputs = std::move(*outputs);
  t.target = std::move(target);
  return t;
}

std::string Task::Key() const {
  // One field per line, each named, so two different tuples can never
  // produce the same text.
  std::string text = "dice-task-key v1\n";
  text += "ir\n" + ir::Canonical(graph);
  for (const auto& in : inputs) text += "in " + in.ToString() + " strides=" + [&] {
    std::string s;
    for (int64_t st : in.strides) s += std::to_string(st) + ",";
    return s;
  }() + " align=" + std::to_string(in.alignment) + "\n";
  for (const auto& out : outputs) text += "out " + out.ToString() + "\n";
  text += "arch " + target.arch + "\n";
  text += "gpu " + target.gpu_name + "\n";
  text += "driver " + std::to_string(target.driver_major) + "\n";
  text += "nvrtc " + std::to_string(target.nvrtc_version) + "\n";
  text += "flags " + target.compile_flags + "\n";
  text += "abi " + std::to_string(target.abi_version) + "\n";
  // target.sm_count, l2_bytes, smem_*, max_threads_per_sm and cluster_launch
  // stay out on purpose: arch + gpu name identify the model, and the key text
  // must stay byte-identical (tests/generator/templates_golden_test.cc).
  return ir::Sha256Hex(text);
}

std::string Task::Describe() const {
  std::string out = ir::Summary(graph) + " ";
  for (size_t i = 0; i < inputs.size(); ++i) out += (i ? "," : "") + inputs[i].ToString();
  return out;
}

}  // namespace core
}  // namespace dice
