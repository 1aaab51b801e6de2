// `dice cache push | pull | export | import | gc | stats` (cli/cache_share.h).
#include "cache_share.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dice/cache/bundle.h"
#include "dice/cache/http_client.h"
#include "dice/cache/http_server.h"
#include "dice/cache/store.h"
#include "dice/core/candidate.h"
#include "dice/core/log.h"
#include "dice/core/task.h"
#include "cache_commands.h"
#include "progress.h"

namespace dice::cli {

using namespace dice::cache;  // Store, WinnerRecord, CacheClient, bundles

namespace {

// The arguments of all six subcommands (only one is parsed per run).
struct CacheShareCommands {
  std::string url, file, arch, token_file, cache_dir, max_size, older_than;
  bool trust = false;
  bool json = false;
  int timeout_ms = 10000;
};

// Bad input (a refused token, a malformed file, an invalid URL) is exit 2;
// everything else (no connection, I/O) exit 1.
int FailWith(const Status& st) {
  const bool bad_input = st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kNotFound;
  return Fail(bad_input ? kExitBadInput : kExitFailure, st.message());
}

std::string Bytes(int64_t n) {
  char buf[32];
  if (n >= (int64_t{1} << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(n) / (1 << 30));
  } else if (n >= (1 << 20)) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(n) / (1 << 20));
  } else if (n >= (1 << 10)) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(n) / (1 << 10));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(n));
  }
  return buf;
}

bool ValidUrl(const std::string& url) {
  return (url.rfind("http://", 0) == 0 && url.size() > 7) || (url.rfind("https://", 0) == 0 && url.size() > 8);
}

std::string CacheDir(const std::string& dir_arg) { return dir_arg.empty() ? DefaultCacheDir() : dir_arg; }

Expected<std::unique_ptr<Store>> OpenLocal(const std::string& dir_arg) {
  return Store::Open(DatabasePath(CacheDir(dir_arg)));
}

// The token for writes: first line of --token-file, else $DICE_REMOTE_TOKEN.
Expected<std::string> ReadToken(const std::string& token_file) {
  if (token_file.empty()) {
    const char* env = std::getenv("DICE_REMOTE_TOKEN");
    return std::string(env != nullptr ? env : "");
  }
  std::ifstream in(token_file);
  std::string token;
  if (!in || !std::getline(in, token) || token.empty()) {
    return Status(StatusCode::kInvalidArgument, "cannot read a token from --token-file '" + token_file + "'");
  }
  return token;
}

// What a pull left out, by cause (issue 20: say how many and why).
struct PullRefusals {
  int64_t other_arch = 0;  ///< listed for another arch than --arch
  int64_t damaged = 0;     ///< content hash mismatch: damaged on the server or in transit
  int64_t version = 0;     ///< another runtime ABI version, or a winner form this build cannot serve
  int64_t gone = 0;        ///< listed, then removed from the server before it was fetched
  std::string version_example;  ///< the first version cause, e.g. "runtime ABI version 2 (this build: 1)"

  int64_t refused() const { return other_arch + damaged + version; }
};

// A failed request to the server at `url`. A transport failure (no
// connection, a timeout: the client's message has no "HTTP <status>") reads
// "cache server URL is not reachable: <request>: <cause>" (exit 1); an
// answer with an error status keeps the client's message (FailWith).
int FailRequest(const std::string& url, const Status& st) {
  const std::string& m = st.message();
  const bool transport = (st.code() == StatusCode::kIoError || st.code() == StatusCode::kTimeout) &&
                         m.find(": HTTP ") == std::string::npos && m.find("unexpected") == std::string::npos;
  if (!transport) {
    // A 404 on the list or batch route: the URL answers HTTP but is not a
    // dice cache server (or a path was added to the URL).
    if (m.find(": HTTP 404:") != std::string::npos && (m.find("/v1/kernels (page") != std::string::npos || m.find("/v1/health") != std::string::npos)) {
      return Fail(kExitBadInput, m + " (" + url + " answers, but not as a dice cache server: `dice cache serve` "
                                     "answers GET " + url + "/v1/health)");
    }
    return FailWith(st);
  }
  // cpp-httplib names the failure in one word (the message's last); say it in words.
  const size_t colon = m.rfind(": ");
  const std::string name = colon == std::string::npos ? m : m.substr(colon + 2);
  std::string cause = name;
  if (name == "Connection") cause = "no connection: nothing listens there, the host is unreachable, or its name does not resolve";
  if (name == "ConnectionTimeout") cause = "connecting timed out (--timeout-ms)";
  if (name == "Read") cause = "no answer in time, or the connection dropped (--timeout-ms)";
  if (name == "Write") cause = "the connection dropped while sending";
  if (name.rfind("SSL", 0) == 0) cause = "the TLS connection failed (" + name + ")";
  // The request, then httplib's own word in brackets (not a dangling last word).
  const std::string request = colon == std::string::npos ? m : m.substr(0, colon) + " (httplib: " + name + ")";
  return Fail(kExitFailure, "cache server " + url + " is not reachable (" + cause + "): " + request);
}

// Why `rec` cannot be served by this build, or "": its versions_json names
// another runtime ABI (kRuntimeAbiVersion, core/task.h; its task keys are
// not this build's) or a candidate form this build does not know.
std::string VersionMismatch(const WinnerRecord& rec) {
  if (rec.versions_json.empty()) return "";
  const nlohmann::json v = nlohmann::json::parse(rec.versions_json, nullptr, /*allow_exceptions=*/false);
  if (!v.is_object()) return "";
  if (auto abi = v.find("abi"); abi != v.end() && abi->is_number_integer() && abi->get<int64_t>() != kRuntimeAbiVersion) {
    return "runtime ABI version " + std::to_string(abi->get<int64_t>()) + " (this build: " +
           std::to_string(kRuntimeAbiVersion) + ")";
  }
  if (auto form = v.find("form"); form != v.end() && form->is_string() &&
                                  !ParseCandidateForm(form->get<std::string>()).ok()) {
    return "winner form '" + form->get<std::string>() + "' unknown to this build";
  }
  return "";
}

// The entries for `keys`: one batch request, then one request per key the
// batch did not return (the server reports it damaged, or it was removed
// meanwhile) or per key of a batch refused for a damaged entry in transit,
// so that one damaged entry costs only itself. Damaged and removed entries
// are counted in `refused`. Errors: the client's, for any other failure.
Expected<std::vector<WinnerRecord>> FetchEntries(CacheClient& client, const std::vector<std::string>& keys,
                                                PullRefusals* refused) {
  std::vector<WinnerRecord> out;
  std::vector<std::string> one_by_one;
  auto batch = client.GetMany(keys);
  if (batch.ok()) {
    std::set<std::string> got;
    for (const WinnerRecord& r : *batch) got.insert(r.task_key);
    for (const std::string& k : keys) {
      if (got.count(k) == 0) one_by_one.push_back(k);
    }
    out = std::move(*batch);
  } else if (batch.status().code() == StatusCode::kCorrupt) {
    one_by_one = keys;
  } else {
    return batch.status();
  }
  for (const std::string& key : one_by_one) {
    auto rec = client.Get(key);
    if (!rec.ok()) {
      const bool damaged = rec.status().code() == StatusCode::kCorrupt ||
                           rec.status().message().find("content hash") != std::string::npos;
      if (!damaged) return rec.status();
      ++refused->damaged;
    } else if (!rec->has_value()) {
      ++refused->gone;
    } else {
      out.push_back(std::move(**rec));
    }
  }
  return out;
}

// ", 3 refused: 1 for another arch than sm_90, ..." (empty when none was).
std::string RefusalText(const PullRefusals& r, const std::string& arch) {
  std::string text;
  auto add = [&text](int64_t n, const std::string& why) {
    if (n > 0) text += (text.empty() ? "" : ", ") + std::to_string(n) + " " + why;
  };
  add(r.other_arch, "for another arch than " + arch);
  add(r.damaged, "content hash mismatch (damaged on the server or in transit)");
  add(r.version, r.version_example);
  std::string out = r.refused() > 0 ? ", " + std::to_string(r.refused()) + " refused: " + text : "";
  if (r.gone > 0) out += ", " + std::to_string(r.gone) + " removed from the server meanwhile";
  return out;
}

int Push(const CacheShareCommands& c, const std::string& cache_dir) {
  if (!ValidUrl(c.url)) return Fail(kExitBadInput, "URL '" + c.url + "' is not http://HOST:PORT or https://...");
  auto token = ReadToken(c.token_file);
  if (!token.ok()) return FailWith(token.status());
  if (const std::string why = NoCacheYet(CacheDir(cache_dir)); !why.empty()) {  // read only: create nothing
    std::printf("pushed 0 winner(s) to %s: no local cache yet (%s)\n", c.url.c_str(), why.c_str());
    return kExitOk;
  }
  auto store = OpenLocal(cache_dir);
  if (!store.ok()) return Fail(kExitBadInput, store.status().message());
  auto rows = (*store)->ListWinners();
  if (!rows.ok()) return FailWith(rows.status());
  CacheClient client(c.url, *token, std::chrono::milliseconds(c.timeout_ms));
  auto health = client.Health();
  if (!health.ok()) return FailRequest(c.url, health.status());
  int64_t pushed = 0, kept = 0, unverified = 0, considered = 0;
  int64_t total = 0;  // the rows of --arch (all without it), for the progress line
  for (const WinnerRecord& s : *rows) total += c.arch.empty() || s.arch == c.arch;
  ProgressLine progress;
  for (const WinnerRecord& s : *rows) {
    if (!c.arch.empty() && s.arch != c.arch) continue;
    ShowCount(progress, "push: done", considered, total);
    ++considered;
    if (!s.verified) {  // only kernels proven on a GPU here travel on
      ++unverified;
      continue;
    }
    auto rec = (*store)->GetWinner(s.task_key);
    if (!rec.ok()) return FailWith(rec.status());
    if (!rec->has_value()) continue;
    auto stored = client.Put(**rec);
    if (!stored.ok()) {
      progress.Finish();
      std::printf("pushed %lld, server kept its own %lld, before the error\n", static_cast<long long>(pushed),
                  static_cast<long long>(kept));
      return FailWith(stored.status());
    }
    ++(*stored ? pushed : kept);
  }
  ShowCount(progress, "push: done", considered, total);
  progress.Finish();
  std::printf("%lld winner(s)%s considered: %lld pushed, %lld kept by the server (its speedup was >=), "
              "%lld unverified left out\n",
              static_cast<long long>(considered), c.arch.empty() ? "" : (" for " + c.arch).c_str(),
              static_cast<long long>(pushed), static_cast<long long>(kept), static_cast<long long>(unverified));
  return kExitOk;
}

int Pull(const CacheShareCommands& c, const std::string& cache_dir) {
  if (!ValidUrl(c.url)) return Fail(kExitBadInput, "URL '" + c.url + "' is not http://HOST:PORT or https://...");
  CacheClient client(c.url, "", std::chrono::milliseconds(c.timeout_ms));
  auto list = client.List();  // every arch: --arch is applied here, so that what it leaves out is counted
  if (!list.ok()) return FailRequest(c.url, list.status());
  // The local cache after the server answered: opening it creates it, and a
  // pull from a dead or wrong server leaves nothing behind.
  auto store = OpenLocal(cache_dir);
  if (!store.ok()) return Fail(kExitBadInput, store.status().message());
  PullRefusals refused;
  std::vector<std::string> keys;
  for (const WinnerRecord& s : *list) {
    if (!c.arch.empty() && s.arch != c.arch) {
      ++refused.other_arch;
    } else {
      keys.push_back(s.task_key);
    }
  }
  Notice(LogLevel::kInfo, "dice: pull: fetching %zu entr%s from %s", keys.size(), keys.size() == 1 ? "y" : "ies",
         c.url.c_str());
  auto recs = FetchEntries(client, keys, &refused);
  if (!recs.ok()) return FailRequest(c.url, recs.status());
  int64_t stored = 0, kept = 0;
  ProgressLine progress;
  int64_t done = 0;
  const auto total = static_cast<int64_t>(recs->size());
  for (WinnerRecord& rec : *recs) {
    ShowCount(progress, "pull: done", done++, total);
    if (std::string why = VersionMismatch(rec); !why.empty()) {
      if (refused.version++ == 0) refused.version_example = why;
      continue;
    }
    rec.verified = c.trust;
    rec.pulled_from = c.url;
    rec.hits = 0;
    rec.last_used_at = 0;
    auto put = (*store)->PutWinner(std::move(rec));
    if (!put.ok()) return FailWith(put.status());
    ++(*put ? stored : kept);
  }
  ShowCount(progress, "pull: done", total, total);
  progress.Finish();
  std::printf("%zu entr%s on the server: %lld stored, %lld kept (the local entry is verified or faster)%s\n",
              list->size(), list->size() == 1 ? "y" : "ies", static_cast<long long>(stored),
              static_cast<long long>(kept), RefusalText(refused, c.arch).c_str());
  if (c.trust) {
    std::printf("stored as trusted (--trust-remote): served without re-verification\n");
  } else if (stored > 0) {
    std::printf("stored unverified: each kernel is re-verified and re-timed on this machine's GPU before its "
                "first use (dice run / tune); on a machine without a GPU they stay unverified and are not served\n");
  }
  return kExitOk;
}

int Export(const CacheShareCommands& c, const std::string& cache_dir) {
  if (const std::string why = NoCacheYet(CacheDir(cache_dir)); !why.empty()) {  // read only: create nothing
    return Fail(kExitBadInput, "nothing to export to " + c.file + ": no cache yet (" + why + ")");
  }
  auto store = OpenLocal(cache_dir);
  if (!store.ok()) return Fail(kExitBadInput, store.status().message());
  auto r = ExportBundle(**store, c.file, c.arch);
  if (!r.ok()) return FailWith(r.status());
  std::printf("exported %lld winner(s)%s to %s (%s, bundle format %d, schema %d); %lld unverified left out\n",
              static_cast<long long>(r->entries), c.arch.empty() ? "" : (" for " + c.arch).c_str(), c.file.c_str(),
              Bytes(r->bytes).c_str(), kBundleFormatVersion, kSchemaVersion,
              static_cast<long long>(r->skipped_unverified));
  return kExitOk;
}

int Import(const CacheShareCommands& c, const std::string& cache_dir) {
  // The bundle before the local cache: opening that creates it, and a missing
  // or unreadable bundle leaves nothing behind.
  if (std::ifstream probe(c.file, std::ios::binary); !probe) {
    return Fail(kExitBadInput, "cannot read bundle " + c.file + ": " + std::strerror(errno));
  }
  auto store = OpenLocal(cache_dir);
  if (!store.ok()) return Fail(kExitBadInput, store.status().message());
  auto r = ImportBundle(**store, c.file, c.arch, c.trust);
  if (!r.ok()) return FailWith(r.status());
  std::printf("imported %s: %lld entr%s%s, %lld stored, %lld kept (the local entry is verified or faster)%s\n",
              c.file.c_str(), static_cast<long long>(r->entries), r->entries == 1 ? "y" : "ies",
              c.arch.empty() ? "" : (" for " + c.arch).c_str(), static_cast<long long>(r->stored),
              static_cast<long long>(r->kept_existing),
              c.trust ? "; trusted (--trust)" : "; unverified until re-verified on this machine's GPU");
  return kExitOk;
}

int Gc(const CacheShareCommands& c, const std::string& cache_dir) {
  GcOptions o;
  if (c.max_size.empty() && c.older_than.empty()) {
    return Fail(kExitBadInput, "give --max-size SIZE and/or --older-than AGE (e.g. --max-size 2GB --older-than 30d)");
  }
  if (!c.max_size.empty()) {
    auto b = ParseByteSize(c.max_size);
    if (!b) return Fail(kExitBadInput, "--max-size '" + c.max_size + "' is not a size (e.g. 2GB, 500MB, 1048576)");
    o.max_payload_bytes = *b;
  }
  if (!c.older_than.empty()) {
    auto s = ParseAge(c.older_than);
    if (!s) return Fail(kExitBadInput, "--older-than '" + c.older_than + "' is not an age (e.g. 30d, 12h, 90m)");
    o.older_than_s = *s;
  }
  if (const std::string why = NoCacheYet(CacheDir(cache_dir)); !why.empty()) {  // nothing to collect: create nothing
    std::printf("removed 0 winner(s): no cache yet (%s)\n", why.c_str());
    return kExitOk;
  }
  auto store = OpenLocal(cache_dir);
  if (!store.ok()) return Fail(kExitBadInput, store.status().message());
  auto r = (*store)->CollectGarbage(o);
  if (!r.ok()) return FailWith(r.status());
  std::printf("removed %lld winner(s) (%s); %lld left (%s of kernels, IR and plans)\n",
              static_cast<long long>(r->removed), Bytes(r->removed_bytes).c_str(),
              static_cast<long long>(r->remaining), Bytes(r->remaining_bytes).c_str());
  return kExitOk;
}

int Stats(const CacheShareCommands& c, const std::string& cache_dir) {
  // A cache that is not there yet reads as an empty one, and stays not there.
  const std::string missing = NoCacheYet(CacheDir(cache_dir));
  Expected<CacheStats> s = CacheStats{};
  std::string path = DatabasePath(CacheDir(cache_dir));
  if (missing.empty()) {
    auto store = OpenLocal(cache_dir);
    if (!store.ok()) return Fail(kExitBadInput, store.status().message());
    s = (*store)->Stats();
    if (!s.ok()) return FailWith(s.status());
    path = (*store)->path();
  }
  if (c.json) {
    nlohmann::json archs = nlohmann::json::object();
    for (const auto& [arch, n] : s->archs) archs[arch] = n;
    nlohmann::json j{{"path", path},                     {"entries", s->entries},
                     {"unverified", s->unverified},       {"pulled", s->pulled},
                     {"hits", s->hits},                   {"payload_bytes", s->payload_bytes},
                     {"file_bytes", s->file_bytes},       {"geomean_speedup", nullptr},
                     {"total_speedup", nullptr},          {"archs", archs}};
    if (s->entries > 0) {  // an empty cache measured nothing: null, never 0 (CLI.md)
      j["geomean_speedup"] = s->geomean_speedup;
      j["total_speedup"] = s->total_speedup;
    }
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("cache:           %s%s\n", path.c_str(), missing.empty() ? "" : (" (not there yet: " + missing + ")").c_str());
  std::printf("entries:         %lld (%lld unverified, not served; %lld pulled or imported)\n",
              static_cast<long long>(s->entries), static_cast<long long>(s->unverified),
              static_cast<long long>(s->pulled));
  std::string archs;
  for (const auto& [arch, n] : s->archs) archs += (archs.empty() ? "" : ", ") + arch + " " + std::to_string(n);
  std::printf("archs:           %s\n", archs.empty() ? "-" : archs.c_str());
  std::printf("hits:            %lld (loads by the runtime, summed over entries)\n", static_cast<long long>(s->hits));
  std::printf("size:            %s payload, %s file\n", Bytes(s->payload_bytes).c_str(), Bytes(s->file_bytes).c_str());
  if (s->entries == 0) {
    std::printf("speedup:         - (no entry; `dice tune` or `dice warmup` fills the cache)\n");
  } else {
    std::printf("speedup:         geomean %.2fx; total %.2fx (sum of baseline µs / sum of best µs)\n",
                s->geomean_speedup, s->total_speedup);
  }
  return kExitOk;
}

}  // namespace

std::optional<int64_t> ParseByteSize(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 15) return std::nullopt;
  const int64_t n = std::stoll(text.substr(0, i));
  std::string unit;
  for (size_t k = i; k < text.size(); ++k) unit += static_cast<char>(std::toupper(static_cast<unsigned char>(text[k])));
  int shift;
  if (unit.empty() || unit == "B") shift = 0;
  else if (unit == "K" || unit == "KB" || unit == "KIB") shift = 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB") shift = 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB") shift = 30;
  else if (unit == "T" || unit == "TB" || unit == "TIB") shift = 40;
  else return std::nullopt;
  if (n <= 0 || n > (std::numeric_limits<int64_t>::max() >> shift)) return std::nullopt;
  return n << shift;
}

std::optional<int64_t> ParseAge(const std::string& text) {
  if (text.size() < 2 || text.size() > 12) return std::nullopt;
  const std::string digits = text.substr(0, text.size() - 1);
  for (char ch : digits) {
    if (!std::isdigit(static_cast<unsigned char>(ch))) return std::nullopt;
  }
  const int64_t n = std::stoll(digits);
  int64_t unit;
  switch (text.back()) {
    case 's': unit = 1; break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    case 'd': unit = 86400; break;
    case 'w': unit = 7 * 86400; break;
    default: return std::nullopt;
  }
  if (n <= 0) return std::nullopt;
  return n * unit;
}

void RegisterCacheShare(CLI::App& cache, std::shared_ptr<const std::string> cache_dir, CommandTable& table) {
  auto c = std::make_shared<CacheShareCommands>();
  const char* cache_help = "cache directory (default $DICE_CACHE_DIR or ~/.cache/dice)";
  auto* push = cache.add_subcommand("push", "upload the local verified winners to a cache server");
  push->add_option("url", c->url, "server, http://HOST:PORT")->required();
  push->add_option("--token-file", c->token_file, "file whose first line is the bearer token "
                                                  "(default $DICE_REMOTE_TOKEN)");
  auto* pull = cache.add_subcommand("pull", "fetch a cache server's winners into the local cache");
  pull->add_option("url", c->url, "server, http://HOST:PORT")->required();
  pull->add_flag("--trust-remote", c->trust, "store them as verified (skip re-verification on this GPU)");
  for (CLI::App* sub : {push, pull}) {
    sub->add_option("--timeout-ms", c->timeout_ms, "per-request timeout, ms")->check(CLI::Range(1, 600000));
  }
  auto* export_cmd = cache.add_subcommand("export", "write the verified winners to a portable bundle file");
  export_cmd->add_option("file", c->file, "bundle file to write")->required();
  auto* import_cmd = cache.add_subcommand("import", "read a bundle file into the local cache");
  import_cmd->add_option("file", c->file, "bundle file to read")->required();
  import_cmd->add_flag("--trust", c->trust, "store them as verified (skip re-verification on this GPU)");
  for (CLI::App* sub : {push, pull, export_cmd, import_cmd}) {
    sub->add_option("--arch", c->arch, "only this GPU arch, e.g. sm_90 (default: all)");
  }
  auto* gc = cache.add_subcommand("gc", "remove old or least recently used winners to bound the cache");
  gc->add_option("--max-size", c->max_size, "keep kernels+IR+plans within SIZE (2GB, 500MB; powers of 1024)");
  gc->add_option("--older-than", c->older_than, "remove winners neither created nor used within AGE (30d, 12h)");
  auto* stats = cache.add_subcommand("stats", "entries, archs, hits, sizes and speedups of the cache");
  stats->add_flag("--json", c->json, "print as JSON");
  for (CLI::App* sub : {push, pull, export_cmd, import_cmd, gc, stats}) {
    sub->add_option("--cache", c->cache_dir, cache_help);
  }
  // A subcommand's own --cache wins over the group's.
  auto dir = [c, cache_dir] { return c->cache_dir.empty() ? *cache_dir : c->cache_dir; };
  table.Add(push, [c, dir] { return Push(*c, dir()); });
  table.Add(pull, [c, dir] { return Pull(*c, dir()); });
  table.Add(export_cmd, [c, dir] { return Export(*c, dir()); });
  table.Add(import_cmd, [c, dir] { return Import(*c, dir()); });
  table.Add(gc, [c, dir] { return Gc(*c, dir()); });
  table.Add(stats, [c, dir] { return Stats(*c, dir()); });
}

}  // namespace dice::cli
