// The tuning report (cli/report.h): the JSON document `dice tune` writes,
// the same document read back from a cache directory, and the HTML page
// rendered from it; plus the `dice report` command. Torch-free.
#include "report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>

#include "dice/cache/store.h"
#include "dice/core/ir.h"
#include "attribution.h"
#include "dice/runtime/outcome.h"

namespace dice::cli {
namespace {

using nlohmann::json;

constexpr const char* kDash = "\u2014";  // how a time that was not measured shows

// A measured value, or null: 0 (and negatives) mean "not measured".
json Measured(double v, bool timed) { return timed && v > 0 ? json(v) : json(nullptr); }

// The attention pass's SDPA backends, one object each: {"backend", "us" (null
// when not timed), "error"}.
json SdpaBackendsJson(const std::vector<EndToEnd::SdpaBackendRow>& rows) {
  json out = json::array();
  for (const auto& r : rows) out.push_back({{"backend", r.backend}, {"us", Measured(r.us, true)}, {"error", r.error}});
  return out;
}

// ---------------------------------------------------------------- reading

// The number at doc[key], or nullopt when missing, null or not a number.
std::optional<double> NumberAt(const json& doc, const char* key) {
  if (!doc.is_object()) return std::nullopt;
  auto it = doc.find(key);
  if (it == doc.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// The text at doc[key] ("" when missing or null; numbers and booleans as JSON).
std::string TextAt(const json& doc, const char* key) {
  if (!doc.is_object()) return "";
  auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

bool BoolAt(const json& doc, const char* key) {
  if (!doc.is_object()) return false;
  auto it = doc.find(key);
  return it != doc.end() && it->is_boolean() && it->get<bool>();
}

const json& ArrayAt(const json& doc, const char* key) {
  static const json kEmpty = json::array();
  if (!doc.is_object()) return kEmpty;
  auto it = doc.find(key);
  return it != doc.end() && it->is_array() ? *it : kEmpty;
}

std::string Format(const char* fmt, double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// "12.3 µs", "2.25x", "840 ms", or "—".
std::string Us(std::optional<double> v) { return v ? Format("%.1f", *v) + " \u00b5s" : kDash; }
std::string Times(std::optional<double> v) { return v ? Format("%.2f", *v) + "x" : kDash; }
std::string Ms(std::optional<double> v) { return v ? Format("%.0f", *v) + " ms" : kDash; }

// a / b when both were measured.
std::optional<double> Ratio(std::optional<double> a, std::optional<double> b) {
  if (!a || !b || *a <= 0 || *b <= 0) return std::nullopt;
  return *a / *b;
}

// The bytes of `text` that are well-formed UTF-8; each other byte becomes
// U+FFFD (compiler logs are not always UTF-8).
std::string ValidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = n > 0 && i + n <= text.size() && !(n == 2 && c < 0xc2);
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) >> 6) == 0x2;
    if (ok) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      out += "\ufffd";
      ++i;
    }
  }
  return out;
}

// Lowercase letters, digits, '_' and '-' of `text`: a safe CSS class suffix.
std::string ClassName(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-') out += ch;
  }
  return out.empty() ? "unknown" : out;
}

// ---------------------------------------------------------------- rendering

constexpr const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1200px;padding:0 16px;color:#1d1d1f}
h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin:28px 0 6px}
.meta{color:#555;margin-top:0}code{font-size:12px}
table{border-collapse:collapse;margin:6px 0 10px}
th,td{border:1px solid #d4d4da;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f2f2f5;font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.err{font-family:ui-monospace,monospace;font-size:12px;white-space:pre-wrap;max-width:620px;word-break:break-word}
tr.outcome-winner td{background:#e3f5e6}
tr.failed td.outcome{color:#b00020;font-weight:600}
.note{color:#555;font-style:italic}
svg text{font:12px system-ui,sans-serif;fill:#1d1d1f}
rect.bar{fill:#3b7dd8}rect.bar.slower{fill:#a9a9b3}
line.one{stroke:#333;stroke-dasharray:4 3}
)";

// A failed outcome: neither compiled, verified nor skipped (compile_error,
// parse_error, verify_failed, crashed, timeout).
bool IsFailure(const std::string& outcome) {
  auto o = runtime::ParseOutcome(outcome);
  return o && !runtime::IsVerified(*o) && *o != runtime::Outcome::kCompiled && *o != runtime::Outcome::kSkipped;
}

void RenderHeader(const json& doc, std::ostringstream& h) {
  const bool from_cache = TextAt(doc, "source") == "cache";
  const std::string what = from_cache ? TextAt(doc, "cache") : TextAt(doc, "model");
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    << "<title>DICE tuning report: " << HtmlEscape(what) << "</title><style>" << kStyle << "</style></head>\n<body>\n"
    << "<h1>DICE tuning report</h1>\n<p class=\"meta\" id=\"meta\">";
  if (from_cache) {
    h << "kernel cache <code>" << HtmlEscape(what) << "</code>: every winner with its recorded attempts";
  } else {
    h << "model <code>" << HtmlEscape(what) << "</code> \u00b7 "
      << (BoolAt(doc, "gpu") ? "tuned on a GPU"
                             : "compile-only (no GPU): candidates were compiled, nothing was verified or timed");
  }
  h << " \u00b7 " << ArrayAt(doc, "groups").size() << " fusion group(s)</p>\n";
  if (from_cache && ArrayAt(doc, "groups").empty()) {
    h << "<p class=\"note\">No winners in this cache yet: <code>dice tune MODEL --input SPEC --cache DIR</code> "
         "on a GPU fills it (a compile-only run stores none).</p>\n";
  }
}

// Before / captured / after and what each step gave.
void RenderEndToEnd(const json& doc, std::ostringstream& h) {
  if (TextAt(doc, "source") == "cache") return;  // a cache keeps no end-to-end times
  const auto before = NumberAt(doc, "before_us"), captured = NumberAt(doc, "captured_us"),
             after = NumberAt(doc, "after_us");
  h << "<h2>End to end</h2>\n<table id=\"end-to-end\"><thead><tr><th>eager (before)</th>"
    << "<th>captured (frozen, no dice group)</th><th>captured + winners (after)</th><th>capture alone</th><th>winners</th>"
    << "<th>total</th><th>outputs</th></tr></thead>\n<tbody><tr><td class=\"n\">" << Us(before)
    << "</td><td class=\"n\">" << Us(captured) << "</td><td class=\"n\">" << Us(after) << "</td><td class=\"n\">"
    << Times(Ratio(before, captured)) << "</td><td class=\"n\">" << Times(Ratio(captured, after))
    << "</td><td class=\"n\">" << Times(Ratio(before, after)) << "</td><td>"
    << (BoolAt(doc, "outputs_match") ? "match eager" : "DIFFER FROM eager");
  const std::string detail = TextAt(doc, "match_detail");
  if (!detail.empty()) h << " (" << HtmlEscape(detail) << ")";
  h << "</td></tr></tbody></table>\n<p class=\"note\">Capture alone is what freezing and folding gave: the "
       "frozen graph with no dice group (before / captured); winners is what the served winners added on top "
       "(captured / after); total = capture alone \u00d7 winners. The three are timed side by side, round-robin.";
  if (doc.is_object() && doc.contains("frozen") && doc["frozen"].is_boolean() && !doc["frozen"].get<bool>()) {
    h << " The model was captured unfrozen (freezing failed or was off): capture alone folded nothing.";
  }
  if (!before) h << " Not measured: compile-only runs time nothing.";
  h << "</p>\n";
}

// One horizontal bar per group with a speedup, a dashed line at 1x.
void RenderPlot(const json& doc, std::ostringstream& h) {
  const json& groups = ArrayAt(doc, "groups");
  constexpr int kLabel = 320, kPlot = 520, kRow = 24, kTop = 20;
  double top = 1.0;
  for (const json& g : groups) top = std::max(top, NumberAt(g, "speedup").value_or(0));
  top *= 1.15;
  const int height = kTop + kRow * static_cast<int>(std::max<size_t>(groups.size(), 1)) + 8;
  const int width = kLabel + kPlot + 70;
  h << "<h2>Speedup per group</h2>\n<svg id=\"speedup-plot\" width=\"" << width
    << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height
    << "\" role=\"img\" aria-label=\"speedup over the PyTorch baseline per fusion group\">\n";
  int i = 0;
  for (const json& g : groups) {
    ++i;
    const int y = kTop + kRow * (i - 1);
    std::string label = std::to_string(i) + ". " + TextAt(g, "description");
    if (label.size() > 44) label = label.substr(0, 43) + "\u2026";  // fits the 320 px label column
    const auto s = NumberAt(g, "speedup");
    h << "<g class=\"row\" data-group=\"" << i << "\"><text class=\"label\" x=\"0\" y=\"" << y + 16 << "\">"
      << HtmlEscape(ValidUtf8(label)) << "</text>";
    int end = kLabel;
    if (s && *s > 0) {
      const int w = std::max(1, static_cast<int>(*s / top * kPlot));
      end = kLabel + w;
      h << "<rect class=\"bar" << (*s < 1.0 ? " slower" : "") << "\" data-speedup=\"" << Format("%.4g", *s)
        << "\" x=\"" << kLabel << "\" y=\"" << y + 4 << "\" width=\"" << w << "\" height=\"16\"><title>"
        << Times(s) << "</title></rect>";
    }
    h << "<text class=\"value\" x=\"" << end + 6 << "\" y=\"" << y + 16 << "\">" << Times(s) << "</text></g>\n";
  }
  if (groups.empty()) h << "<text x=\"0\" y=\"" << kTop + 16 << "\">no fusion groups</text>\n";
  const int one = kLabel + static_cast<int>(1.0 / top * kPlot);
  h << "<line class=\"one\" x1=\"" << one << "\" y1=\"4\" x2=\"" << one << "\" y2=\"" << height
    << "\"/><text x=\"" << one + 4 << "\" y=\"12\">1x = PyTorch</text>\n</svg>\n"
    << "<p class=\"note\">Each bar: the group's winner against PyTorch running the same subgraph; " << kDash
    << " = no winner, or not measured.</p>\n";
}

void RenderCandidates(const json& cands, int group, std::ostringstream& h) {
  h << "<table class=\"candidates\" id=\"candidates-" << group << "\"><thead><tr><th>candidate (origin)</th>"
    << "<th>outcome</th><th>error</th><th>compile</th><th>time</th><th>speedup</th></tr></thead>\n<tbody>\n";
  for (const json& c : cands) {
    const std::string outcome = TextAt(c, "outcome");
    h << "<tr class=\"cand outcome-" << ClassName(outcome) << (IsFailure(outcome) ? " failed" : "") << "\"><td>"
      << HtmlEscape(ValidUtf8(TextAt(c, "origin"))) << "</td><td class=\"outcome\">"
      << HtmlEscape(ValidUtf8(outcome)) << "</td><td class=\"err\">" << HtmlEscape(ValidUtf8(TextAt(c, "error")))
      << "</td><td class=\"n\">" << Ms(NumberAt(c, "compile_ms")) << "</td><td class=\"n\">"
      << Us(NumberAt(c, "time_us")) << "</td><td class=\"n\">" << Times(NumberAt(c, "speedup")) << "</td></tr>\n";
  }
  h << "</tbody></table>\n";
}

void RenderGroup(const json& g, int group, std::ostringstream& h) {
  const std::string winner = TextAt(g, "winner");
  h << "<section class=\"group\" id=\"group-" << group << "\">\n<h2>Group " << group << ": "
    << HtmlEscape(ValidUtf8(TextAt(g, "description"))) << "</h2>\n<p class=\"summary\">baseline <b>"
    << Us(NumberAt(g, "baseline_us")) << "</b> \u00b7 best <b>" << Us(NumberAt(g, "best_us"))
    << "</b> \u00b7 speedup <b>" << Times(NumberAt(g, "speedup")) << "</b>";
  if (auto saved = NumberAt(g, "saved_us")) {
    h << " \u00b7 saved <b class=\"saved\">" << Us(saved)
      << (TextAt(g, "saved_per") == "forward" ? " per forward" : " per call") << "</b>";
    if (auto calls = NumberAt(g, "calls_per_forward")) h << " (" << Format("%.0f", *calls) << " call(s))";
  }
  h << " \u00b7 winner <b class=\"winner\">"
    << (winner.empty() ? std::string("none") : HtmlEscape(ValidUtf8(winner))) << "</b>"
    << (BoolAt(g, "from_cache") ? " (cached)" : "");
  if (NumberAt(g, "tried") && !BoolAt(g, "from_cache")) {
    h << " \u00b7 tried / compiled / verified " << TextAt(g, "tried") << " / " << TextAt(g, "compiled") << " / "
      << TextAt(g, "verified");
    if (auto s = NumberAt(g, "tune_seconds")) h << " \u00b7 " << Format("%.1f", *s) << " s";
  }
  const std::string key = TextAt(g, "task_key");
  if (!key.empty()) h << " \u00b7 key <code>" << HtmlEscape(ValidUtf8(key.substr(0, 16))) << "</code>";
  h << "</p>\n";
  const json& cands = ArrayAt(g, "candidates");
  const json by = GeneratorSummary(cands, winner);
  if (by.size() > 1 || by.contains("dice")) {  // one template source alone says nothing the summary does not
    h << "<table class=\"generators\" id=\"generators-" << group << "\"><thead><tr><th>source</th>"
      << "<th>candidates</th><th>parsed</th><th>compiled</th><th>verified</th><th>best</th><th>won</th></tr>"
      << "</thead>\n<tbody>\n";
    for (const auto& [src, s] : by.items()) {
      h << "<tr class=\"source\" data-source=\"" << HtmlEscape(ValidUtf8(src)) << "\"><td>"
        << HtmlEscape(ValidUtf8(src.empty() ? std::string("?") : src)) << "</td><td class=\"n\">"
        << s["candidates"].get<int64_t>() << "</td><td class=\"n\">" << s["parsed"].get<int64_t>()
        << "</td><td class=\"n\">" << s["compiled"].get<int64_t>() << "</td><td class=\"n\">"
        << s["verified"].get<int64_t>() << "</td><td class=\"n\">"
        << Us(s["best_us"].is_number() ? std::optional<double>(s["best_us"].get<double>()) : std::nullopt)
        << "</td><td>" << (s["won"].get<bool>() ? "yes" : "no") << "</td></tr>\n";
    }
    h << "</tbody></table>\n";
  }
  if (cands.empty()) {
    h << "<p class=\"note\">" << (BoolAt(g, "from_cache") ? "served from the cache: nothing was tried this run"
                                                          : "no candidates")
      << "</p>\n";
  } else {
    RenderCandidates(cands, group, h);
  }
  h << "</section>\n";
}

// ---------------------------------------------------------------- command

int CmdReport(const std::string& source, const std::string& out_path) {
  json doc;
  struct stat st{};
  if (::stat(source.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    auto d = CacheDocument(source);
    if (!d.ok()) return Fail(kExitBadInput, d.status().message());
    doc = std::move(*d);
  } else {
    std::ifstream in(source);
    if (!in) {
      return Fail(kExitBadInput, "cannot read '" + source + "': " + std::strerror(errno) +
                                     " (expected a `dice tune --json` file or a cache directory)");
    }
    doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("groups")) {
      return Fail(kExitBadInput, "'" + source + "' is not a tuning report document (the JSON of `dice tune --json`)");
    }
  }
  Status written = WriteReport(doc, out_path);
  if (!written.ok()) return Fail(kExitFailure, written.message());
  std::printf("dice: report of %s (%zu group(s)) written to %s\n", source.c_str(), ArrayAt(doc, "groups").size(),
              out_path.c_str());
  return kExitOk;
}

}  // namespace

json GeneratorSummary(const json& cands, const std::string& winner_origin) {
  auto prefix = [](const std::string& origin) {
    std::string p = origin.substr(0, origin.find(':'));
    if (p == "generator" && origin.size() > p.size() + 1) p = origin.substr(p.size() + 1);
    return p;
  };
  const std::string winner = winner_origin.empty() ? std::string() : prefix(winner_origin);
  json out = json::object();
  if (!cands.is_array()) return out;
  for (const json& c : cands) {
    if (!c.is_object()) continue;
    const std::string src = prefix(TextAt(c, "origin"));
    const std::string outcome = TextAt(c, "outcome");
    if (!out.contains(src)) {
      out[src] = {{"candidates", 0}, {"parsed", 0}, {"compiled", 0}, {"verified", 0},
                  {"best_us", nullptr}, {"won", !winner.empty() && src == winner}};
    }
    json& s = out[src];
    s["candidates"] = s["candidates"].get<int64_t>() + 1;
    const bool parsed = outcome != "parse_error" && outcome != "skipped";
    const bool compiled = parsed && outcome != "compile_error";
    const bool verified = outcome == "slower" || outcome == "winner" || outcome == "verified";
    if (parsed) s["parsed"] = s["parsed"].get<int64_t>() + 1;
    if (compiled) s["compiled"] = s["compiled"].get<int64_t>() + 1;
    if (verified) {
      s["verified"] = s["verified"].get<int64_t>() + 1;
      if (auto t = NumberAt(c, "time_us"); t && *t > 0 && (s["best_us"].is_null() || *t < s["best_us"].get<double>())) {
        s["best_us"] = *t;
      }
    }
  }
  return out;
}

json GroupJson(const runtime::TuneReport& r, bool timed, std::optional<int64_t> calls_per_forward) {
  json cands = json::array();
  for (const runtime::CandidateOutcome& o : r.outcomes) {
    const bool measured = timed && o.time_us > 0;
    cands.push_back({{"origin", o.origin},
                     {"hash", o.hash},
                     {"outcome", std::string(runtime::OutcomeName(o.outcome))},
                     {"error", o.error},
                     {"compile_ms", Measured(o.compile_ms, true)},
                     {"time_us", Measured(o.time_us, timed)},
                     {"speedup", measured && r.baseline_us > 0 ? json(r.baseline_us / o.time_us) : json(nullptr)}});
  }
  const WinnerSaving saved = timed ? SavedByWinner(r.baseline_us, r.best_us, calls_per_forward) : WinnerSaving{};
  return {{"task_key", r.task_key},       {"description", r.description},
          {"baseline_us", Measured(r.baseline_us, timed)}, {"best_us", Measured(r.best_us, timed)},
          {"speedup", Measured(r.speedup, timed)},         {"winner", r.winner_origin},
          {"from_cache", r.from_cache},   {"tried", r.tried},
          {"compiled", r.compiled},       {"verified", r.verified},
          {"calls_per_forward", calls_per_forward ? json(*calls_per_forward) : json(nullptr)},
          {"saved_us", saved.saved_us ? json(*saved.saved_us) : json(nullptr)},
          {"saved_per", !saved.saved_us ? json(nullptr) : json(saved.calls_per_forward ? "forward" : "call")},
          {"tune_seconds", r.tune_seconds}, {"by_generator", GeneratorSummary(cands, r.winner_origin)},
          {"candidates", std::move(cands)}};
}

json TuneDocument(const std::string& model, const std::vector<runtime::TuneReport>& groups, const EndToEnd& e2e) {
  json gs = json::array();
  for (const runtime::TuneReport& r : groups) {
    auto calls = e2e.calls_per_forward.find(r.task_key);
    gs.push_back(GroupJson(r, e2e.timed,
                           calls == e2e.calls_per_forward.end() ? std::nullopt : std::optional<int64_t>(calls->second)));
  }
  const Attribution a = e2e.timed ? Attribute(e2e.before_us, e2e.captured_us, e2e.after_us) : Attribution{};
  auto number = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  return {{"model", model},
          {"gpu", e2e.timed},
          {"compile_only", !e2e.timed},
          {"frozen", e2e.frozen},
          {"before_us", Measured(e2e.before_us, e2e.timed)},
          {"captured_us", Measured(e2e.captured_us, e2e.timed)},
          {"after_us", Measured(e2e.after_us, e2e.timed)},
          {"capture_speedup", number(a.capture)},
          {"winners_speedup", number(a.winners)},
          {"speedup", number(a.total)},
          {"outputs_match", e2e.outputs_match},
          {"match_detail", e2e.match_detail},
          {"memory_format",
           {{"format", e2e.memory_format},
            {"reason", e2e.memory_format_reason},
            {"contiguous_us", Measured(e2e.memory_format_us.first, e2e.memory_format_us.first > 0)},
            {"channels_last_us", Measured(e2e.memory_format_us.second, e2e.memory_format_us.second > 0)}}},
          {"conv_algorithm",
           {{"choice", e2e.conv_algorithm},
            {"reason", e2e.conv_algorithm_reason},
            {"heuristic_us", Measured(e2e.conv_algorithm_us.first, e2e.conv_algorithm_us.first > 0)},
            {"benchmark_us", Measured(e2e.conv_algorithm_us.second, e2e.conv_algorithm_us.second > 0)}}},
          {"attention",
           {{"choice", e2e.attention},
            {"reason", e2e.attention_reason},
            {"unfused_us", Measured(e2e.attention_us.first, e2e.attention_us.first > 0)},
            {"sdpa_us", Measured(e2e.attention_us.second, e2e.attention_us.second > 0)},
            {"backend", e2e.attention_backend},
            {"backend_reason", e2e.attention_backend_reason},
            {"backends", SdpaBackendsJson(e2e.attention_backends)}}},
          {"capture",
           {{"batch_norms_folded", e2e.batch_norms_folded},
            {"functional", e2e.functional},
            {"global_pools_as_mean", e2e.global_pools_as_mean},
            {"identity_copies_removed", e2e.identity_copies_removed}}},
          {"groups", std::move(gs)}};
}

Expected<json> CacheDocument(const std::string& cache_dir) {
  const std::string path = cache::DatabasePath(cache_dir);
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    return Status(StatusCode::kNotFound, "'" + cache_dir + "' is a directory but not a kernel cache (no kernels.db in it); expected "
                                              "a cache directory (`dice tune --cache DIR`) or a `dice tune --json` file");
  }
  auto store = cache::Store::Open(path);
  if (!store.ok()) return store.status();
  auto winners = (*store)->ListWinners();
  if (!winners.ok()) return winners.status();
  json groups = json::array();
  for (const cache::WinnerRecord& w : *winners) {
    auto attempts = (*store)->ListAttempts(w.task_key);
    if (!attempts.ok()) return attempts.status();
    json cands = json::array();
    for (const cache::AttemptRecord& a : *attempts) {
      cands.push_back({{"origin", a.origin},
                       {"hash", a.candidate_hash},
                       {"outcome", a.outcome},
                       {"error", a.error},
                       {"compile_ms", nullptr},
                       {"time_us", Measured(a.time_us, true)},
                       {"speedup", a.time_us > 0 && w.baseline_us > 0 ? json(w.baseline_us / a.time_us) : json(nullptr)}});
    }
    auto graph = ir::Parse(w.graph_canonical);
    groups.push_back({{"task_key", w.task_key},
                      {"description", (graph.ok() ? ir::Summary(*graph) : std::string("?")) + " " + w.input_specs},
                      {"arch", w.arch},
                      {"gpu_name", w.gpu_name},
                      {"baseline_us", Measured(w.baseline_us, true)},
                      {"best_us", Measured(w.best_us, true)},
                      {"speedup", Measured(w.speedup, true)},
                      {"winner", w.origin},
                      {"from_cache", true},
                      {"verified", w.verified},
                      {"pulled_from", w.pulled_from},
                      {"hits", w.hits},
                      {"by_generator", GeneratorSummary(cands, w.origin)},
                      {"candidates", std::move(cands)}});
  }
  return json{{"source", "cache"}, {"cache", (*store)->path()}, {"groups", std::move(groups)}};
}

std::string RenderReportHtml(const json& doc) {
  std::ostringstream h;
  RenderHeader(doc, h);
  RenderEndToEnd(doc, h);
  RenderPlot(doc, h);
  int i = 0;
  for (const json& g : ArrayAt(doc, "groups")) RenderGroup(g, ++i, h);
  h << "</body></html>\n";
  return h.str();
}

Status WriteReport(const json& doc, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status(StatusCode::kIoError, "cannot write the report '" + path + "': " + std::strerror(errno));
  out << RenderReportHtml(doc);
  out.close();
  if (!out) return Status(StatusCode::kIoError, "writing the report '" + path + "' failed: " + std::strerror(errno));
  return Status::Ok();
}

void RegisterReport(CLI::App& app, CommandTable& table) {
  struct Args {
    std::string source;
    std::string out = "report.html";
  };
  auto a = std::make_shared<Args>();
  auto* report = app.add_subcommand("report", "render a tuning report (a `dice tune --json` file or a cache "
                                              "directory) as one self-contained HTML page");
  report->add_option("source", a->source, "RESULTS.json (dice tune --json) or CACHE_DIR")->required();
  report->add_option("-o,--out", a->out, "the HTML file to write (default report.html)");
  table.Add(report, [a] { return CmdReport(a->source, a->out); });
}

}  // namespace dice::cli
