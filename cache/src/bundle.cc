// Implementation of dice/cache/bundle.h.
#include "dice/cache/bundle.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "dice/cache/http_server.h"

namespace dice::cache {
namespace {

using json = nlohmann::json;

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Expected<ExportResult> ExportBundle(Store& store, const std::string& path, const std::string& arch) {
  auto summaries = store.ListWinners();
  if (!summaries.ok()) return summaries.status();
  ExportResult result;
  std::string entries;
  for (const WinnerRecord& s : *summaries) {
    if (!arch.empty() && s.arch != arch) continue;
    if (!s.verified) {
      ++result.skipped_unverified;
      continue;
    }
    auto rec = store.GetWinner(s.task_key);  // checks the content hash
    if (!rec.ok()) return rec.status().WithContext("exporting " + s.task_key);
    if (!rec->has_value()) continue;  // removed meanwhile
    if (!entries.empty()) entries += ",\n";
    entries += WinnerToWireJson(**rec, true);
    ++result.entries;
  }
  json head{{"format", kBundleFormatName},
            {"format_version", kBundleFormatVersion},
            {"schema_version", kSchemaVersion},
            {"created_at", Now()},
            {"arch", arch}};
  std::string text = head.dump();
  text.pop_back();  // splice the entries (already serialised) into the object
  text += ",\"entries\":[\n" + entries + "\n]}\n";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status(StatusCode::kIoError, "cannot write bundle " + tmp + ": " + std::strerror(errno));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return Status(StatusCode::kIoError, "cannot write bundle " + tmp + " (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return Status(StatusCode::kIoError, "cannot move bundle into place at " + path + ": " + why);
  }
  result.bytes = static_cast<int64_t>(text.size());
  return result;
}

Expected<ImportResult> ImportBundle(Store& store, const std::string& path, const std::string& arch, bool trust) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status(errno == ENOENT ? StatusCode::kNotFound : StatusCode::kIoError,
                  "cannot read bundle " + path + ": " + std::strerror(errno));
  }
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string what = "bundle " + path;
  json j = json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status(StatusCode::kInvalidArgument, what + ": not a JSON object (malformed or truncated)");
  }
  if (j.value("format", std::string()) != kBundleFormatName) {
    return Status(StatusCode::kInvalidArgument,
                  what + ": 'format' is not \"" + std::string(kBundleFormatName) + "\" (not a DICE kernel bundle)");
  }
  if (!j.contains("format_version") || !j["format_version"].is_number_integer() ||
      j["format_version"].get<int64_t>() != kBundleFormatVersion) {
    return Status(StatusCode::kInvalidArgument,
                  what + ": format_version " + (j.contains("format_version") ? j["format_version"].dump() : "missing") +
                      ", this build reads " + std::to_string(kBundleFormatVersion));
  }
  if (!j.contains("schema_version") || !j["schema_version"].is_number_integer() ||
      j["schema_version"].get<int64_t>() > kSchemaVersion || j["schema_version"].get<int64_t>() < 1) {
    return Status(StatusCode::kInvalidArgument,
                  what + ": schema_version " + (j.contains("schema_version") ? j["schema_version"].dump() : "missing") +
                      " is not one this build reads (1.." + std::to_string(kSchemaVersion) +
                      "; use a newer DICE)");
  }
  if (!j.contains("entries") || !j["entries"].is_array()) {
    return Status(StatusCode::kInvalidArgument, what + ": missing 'entries' array");
  }
  // Parse and check everything first: a bad entry writes nothing.
  std::vector<WinnerRecord> records;
  const json& entries = j["entries"];
  for (size_t i = 0; i < entries.size(); ++i) {
    auto rec = WinnerFromWireJson(entries[i].dump());
    const std::string where = what + ": entry " + std::to_string(i);
    if (!rec.ok()) return Status(StatusCode::kInvalidArgument, where + ": " + rec.status().message());
    if (!IsValidTaskKey(rec->task_key)) {
      return Status(StatusCode::kInvalidArgument, where + ": task key '" + rec->task_key + "' is not 64 lowercase hex");
    }
    const std::string hash = ContentHash(*rec);
    if (hash != rec->content_hash) {
      return Status(StatusCode::kInvalidArgument, where + " (" + rec->task_key + ") fails its content hash (says " +
                                                      rec->content_hash + ", bytes hash to " + hash + ")");
    }
    if (!arch.empty() && rec->arch != arch) continue;
    rec->verified = trust;
    rec->pulled_from = "bundle:" + path;
    records.push_back(std::move(*rec));
  }
  ImportResult result;
  result.entries = static_cast<int64_t>(records.size());
  for (WinnerRecord& rec : records) {
    const std::string key = rec.task_key;
    auto stored = store.PutWinner(std::move(rec));
    if (!stored.ok()) return stored.status().WithContext("importing " + key);
    ++(*stored ? result.stored : result.kept_existing);
  }
  return result;
}

}  // namespace dice::cache
