// The CuKe example schema, the device-form view of answers and the BiC-RL
// data schedule: see dice/training/examples.h. Torch-free.
#include "dice/training/examples.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <regex>
#include <sstream>

namespace dice::training {
namespace {

Status Corrupt(const std::string& where, const std::string& what) {
  return Status(StatusCode::kCorrupt, where + ": " + what);
}

}  // namespace

std::string CukeExample::ToJsonLine() const {
  nlohmann::json j = {{"id", id},         {"kind", kind},           {"level", level},
                      {"difficulty", difficulty}, {"source", source}, {"reference", reference},
                      {"verified", verified}, {"hash", hash},       {"task_hash", task_hash},
                      {"split", split}};
  if (kind == "e2e") {
    j["program"] = program;
  } else if (kind != "task") {
    j["prefix"] = prefix;
    j["middle"] = middle;
    j["suffix"] = suffix;
  }
  if (kind == "device_infill") j["preamble"] = preamble;
  if (!op_chain.empty()) j["op_chain"] = op_chain;
  if (IsDeviceKind(kind) && !graph.empty()) {
    j["graph"] = graph;
    j["input_specs"] = input_specs;
    j["launch_plan"] = launch_plan;
  }
  j["speedup"] = speedup ? nlohmann::json(*speedup) : nlohmann::json(nullptr);
  return j.dump();
}

Expected<std::vector<ir::TensorSpec>> ParseInputSpecs(const std::string& text) {
  std::vector<ir::TensorSpec> out;
  std::stringstream ss(text);
  std::string item;
  auto bad = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, "input spec \"" + item + "\" in \"" + text + "\": " + why);
  };
  while (std::getline(ss, item, ';')) {
    if (item.empty()) continue;
    const size_t open = item.find('['), close = item.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open) return bad("no [shape]");
    auto dtype = ir::ParseDType(item.substr(0, open));
    if (!dtype.ok()) return bad(dtype.status().message());
    std::vector<int64_t> shape;
    std::stringstream dims(item.substr(open + 1, close - open - 1));
    std::string d;
    while (std::getline(dims, d, ',')) {
      if (d.empty()) continue;
      size_t used = 0;
      long long v = -1;
      try {
        v = std::stoll(d, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != d.size() || v < 0) return bad("dimension \"" + d + "\" is not a non-negative integer");
      shape.push_back(v);
    }
    out.push_back(ir::TensorSpec::Contiguous(*dtype, shape));
  }
  return out;
}

Expected<CukeExample> CukeExample::FromJsonLine(const std::string& line, const std::string& where) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Corrupt(where, "not valid JSON");
  if (!j.is_object()) return Corrupt(where, "not a JSON object");
  CukeExample e;
  auto str = [&](const char* key, std::string* out, bool required) -> Status {
    if (!j.contains(key) || j[key].is_null()) {
      return required ? Corrupt(where, std::string("missing field \"") + key + "\"") : Status::Ok();
    }
    if (!j[key].is_string()) return Corrupt(where, std::string("field \"") + key + "\" must be a string");
    *out = j[key].get<std::string>();
    return Status::Ok();
  };
  DICE_RETURN_IF_ERROR(str("id", &e.id, true));
  DICE_RETURN_IF_ERROR(str("kind", &e.kind, true));
  if (e.kind != "infill" && e.kind != "e2e" && e.kind != "device" && e.kind != "device_infill" && e.kind != "task") {
    return Corrupt(where, "kind \"" + e.kind + "\" is not infill, e2e, device, device_infill or task");
  }
  DICE_RETURN_IF_ERROR(str("reference", &e.reference, true));
  DICE_RETURN_IF_ERROR(str("prefix", &e.prefix, false));
  DICE_RETURN_IF_ERROR(
      str("middle", &e.middle, e.kind == "infill" || IsDeviceKind(e.kind)));
  DICE_RETURN_IF_ERROR(str("suffix", &e.suffix, false));
  DICE_RETURN_IF_ERROR(str("program", &e.program, e.kind == "e2e"));
  DICE_RETURN_IF_ERROR(str("difficulty", &e.difficulty, false));
  DICE_RETURN_IF_ERROR(str("source", &e.source, false));
  DICE_RETURN_IF_ERROR(str("verified", &e.verified, false));
  DICE_RETURN_IF_ERROR(str("hash", &e.hash, false));
  DICE_RETURN_IF_ERROR(str("task_hash", &e.task_hash, false));
  DICE_RETURN_IF_ERROR(str("split", &e.split, false));
  DICE_RETURN_IF_ERROR(str("graph", &e.graph, false));
  DICE_RETURN_IF_ERROR(str("input_specs", &e.input_specs, false));
  DICE_RETURN_IF_ERROR(str("launch_plan", &e.launch_plan, false));
  DICE_RETURN_IF_ERROR(str("preamble", &e.preamble, false));
  DICE_RETURN_IF_ERROR(str("op_chain", &e.op_chain, false));
  if (j.contains("level") && !j["level"].is_null()) {
    if (!j["level"].is_number_integer()) return Corrupt(where, "field \"level\" must be an integer");
    e.level = j["level"].get<int>();
    if (e.level < 1 || e.level > 3) return Corrupt(where, "level " + std::to_string(e.level) + " is not 1, 2 or 3");
  }
  if (j.contains("speedup") && !j["speedup"].is_null()) {
    if (!j["speedup"].is_number()) return Corrupt(where, "field \"speedup\" must be a number or null");
    e.speedup = j["speedup"].get<double>();
  }
  return e;
}

Expected<std::vector<CukeExample>> ReadExamples(const std::string& path, std::vector<std::string>* skipped) {
  std::ifstream in(path);
  if (!in) {
    return Status(StatusCode::kNotFound, "dataset " + path + " cannot be opened (missing or unreadable)");
  }
  std::vector<CukeExample> out;
  std::string line, first_error;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto e = CukeExample::FromJsonLine(line, path + ":" + std::to_string(n));
    if (!e.ok()) {
      if (first_error.empty()) first_error = e.status().message();
      if (skipped) skipped->push_back(e.status().message());
      continue;
    }
    out.push_back(std::move(*e));
  }
  if (out.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "dataset " + path + " has no valid example" + (first_error.empty() ? "" : " (" + first_error + ")"));
  }
  return out;
}

Expected<PromptAndAnswer> ExamplePromptAndAnswer(const CukeExample& e, const generator::PromptTemplates& templates) {
  PromptAndAnswer pa;
  if (e.kind == "task") {
    auto user = generator::BuildEndToEndPrompt(templates, e.reference);
    if (!user.ok()) return user.status();
    pa.prompt = generator::ChatPrompt(templates.system, *user);
  } else if (e.kind == "e2e") {
    auto user = generator::BuildEndToEndPrompt(templates, e.reference);
    if (!user.ok()) return user.status();
    pa.prompt = generator::ChatPrompt(templates.system, *user);
    pa.answer = "```python\n" + e.program + (e.program.empty() || e.program.back() != '\n' ? "\n" : "") + "```";
  } else {
    auto user = generator::BuildInfillingPrompt(templates, e.reference, e.prefix, e.suffix.empty() ? "\n" : e.suffix);
    if (!user.ok()) return user.status();
    pa.prompt = generator::ChatPrompt(templates.system, *user);
    pa.answer = "```\n" + e.middle + (e.middle.empty() || e.middle.back() != '\n' ? "\n" : "") + "```";
  }
  return pa;
}

std::vector<InfillSplit> SplitKernelForInfill(const std::string& source, int64_t spans, int64_t max_bytes) {
  std::vector<InfillSplit> out;
  if (spans <= 0 || max_bytes <= 0) return out;
  // Lines with their offsets; the brace depth is tracked at each line's start
  // (braces after // are not counted; template kernels have none in strings).
  struct Line {
    size_t begin, end;  // [begin, end), end past the '\n'
    bool candidate;     // may start or continue a span: a non-trivial line inside a __global__ body
  };
  std::vector<Line> lines;
  int depth = 0;
  bool pending = false, in_kernel = false;  // a __global__ signature seen / inside its body
  // The prompt starts at the first __global__ function (with a template<>
  // line right above it); what comes before is the preamble.
  size_t kernel_start = std::string::npos;
  bool prev_is_template = false;
  for (size_t b = 0; b < source.size();) {
    size_t e = source.find('\n', b);
    e = e == std::string::npos ? source.size() : e + 1;
    const std::string text = source.substr(b, e - b);
    const size_t first = text.find_first_not_of(" \t\r\n");
    const std::string body = first == std::string::npos ? "" : text.substr(first);
    const bool trivial = body.empty() || body.rfind("//", 0) == 0 || body.rfind("/*", 0) == 0 ||
                         body.rfind('#', 0) == 0 || body.find_first_not_of("{}; \t\r\n") == std::string::npos;
    const size_t comment = text.find("//");
    const size_t code_end = comment == std::string::npos ? text.size() : comment;
    if (depth == 0 && text.substr(0, code_end).find("__global__") != std::string::npos) {
      pending = true;
      if (kernel_start == std::string::npos) kernel_start = prev_is_template ? lines.back().begin : b;
    }
    lines.push_back({b, e, in_kernel && depth >= 1 && !trivial});
    prev_is_template = depth == 0 && body.rfind("template", 0) == 0;
    for (size_t i = 0; i < code_end; ++i) {
      if (text[i] == '{') {
        if (depth++ == 0 && pending) in_kernel = true, pending = false;
      } else if (text[i] == '}' && --depth == 0) {
        in_kernel = false;
      }
    }
    b = e;
  }
  if (kernel_start == std::string::npos) return out;
  std::vector<size_t> starts;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].candidate && lines[i].end - lines[i].begin <= static_cast<size_t>(max_bytes)) starts.push_back(i);
  }
  const size_t n = std::min(starts.size(), static_cast<size_t>(spans));
  size_t last_end = 0;  // spans never overlap
  for (size_t k = 0; k < n; ++k) {
    const size_t i = starts[(2 * k + 1) * starts.size() / (2 * n)];
    if (lines[i].begin < last_end) continue;
    size_t j = i + 1;  // up to 3 candidate lines, within max_bytes
    while (j < lines.size() && j < i + 3 && lines[j].candidate &&
           lines[j].end - lines[i].begin <= static_cast<size_t>(max_bytes)) {
      ++j;
    }
    const size_t a = lines[i].begin, z = lines[j - 1].end;
    out.push_back({source.substr(0, kernel_start), source.substr(kernel_start, a - kernel_start),
                   source.substr(a, z - a), source.substr(z)});
    last_end = z;
  }
  return out;
}

std::string AnswerSource(const CukeExample& task, const std::string& code) {
  return task.kind == "device_infill" ? task.preamble + task.prefix + code + task.suffix : code;
}

namespace {

// Top-level items of C++ text: preprocessor lines, and declarations or
// definitions ending at a ';' or a closing '}' at brace depth 0. Strings,
// character literals and comments are skipped when counting braces.
std::vector<std::string> TopLevelItems(const std::string& s) {
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  size_t i = 0;
  auto flush = [&] {
    if (cur.find_first_not_of(" \t\r\n") != std::string::npos) items.push_back(cur);
    cur.clear();
  };
  while (i < s.size()) {
    const char c = s[i];
    if (depth == 0 && c == '#' && cur.find_first_not_of(" \t\r\n") == std::string::npos) {
      size_t end = i;
      while (end < s.size() && (s[end] != '\n' || (end > 0 && s[end - 1] == '\\'))) ++end;
      flush();
      items.push_back(s.substr(i, end - i));
      i = end;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      size_t end = s.find('\n', i);
      if (end == std::string::npos) end = s.size();
      cur += s.substr(i, end - i);
      i = end;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      size_t end = s.find("*/", i + 2);
      end = end == std::string::npos ? s.size() : end + 2;
      cur += s.substr(i, end - i);
      i = end;
      continue;
    }
    if (c == '"' || c == '\'') {
      size_t end = i + 1;
      while (end < s.size() && s[end] != c) end += s[end] == '\\' ? 2 : 1;
      end = std::min(end + 1, s.size());
      cur += s.substr(i, end - i);
      i = end;
      continue;
    }
    cur.push_back(c);
    ++i;
    if (c == '{') ++depth;
    if (c == '}' && depth > 0 && --depth == 0) {
      // A struct/class definition continues to its ';'.
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j < s.size() && s[j] == ';') {
        cur += s.substr(i, j + 1 - i);
        i = j + 1;
      }
      flush();
    } else if (c == ';' && depth == 0) {
      flush();
    }
  }
  flush();
  return items;
}

}  // namespace

Expected<Candidate> DeviceFormCandidate(const std::string& code_in, const std::string& origin) {
  std::string code = code_in;
  // A Python program (KernelBench/DICE extension form) keeps its CUDA in a
  // triple-quoted string: take the first one that holds a kernel.
  for (size_t open = code_in.find("\"\"\""); open != std::string::npos;) {
    const size_t close = code_in.find("\"\"\"", open + 3);
    if (close == std::string::npos) break;
    const std::string inner = code_in.substr(open + 3, close - open - 3);
    if (inner.find("__global__") != std::string::npos) {
      code = inner;
      break;
    }
    open = code_in.find("\"\"\"", close + 3);
  }
  std::smatch m;
  // NVRTC has the CUDA toolkit's headers (cuda_fp16.h, cuda_bf16.h, ...)
  // but no C++ standard library or framework headers: drop those includes
  // (device code gets expf/sqrtf/... as builtins).
  // Host API headers (cuda.h, cuda_runtime.h) pull in the C library, which
  // NVRTC lacks: only device-side toolkit headers are kept.
  const std::regex torch_include(
      R"(^\s*#\s*include\s*[<"](?!cuda_fp16|cuda_bf16|cuda_fp8|cuda/|cub/|cooperative_groups|math_constants|mma\.h))");
  const std::regex host_use(R"(\btorch::|\bat::|\bTORCH_|\bPYBIND11|\bc10::)");
  const std::regex kernel(R"(__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(\w+))");
  std::string out;
  std::vector<std::string> names;
  for (const std::string& item : TopLevelItems(code)) {
    const size_t first = item.find_first_not_of(" \t\r\n");
    const bool preprocessor = first != std::string::npos && item[first] == '#';
    if (preprocessor && std::regex_search(item, torch_include)) continue;
    if (!preprocessor && std::regex_search(item, host_use)) continue;
    std::string text = item;
    if (!preprocessor && std::regex_search(text, m, kernel)) {
      names.push_back(m[1].str());
      const bool templated = text.find("template") != std::string::npos && text.find("template") < text.find("__global__");
      if (!templated && text.find("extern \"C\"") == std::string::npos) {
        text = std::regex_replace(text, std::regex(R"(__global__)"), "extern \"C\" __global__",
                                  std::regex_constants::format_first_only);
      }
    }
    out += text + "\n";
  }
  if (names.empty()) return Status(StatusCode::kNotFound, "the answer has no __global__ kernel");
  Candidate c;
  c.origin = origin;
  c.form = CandidateForm::kDevice;
  // What the dropped headers gave device code: fixed-width integers (as
  // glibc defines them) and the C math constants.
  c.source = "typedef signed char int8_t;\ntypedef unsigned char uint8_t;\ntypedef short int16_t;\n"
             "typedef unsigned short uint16_t;\ntypedef int int32_t;\ntypedef unsigned int uint32_t;\n"
             "typedef long int64_t;\ntypedef unsigned long uint64_t;\ntypedef unsigned long size_t;\n"
             "#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n"
             "#ifndef NAN\n#define NAN __int_as_float(0x7fffffff)\n#endif\n"
             "#ifndef FLT_MAX\n#define FLT_MAX 3.402823466e+38f\n#endif\n" + out;
  for (const auto& n : names) {
    KernelLaunch l;
    l.kernel = n;
    c.plan.launches.push_back(l);
  }
  return c;
}

TaskSchedule::TaskSchedule(std::vector<int> levels, Mode mode, int64_t per_step, double advance_at, int64_t window)
    : levels_(std::move(levels)), mode_(mode), per_step_(per_step), advance_at_(advance_at), window_(window) {
  order_.resize(levels_.size());
  std::iota(order_.begin(), order_.end(), 0);
  std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) { return levels_[a] < levels_[b]; });
  level_ = levels_.empty() ? 1 : levels_[order_[0]];
}

std::vector<size_t> TaskSchedule::Next() {
  std::vector<size_t> out;
  if (order_.empty()) return out;
  if (mode_ == Mode::kOrdered) {
    for (int64_t i = 0; i < per_step_; ++i) {
      out.push_back(order_[cursor_]);
      cursor_ = (cursor_ + 1) % order_.size();
    }
    return out;
  }
  std::vector<size_t> pool;
  for (size_t i : order_) {
    if (levels_[i] == level_) pool.push_back(i);
  }
  for (int64_t i = 0; i < per_step_; ++i) {
    out.push_back(pool[cursor_ % pool.size()]);
    ++cursor_;
  }
  return out;
}

void TaskSchedule::Report(const std::vector<double>& rewards) {
  if (mode_ != Mode::kAdaptive) return;
  for (double r : rewards) recent_.push_back(r > 0 ? 1.0 : 0.0);
  while (static_cast<int64_t>(recent_.size()) > window_) recent_.erase(recent_.begin());
  if (static_cast<int64_t>(recent_.size()) < window_) return;
  const double rate = std::accumulate(recent_.begin(), recent_.end(), 0.0) / recent_.size();
  if (rate < advance_at_) return;
  // Advance to the next level that has tasks.
  int next = level_;
  for (size_t i : order_) {
    if (levels_[i] > level_) {
      next = levels_[i];
      break;
    }
  }
  if (next != level_) {
    level_ = next;
    cursor_ = 0;
    recent_.clear();
  }
}

int TaskSchedule::current_level() const {
  if (mode_ == Mode::kAdaptive || order_.empty()) return level_;
  return levels_[order_[cursor_]];
}

}  // namespace dice::training
