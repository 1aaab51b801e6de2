// DICE generator prompts and answer parsing: see dice/generator/prompts.h.
#include "dice/generator/prompts.h"

#include <algorithm>

#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "dice/core/ir.h"

namespace dice::generator {
namespace {

// One pass over `tmpl`: each known "{name}" is replaced by its value; other
// text (including braces of unknown names) is copied as is.
std::string Fill(const std::string& tmpl, const std::map<std::string, std::string>& values) {
  std::string out;
  out.reserve(tmpl.size());
  size_t i = 0;
  while (i < tmpl.size()) {
    if (tmpl[i] == '{') {
      const size_t close = tmpl.find('}', i + 1);
      if (close != std::string::npos) {
        auto it = values.find(tmpl.substr(i + 1, close - i - 1));
        if (it != values.end()) {
          out += it->second;
          i = close + 1;
          continue;
        }
      }
    }
    out += tmpl[i++];
  }
  return out;
}

bool Blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// Text with one trailing newline, so a fence that follows starts on its own line.
std::string WithNewline(const std::string& s) { return !s.empty() && s.back() == '\n' ? s : s + "\n"; }

}  // namespace

PromptTemplates PromptTemplates::Default() {
  PromptTemplates t;
  t.system =
      "You are an expert CUDA programmer. You make PyTorch programs faster by replacing their operators with "
      "custom CUDA kernels that compute the same results.";
  t.end_to_end =
      "Below is a PyTorch program. Its `Model` class defines the computation, and get_inputs() / "
      "get_init_inputs() describe the inputs.\n\n"
      "```python\n{reference}```\n\n"
      "Write a new program with a class `ModelNew` that takes the same constructor arguments and computes the "
      "same outputs as `Model`, but runs its work in custom CUDA kernels that you write and compile with "
      "torch.utils.cpp_extension.load_inline. You may fuse operators and pick any algorithm, as long as the "
      "results stay equal. Keep get_inputs() and get_init_inputs() as they are. Answer with the complete "
      "program in one ```python code block and nothing after it.";
  t.infilling =
      "Below is a PyTorch program. Its `Model` class defines the computation.\n\n"
      "```python\n{reference}```\n\n"
      "A faster version of it is being written with custom CUDA kernels. Its beginning is:\n\n"
      "```python\n{prefix}```\n\n"
      "and its end, which declares and calls the kernel functions, is:\n\n"
      "```python\n{suffix}```\n\n"
      "Write the missing middle part: the CUDA source (kernels and the host functions the end declares) that "
      "goes between the two, so that the whole program computes the same outputs as `Model`. Answer with that "
      "middle part only, in one ```python code block.";
  return t;
}

Expected<PromptTemplates> PromptTemplates::Load(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status(StatusCode::kNotFound, "prompt template file " + path + " not found");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kIoError, "cannot read prompt template file " + path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return Status(StatusCode::kCorrupt, path + ": not JSON: " + e.what());
  }
  if (!j.is_object()) return Status(StatusCode::kCorrupt, path + ": expected a JSON object of template strings");
  PromptTemplates t = Default();
  const std::map<std::string, std::string*> fields = {
      {"system", &t.system}, {"end_to_end", &t.end_to_end}, {"infilling", &t.infilling}};
  for (auto it = j.begin(); it != j.end(); ++it) {
    auto f = fields.find(it.key());
    if (f == fields.end()) {
      return Status(StatusCode::kCorrupt,
                    path + ": unknown key \"" + it.key() + "\" (expected system, end_to_end, infilling)");
    }
    if (!it.value().is_string()) return Status(StatusCode::kCorrupt, path + ": \"" + it.key() + "\" is not a string");
    *f->second = it.value().get<std::string>();
  }
  const std::vector<std::pair<std::string, std::string>> required = {
      {"end_to_end", "{reference}"}, {"infilling", "{reference}"}, {"infilling", "{prefix}"},
      {"infilling", "{suffix}"}};
  for (const auto& [key, placeholder] : required) {
    if (fields.at(key)->find(placeholder) == std::string::npos) {
      return Status(StatusCode::kInvalidArgument, path + ": template \"" + key + "\" lacks the placeholder " +
                                                      placeholder);
    }
  }
  return t;
}

std::string ChatPrompt(const std::string& system, const std::string& user) {
  std::string out;
  if (!system.empty()) out += "<|im_start|>system\n" + system + "<|im_end|>\n";
  out += "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
  return out;
}

Expected<std::string> BuildEndToEndPrompt(const PromptTemplates& templates, const std::string& reference_program) {
  if (Blank(reference_program)) {
    return Status(StatusCode::kInvalidArgument, "end-to-end prompt: the reference program is empty");
  }
  return ChatPrompt(templates.system, Fill(templates.end_to_end, {{"reference", WithNewline(reference_program)}}));
}

Expected<std::string> BuildInfillingPrompt(const PromptTemplates& templates, const std::string& reference_program,
                                           const std::string& prefix, const std::string& suffix) {
  if (Blank(reference_program)) {
    return Status(StatusCode::kInvalidArgument, "infilling prompt: the reference program is empty");
  }
  if (Blank(suffix)) {
    return Status(StatusCode::kInvalidArgument,
                  "infilling prompt: the suffix is empty (it must declare the functions the middle implements)");
  }
  return ChatPrompt(templates.system,
                    Fill(templates.infilling, {{"reference", WithNewline(reference_program)},
                                               {"prefix", WithNewline(prefix)},
                                               {"suffix", WithNewline(suffix)}}));
}

Expected<InfillingSkeleton> BuildInfillingSkeleton(const Task& task) {
  if (task.inputs.empty() || task.outputs.empty()) {
    return Status(StatusCode::kInvalidArgument, "infilling skeleton for " + task.Describe() +
                                                    ": the task needs at least one input and one output");
  }
  InfillingSkeleton s;
  s.reference = ir::RenderReferenceProgram(task.graph, task.inputs, "cuda");
  s.prefix = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n";
  std::string params, args;
  for (size_t i = 0; i < task.inputs.size(); ++i) {
    params += (i ? ", " : "") + std::string("torch::Tensor in") + std::to_string(i);
    args += (i ? ", " : "") + std::string("in") + std::to_string(i);
  }
  const std::string ret = task.outputs.size() == 1 ? "torch::Tensor" : "std::vector<torch::Tensor>";
  s.suffix = "\ncpp_src = \"\"\"\n" + ret + " dice_forward(" + params + ");\n\"\"\"\n\n"
             "dice_ext = load_inline(\n"
             "    name=\"dice_ext\",\n"
             "    cpp_sources=cpp_src,\n"
             "    cuda_sources=source,\n"
             "    functions=[\"dice_forward\"],\n"
             "    verbose=False,\n"
             ")\n\n\n"
             "class ModelNew(nn.Module):\n"
             "    def __init__(self):\n"
             "        super().__init__()\n\n"
             "    def forward(self, " + args + "):\n"
             "        return dice_ext.dice_forward(" + args + ")\n";
  return s;
}

Expected<std::string> ExtractCodeBlock(const std::string& generated) {
  size_t open = generated.find("```");
  if (open == std::string::npos) {
    // Quote at most 80 bytes, cut on a UTF-8 character boundary.
    size_t cut = std::min<size_t>(generated.size(), 80);
    while (cut > 0 && cut < generated.size() && (static_cast<unsigned char>(generated[cut]) & 0xC0) == 0x80) --cut;
    return Status(StatusCode::kNotFound, "generated text has no code block: \"" + generated.substr(0, cut) +
                                             (generated.size() > cut ? "...\"" : "\""));
  }
  const size_t line_end = generated.find('\n', open);
  if (line_end == std::string::npos) return std::string();  // cut off right after the fence
  const size_t body = line_end + 1;
  // The closing fence is "```" at the start of a line.
  size_t close = body;
  while (true) {
    close = generated.find("```", close);
    if (close == std::string::npos) return generated.substr(body);  // cut off inside the block
    if (close == body || generated[close - 1] == '\n') break;
    close += 3;
  }
  return generated.substr(body, close - body);
}

}  // namespace dice::generator
