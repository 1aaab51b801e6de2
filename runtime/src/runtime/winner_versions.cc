// winner_versions.cc — library versions of stored winners (winner_versions.h).
#include "dice/runtime/winner_versions.h"

#include <cctype>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "dice/runtime/extension_compiler.h"
#include "text_files.h"

namespace dice::runtime {
namespace {

// The digits after "#define <name>" and blanks in `text`, or "" when absent.
// Plain string search, not std::regex: loaded into a Python process beside
// libtorch, this library's std::regex instantiations can bind to another
// library's copies of the same weak symbols, and compiling a pattern then
// recursed until the stack overflowed (session 23, H100, on the first
// winner lookup of a served model).
std::string DefinedNumber(const std::string& text, const std::string& name) {
  const std::string key = "#define " + name;
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    size_t p = at + key.size();
    if (p >= text.size() || (text[p] != ' ' && text[p] != '\t')) continue;  // CUTLASS_MAJOR_... is another name
    while (p < text.size() && (text[p] == ' ' || text[p] == '\t')) ++p;
    size_t end = p;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end > p) return text.substr(p, end - p);
  }
  return "";
}

// "<MAJOR>.<MINOR>.<PATCH>" from the #defines <prefix>MAJOR, ... of a
// header's text, "" when any is missing.
std::string DefinedVersion(const std::string& text, const std::string& prefix) {
  std::string version;
  for (const char* part : {"MAJOR", "MINOR", "PATCH"}) {
    const std::string n = DefinedNumber(text, prefix + part);
    if (n.empty()) return "";
    version += (version.empty() ? "" : ".") + n;
  }
  return version;
}

std::string ReadCutlassVersion() {
  const std::string dir = CutlassIncludeDir();
  if (dir.empty()) return "";
  return DefinedVersion(text_files::ReadText(dir + "/cutlass/version.h"), "CUTLASS_");
}

// "13.1.0" from the toolkit's cublas_api.h beside nvcc ($DICE_NVCC or the
// configured one), "" without it.
std::string ReadCublasVersion() {
  const char* env = std::getenv("DICE_NVCC");
  const std::string nvcc = env != nullptr && env[0] != '\0' ? env : DICE_NVCC_PATH;
  return DefinedVersion(text_files::ReadText(ToolkitIncludeDir(nvcc) + "/cublas_api.h"), "CUBLAS_VER_");
}

}  // namespace

std::string CublasVersion() {
  static const std::string version = ReadCublasVersion();
  return version;
}

std::string CublasVersionFor(const Candidate& candidate) {
  auto libs = ExtensionLinkLibraries(candidate);
  return libs.ok() && !libs->empty() ? CublasVersion() : "";
}

std::string CutlassVersion() {
  static const std::string version = ReadCutlassVersion();
  return version;
}

std::string StaleBuildReason(const cache::WinnerRecord& winner, const std::string& torch_version,
                             const std::string& cutlass_version, const std::string& cublas_version) {
  if (winner.versions_json.empty()) return "";
  const nlohmann::json v = nlohmann::json::parse(winner.versions_json, nullptr, /*allow_exceptions=*/false);
  if (!v.is_object()) return "";
  const auto form = v.find("form");
  if (form == v.end() || !form->is_string() || (*form != "extension" && *form != "library")) return "";
  for (const auto& [name, now] : {std::pair<const char*, const std::string&>{"torch", torch_version},
                                  std::pair<const char*, const std::string&>{"cutlass", cutlass_version},
                                  std::pair<const char*, const std::string&>{"cublas", cublas_version}}) {
    const auto it = v.find(name);
    if (it == v.end() || !it->is_string() || now.empty()) continue;
    const std::string& built = it->get_ref<const std::string&>();
    if (!built.empty() && built != now) {
      return "winner " + winner.origin + " was built against " + name + " " + built + "; this process runs " + now;
    }
  }
  return "";
}

}  // namespace dice::runtime
