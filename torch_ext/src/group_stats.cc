// Per-group statistics: snapshots, reset, the profile table and its JSON
// form (group_stats.h).
#include "dice/torch_ext/group_stats.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "dice/torch_ext/group_table.h"
#include "group_record.h"

namespace dice::torch_ext {

std::vector<GroupStats> GetGroupStats() {
  std::vector<GroupStats> out;
  for (GroupRecord* g : AllGroupRecords()) {
    GroupStats s;
    s.id = g->id;
    s.summary = g->group.summary;
    s.canonical = g->group.canonical;
    s.calls = g->calls.load();
    s.hits = g->hits.load();
    s.fallbacks = g->fallbacks.load();
    s.timed_calls = g->timed_calls.load();
    s.total_us = static_cast<double>(g->total_ns.load()) / 1000.0;
    std::lock_guard<std::mutex> lock(g->mu);
    s.input_specs = g->input_specs;
    s.task_key = g->task_key;
    s.task_keys = g->task_keys;
    if (auto it = g->winner_times.find(g->task_key); it != g->winner_times.end()) {
      s.winner_baseline_us = it->second.first;
      s.winner_best_us = it->second.second;
    }
    for (const auto& [reason, n] : g->reasons) s.fallback_reasons.emplace_back(reason, n);
    std::sort(s.fallback_reasons.begin(), s.fallback_reasons.end(),
              [](const auto& a, const auto& b) { return a.second > b.second; });
    out.push_back(std::move(s));
  }
  return out;
}

void ResetGroupStats() {
  for (GroupRecord* g : AllGroupRecords()) {
    g->calls = 0;
    g->hits = 0;
    g->fallbacks = 0;
    g->timed_calls = 0;
    g->total_ns = 0;
    std::lock_guard<std::mutex> lock(g->mu);
    g->reasons.clear();
    g->captured_signatures.clear();
  }
}

std::string FormatProfile(const std::vector<GroupStats>& stats) {
  std::vector<GroupStats> s = stats;
  std::sort(s.begin(), s.end(), [](const GroupStats& a, const GroupStats& b) {
    if (a.total_us != b.total_us) return a.total_us > b.total_us;
    return a.calls > b.calls;
  });
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof(line), "%4s  %-28s %-36s %8s %8s %9s %12s %10s  %s\n", "id", "group", "inputs", "calls",
                "hits", "fallback", "total_us", "mean_us", "top fallback reason");
  os << line;
  for (const auto& g : s) {
    std::string inputs;
    for (size_t i = 0; i < g.input_specs.size(); ++i) inputs += (i ? "," : "") + g.input_specs[i];
    double mean = g.timed_calls > 0 ? g.total_us / static_cast<double>(g.timed_calls) : 0.0;
    std::string reason = g.fallback_reasons.empty() ? "" : g.fallback_reasons.front().first;
    std::snprintf(line, sizeof(line), "%4d  %-28s %-36s %8lld %8lld %9lld %12.1f %10.2f  %s\n", g.id,
                  g.summary.c_str(), inputs.c_str(), static_cast<long long>(g.calls), static_cast<long long>(g.hits),
                  static_cast<long long>(g.fallbacks), g.total_us, mean, reason.c_str());
    os << line;
  }
  return os.str();
}

std::string GroupStatsJson() {
  nlohmann::json arr = nlohmann::json::array();
  for (const GroupStats& s : GetGroupStats()) {
    nlohmann::json reasons = nlohmann::json::object();
    for (const auto& [reason, n] : s.fallback_reasons) reasons[reason] = n;
    auto g = GetRegisteredGroup(s.id);
    arr.push_back({{"id", s.id},
                   {"summary", s.summary},
                   {"canonical", s.canonical},
                   {"torch_ops", g.ok() ? g->torch_ops : std::vector<std::string>{}},
                   {"input_specs", s.input_specs},
                   {"task_key", s.task_key},
                   {"task_keys", s.task_keys},
                   {"calls", s.calls},
                   {"hits", s.hits},
                   {"fallbacks", s.fallbacks},
                   {"timed_calls", s.timed_calls},
                   {"total_us", s.total_us},
                   {"winner_baseline_us", s.winner_baseline_us},
                   {"winner_best_us", s.winner_best_us},
                   {"fallback_reasons", reasons}});
  }
  return arr.dump();
}

}  // namespace dice::torch_ext
