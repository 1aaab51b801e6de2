// winner_versions.cc — library versions of stored winners (winner_versions.h).
#include "dice/runtime/winner_versions.h"

#include <regex>

#include <nlohmann/json.hpp>

#include "dice/runtime/extension_compiler.h"
#include "text_files.h"

namespace dice::runtime {
namespace {

std::string ReadCutlassVersion() {
  const std::string dir = CutlassIncludeDir();
  if (dir.empty()) return "";
  const std::string s = text_files::ReadText(dir + "/cutlass/version.h");
  std::string parts[3];
  const char* names[3] = {"CUTLASS_MAJOR", "CUTLASS_MINOR", "CUTLASS_PATCH"};
  for (int i = 0; i < 3; ++i) {
    std::smatch m;
    if (!std::regex_search(s, m, std::regex(std::string("#define ") + names[i] + "\\s+([0-9]+)"))) return "";
    parts[i] = m[1];
  }
  return parts[0] + "." + parts[1] + "." + parts[2];
}

}  // namespace

std::string CutlassVersion() {
  static const std::string version = ReadCutlassVersion();
  return version;
}

std::string StaleBuildReason(const cache::WinnerRecord& winner, const std::string& torch_version,
                             const std::string& cutlass_version) {
  if (winner.versions_json.empty()) return "";
  const nlohmann::json v = nlohmann::json::parse(winner.versions_json, nullptr, /*allow_exceptions=*/false);
  if (!v.is_object()) return "";
  const auto form = v.find("form");
  if (form == v.end() || !form->is_string() || (*form != "extension" && *form != "library")) return "";
  for (const auto& [name, now] : {std::pair<const char*, const std::string&>{"torch", torch_version},
                                  std::pair<const char*, const std::string&>{"cutlass", cutlass_version}}) {
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
