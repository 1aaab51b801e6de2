// The cache server's HTML pages (dice/cache/http_server.h: "GET /",
// "GET /entry/{key}"): the dashboard table of one page of winners, and the
// detail page of one task key. Pure functions from query results to HTML;
// the server runs the queries (Store::ListWinnerPage, ListAttempts). Every
// stored field is HTML-escaped before it is written; the only text that
// reaches a URL is a validated query parameter (arch, op: [A-Za-z0-9_]).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "dice/cache/http_server.h"
#include "dice/core/ir.h"

namespace dice::cache {
namespace {

using json = nlohmann::json;

std::string Age(int64_t seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds < 60) return std::to_string(seconds) + "s";
  if (seconds < 3600) return std::to_string(seconds / 60) + "m";
  if (seconds < 86400) return std::to_string(seconds / 3600) + "h";
  return std::to_string(seconds / 86400) + "d";
}

std::string Fixed(double v, const char* fmt) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

bool IsWord(const std::string& s, bool lower_only) {
  if (s.empty() || s.size() > 32) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                    (!lower_only && c >= 'A' && c <= 'Z');
    if (!ok) return false;
  }
  return true;
}

std::string Ops(const WinnerRecord& r) {
  auto g = ir::Parse(r.graph_canonical);
  return g.ok() ? ir::Summary(*g) : "?";
}

// "" when the entry is servable, else why it is damaged.
std::string DamageOf(const WinnerSummary& e) {
  if (e.content_checked && !e.content_ok) return "damaged: content hash mismatch";
  json plan = json::parse(e.record.launch_plan_json, nullptr, /*allow_exceptions=*/false);
  if (plan.is_discarded() || !plan.is_object()) return "damaged: launch plan is not a JSON object";
  return "";
}

// The row's state: its CSS class and the text of the status cell.
std::pair<std::string, std::string> StateOf(const WinnerSummary& e) {
  const std::string damage = DamageOf(e);
  if (!damage.empty()) return {"damaged", damage};
  if (!e.record.verified) return {"unverified", "unverified (re-verified before use)"};
  return {"verified", "verified"};
}

const char* OrderName(WinnerOrder o) {
  switch (o) {
    case WinnerOrder::kSpeedup: return "speedup";
    case WinnerOrder::kHits: return "hits";
    case WinnerOrder::kNewest: break;
  }
  return "newest";
}

// "/?arch=..&op=..&verified=..&sort=..&page=.." with the unset parameters left out.
std::string Link(const DashboardQuery& q, WinnerOrder order, int page) {
  std::string url = "/?";
  if (!q.arch.empty()) url += "arch=" + q.arch + "&";
  if (!q.op.empty()) url += "op=" + q.op + "&";
  if (q.verified >= 0) url += "verified=" + std::to_string(q.verified) + "&";
  url += std::string("sort=") + OrderName(order) + "&page=" + std::to_string(page);
  return HtmlEscape(url);
}

constexpr const char* kStyle =
    "<style>body{font-family:sans-serif}table{border-collapse:collapse}"
    "td,th{border:1px solid #999;padding:2px 6px;text-align:left;vertical-align:top}td.n{text-align:right}"
    "tr.unverified{background:#fff6d5}tr.damaged{background:#fbd5d5}pre{background:#f4f4f4;padding:6px;"
    "overflow-x:auto}form{margin:8px 0}</style>";

void Head(std::ostringstream& h, const std::string& title) {
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << HtmlEscape(title)
    << "</title>\n" << kStyle << "</head>\n<body>";
}

void FilterForm(std::ostringstream& h, const DashboardQuery& q) {
  auto option = [&h](const char* value, const char* label, bool selected) {
    h << "<option value=\"" << value << "\"" << (selected ? " selected" : "") << ">" << label << "</option>";
  };
  h << "<form id=\"filters\" method=\"get\" action=\"/\">arch <input name=\"arch\" size=\"8\" value=\""
    << HtmlEscape(q.arch) << "\"> op <input name=\"op\" size=\"10\" value=\"" << HtmlEscape(q.op)
    << "\"> <select name=\"verified\">";
  option("", "verified or not", q.verified < 0);
  option("1", "verified only", q.verified == 1);
  option("0", "unverified only", q.verified == 0);
  h << "</select> sort <select name=\"sort\">";
  option("newest", "newest", q.order == WinnerOrder::kNewest);
  option("speedup", "speedup", q.order == WinnerOrder::kSpeedup);
  option("hits", "hits", q.order == WinnerOrder::kHits);
  h << "</select> <button type=\"submit\">show</button> <a href=\"/\">all</a></form>\n";
}

// What an empty table says: how to fill the cache, or that the filters match nothing.
void EmptyNote(std::ostringstream& h, const DashboardQuery& q) {
  if (!q.arch.empty() || !q.op.empty() || q.verified >= 0) {
    h << "<p id=\"empty\">No entry matches these filters. <a href=\"/\">Show every entry</a>.</p>\n";
    return;
  }
  h << "<div id=\"empty\"><p>This cache is empty.</p><p>Fill it with winners tuned on a GPU: "
    << "<code>dice tune model.pt --input 1024x8192:f32 --cache DIR</code> writes <code>DIR/kernels.db</code> "
    << "(serve that file), <code>dice cache pull http://OTHER-SERVER:8470 --cache DIR</code> copies another "
    << "server's winners into DIR, and clients upload theirs with <code>dice cache push http://THIS-SERVER:8470 "
    << "--token-file TOKEN</code> when this server was started with <code>--token-file</code> (without one it "
    << "is read-only).</p></div>\n";
}

void EntryRow(std::ostringstream& h, const WinnerSummary& e, int64_t now) {
  const WinnerRecord& r = e.record;
  const auto [css, state] = StateOf(e);
  h << "<tr class=\"" << css << "\"><td>" << HtmlEscape(Ops(r)) << "</td><td>" << HtmlEscape(r.input_specs)
    << "</td><td>" << HtmlEscape(r.arch) << "</td><td>" << HtmlEscape(r.gpu_name) << "</td><td class=\"state\">"
    << HtmlEscape(state) << "</td><td class=\"n\">" << r.hits << "</td><td class=\"n\">"
    << Fixed(r.baseline_us, "%.2f") << "</td><td class=\"n\">" << Fixed(r.best_us, "%.2f")
    << "</td><td class=\"n\">" << Fixed(r.speedup, "%.2fx") << "</td><td><code>"
    << HtmlEscape(r.candidate_hash.substr(0, 12)) << "</code></td><td>" << HtmlEscape(r.origin)
    << "</td><td class=\"n\">" << Age(now - r.created_at) << "</td><td><a href=\"/entry/"
    << HtmlEscape(r.task_key) << "\"><code>" << HtmlEscape(r.task_key.substr(0, 16)) << "</code></a></td></tr>\n";
}

void Pager(std::ostringstream& h, const WinnerPage& page, const DashboardQuery& q) {
  const int64_t pages = (page.total + kDashboardPageSize - 1) / kDashboardPageSize;
  h << "<p id=\"pager\">page " << q.page << " of " << pages;
  if (q.page > 1) h << " <a rel=\"prev\" href=\"" << Link(q, q.order, q.page - 1) << "\">previous</a>";
  if (q.page < pages) h << " <a rel=\"next\" href=\"" << Link(q, q.order, q.page + 1) << "\">next</a>";
  h << "</p>\n";
}

}  // namespace

std::string HtmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Expected<DashboardQuery> ParseDashboardQuery(const std::multimap<std::string, std::string>& params) {
  DashboardQuery q;
  auto value = [&params](const char* name) {
    auto it = params.find(name);
    return it == params.end() ? std::string() : it->second;
  };
  auto bad = [](const std::string& what) { return Status(StatusCode::kInvalidArgument, what); };
  q.arch = value("arch");
  if (!q.arch.empty() && !IsWord(q.arch, false)) return bad("arch must be 1 to 32 of A-Z, a-z, 0-9, _");
  q.op = value("op");
  if (!q.op.empty() && !IsWord(q.op, true)) return bad("op must be an op name: 1 to 32 of a-z, 0-9, _");
  const std::string verified = value("verified");
  if (verified == "1" || verified == "0") {
    q.verified = verified == "1" ? 1 : 0;
  } else if (!verified.empty()) {
    return bad("verified must be 1, 0 or empty");
  }
  const std::string sort = value("sort");
  if (sort == "speedup") {
    q.order = WinnerOrder::kSpeedup;
  } else if (sort == "hits") {
    q.order = WinnerOrder::kHits;
  } else if (!sort.empty() && sort != "newest") {
    return bad("sort must be newest, speedup or hits");
  }
  const std::string page = value("page");
  if (!page.empty()) {
    int p = 0;
    for (char c : page) {
      if (c < '0' || c > '9' || page.size() > 8) return bad("page must be a positive integer below 10^8");
      p = p * 10 + (c - '0');
    }
    if (p <= 0) return bad("page must be a positive integer below 10^8");
    q.page = p;
  }
  return q;
}

WinnerQuery ToWinnerQuery(const DashboardQuery& q) {
  WinnerQuery w;
  w.arch = q.arch;
  w.op = q.op;
  w.verified = q.verified;
  w.order = q.order;
  w.offset = static_cast<int64_t>(q.page - 1) * kDashboardPageSize;
  w.limit = kDashboardPageSize;
  w.check_content = true;
  return w;
}

std::string RenderDashboard(const WinnerPage& page, const DashboardQuery& query, int64_t now) {
  std::ostringstream h;
  Head(h, "DICE kernel cache");
  h << "<h1>DICE kernel cache</h1>\n<p id=\"summary\">" << page.total << " entr" << (page.total == 1 ? "y" : "ies");
  if (!page.entries.empty()) {
    const int64_t first = static_cast<int64_t>(query.page - 1) * kDashboardPageSize + 1;
    h << " (" << first << "&ndash;" << first + static_cast<int64_t>(page.entries.size()) - 1 << " shown, "
      << OrderName(query.order) << " first)";
  }
  h << "</p>\n";
  FilterForm(h, query);
  if (page.entries.empty()) {
    if (page.total > 0) {
      h << "<p id=\"empty\">Page " << query.page << " is past the last one. <a href=\"" << Link(query, query.order, 1)
        << "\">First page</a>.</p>\n";
    } else {
      EmptyNote(h, query);
    }
  } else {
    h << "<table id=\"entries\"><thead><tr><th>ops</th><th>inputs</th><th>arch</th><th>GPU</th><th>state</th>"
      << "<th><a href=\"" << Link(query, WinnerOrder::kHits, 1) << "\">hits</a></th><th>baseline µs</th>"
      << "<th>best µs</th><th><a href=\"" << Link(query, WinnerOrder::kSpeedup, 1) << "\">speedup</a></th>"
      << "<th>candidate</th><th>origin</th><th><a href=\"" << Link(query, WinnerOrder::kNewest, 1)
      << "\">age</a></th><th>key</th></tr></thead><tbody>\n";
    for (const WinnerSummary& e : page.entries) EntryRow(h, e, now);
    h << "</tbody></table>\n";
    Pager(h, page, query);
  }
  h << "<p>API: <code>GET /v1/kernels?arch=&amp;page=</code>, <code>GET /v1/kernels/{key}</code>, "
    << "<code>/v1/health</code>, <code>/metrics</code></p></body></html>\n";
  return h.str();
}

std::string RenderErrorPage(int status, const std::string& message) {
  std::ostringstream h;
  Head(h, "DICE kernel cache: error " + std::to_string(status));
  h << "<p><a href=\"/\">&larr; all entries</a></p>\n<h1>Error " << status << "</h1>\n<p id=\"error\">"
    << HtmlEscape(message) << "</p></body></html>\n";
  return h.str();
}

std::string RenderEntryPage(const std::string& task_key, const WinnerSummary* entry,
                            const std::vector<AttemptRecord>& attempts, int64_t now) {
  std::ostringstream h;
  Head(h, "DICE kernel cache: " + task_key.substr(0, 16));
  h << "<p><a href=\"/\">&larr; all entries</a></p>\n<h1>Task <code>" << HtmlEscape(task_key) << "</code></h1>\n";
  if (entry == nullptr) {
    h << "<p id=\"state\" class=\"none\">No winner: every candidate tried for this key failed or was slower.</p>\n";
  } else {
    const WinnerRecord& r = entry->record;
    const auto [css, state] = StateOf(*entry);
    h << "<p id=\"state\" class=\"" << css << "\">" << HtmlEscape(state) << "</p>\n<table id=\"fields\">";
    auto field = [&h](const char* name, const std::string& value) {
      h << "<tr><th>" << name << "</th><td>" << HtmlEscape(value) << "</td></tr>";
    };
    field("ops", Ops(r));
    field("inputs", r.input_specs);
    field("arch", r.arch);
    field("GPU", r.gpu_name);
    field("origin", r.origin);
    field("candidate", r.candidate_hash);
    field("baseline µs", Fixed(r.baseline_us, "%.3f"));
    field("best µs", Fixed(r.best_us, "%.3f"));
    field("speedup", Fixed(r.speedup, "%.3fx"));
    field("reduced precision", r.reduced_precision ? "yes" : "no");
    field("hits", std::to_string(r.hits));
    field("last used", r.last_used_at == 0 ? "never" : Age(now - r.last_used_at) + " ago");
    field("age", Age(now - r.created_at));
    field("pulled from", r.pulled_from.empty() ? "(tuned here)" : r.pulled_from);
    field("versions", r.versions_json);
    field("cubin bytes", std::to_string(entry->cubin_bytes));
    field("content hash", r.content_hash);
    h << "</table>\n<h2>Launch plan</h2>\n<pre id=\"plan\">";
    json plan = json::parse(r.launch_plan_json, nullptr, /*allow_exceptions=*/false);
    h << HtmlEscape(plan.is_object() ? plan.dump(2, ' ', false, json::error_handler_t::replace) : r.launch_plan_json)
      << "</pre>\n<h2>IR</h2>\n<pre id=\"ir\">" << HtmlEscape(r.graph_canonical) << "</pre>\n<h2>Source</h2>\n"
      << "<pre id=\"source\">" << HtmlEscape(r.source) << "</pre>\n";
  }
  h << "<h2>Attempts</h2>\n";
  if (attempts.empty()) {
    h << "<p id=\"attempts\">No attempts recorded for this key.</p>\n";
  } else {
    h << "<table id=\"attempts\"><thead><tr><th>candidate</th><th>origin</th><th>outcome</th><th>µs</th>"
      << "<th>age</th><th>error</th></tr></thead><tbody>\n";
    for (const AttemptRecord& a : attempts) {
      h << "<tr><td><code>" << HtmlEscape(a.candidate_hash.substr(0, 12)) << "</code></td><td>"
        << HtmlEscape(a.origin) << "</td><td>" << HtmlEscape(a.outcome) << "</td><td class=\"n\">"
        << (a.time_us > 0 ? Fixed(a.time_us, "%.2f") : "") << "</td><td class=\"n\">" << Age(now - a.created_at)
        << "</td><td><pre>" << HtmlEscape(a.error) << "</pre></td></tr>\n";
    }
    h << "</tbody></table>\n";
  }
  h << "</body></html>\n";
  return h.str();
}

}  // namespace dice::cache
