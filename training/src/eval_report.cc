// Reporting pass@k with intervals and comparing stages: see
// dice/training/eval_report.h. Torch-free.
#include "dice/training/eval_report.h"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "dice/training/files.h"

namespace dice::training {

Expected<std::vector<Interval>> PassAtKIntervals(const EvalReport& r, const BootstrapOptions& o) {
  std::vector<Interval> out;
  for (size_t j = 0; j < r.ks.size(); ++j) {
    std::vector<double> per_task;
    for (const auto& t : r.tasks) {
      if (t.pass_at_k.size() <= j) {
        return Status(StatusCode::kInvalidArgument, "pass@k interval: task " + t.id + " has no pass@" +
                                                        std::to_string(r.ks[j]));
      }
      per_task.push_back(t.pass_at_k[j]);
    }
    auto ci = BootstrapMean(per_task, o);
    if (!ci.ok()) return ci.status();
    out.push_back(*ci);
  }
  return out;
}

std::string FormatPassAtK(const EvalReport& r) {
  std::string out;
  for (size_t j = 0; j < r.ks.size() && j < r.pass_at_k_ci.size(); ++j) {
    out += ", pass@" + std::to_string(r.ks[j]) + " " + FormatInterval(r.pass_at_k_ci[j]);
  }
  return out;
}

Expected<EvalReport> ReadEvalJson(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  auto corrupt = [&](const std::string& why) {
    return Status(StatusCode::kCorrupt, "eval report " + path + ": " + why);
  };
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return corrupt("not a JSON object");
  if (!j.contains("k") || !j["k"].is_array() || !j.contains("tasks") || !j["tasks"].is_array()) {
    return corrupt("needs arrays \"k\" and \"tasks\" (dice train eval --json)");
  }
  EvalReport r;
  for (const auto& k : j["k"]) {
    if (!k.is_number_integer()) return corrupt("\"k\" holds a non-integer");
    r.ks.push_back(k.get<int64_t>());
  }
  for (const auto& t : j["tasks"]) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_string() || !t.contains("pass_at_k") ||
        !t["pass_at_k"].is_array() || t["pass_at_k"].size() != r.ks.size()) {
      return corrupt("a task needs a string \"id\" and one \"pass_at_k\" value per k");
    }
    EvalTaskResult tr;
    tr.id = t["id"].get<std::string>();
    for (const auto& p : t["pass_at_k"]) {
      if (!p.is_number()) return corrupt("task " + tr.id + ": a pass_at_k value is not a number");
      tr.pass_at_k.push_back(p.get<double>());
    }
    r.tasks.push_back(std::move(tr));
  }
  return r;
}

Expected<StageComparison> CompareStages(const EvalReport& base, const EvalReport& next, const BootstrapOptions& o) {
  StageComparison out;
  std::map<std::string, const EvalTaskResult*> by_id;
  for (const auto& t : next.tasks) by_id[t.id] = &t;
  std::vector<std::pair<const EvalTaskResult*, const EvalTaskResult*>> pairs;
  for (const auto& t : base.tasks) {
    auto it = by_id.find(t.id);
    if (it == by_id.end()) {
      ++out.base_only;
      continue;
    }
    pairs.emplace_back(&t, it->second);
  }
  out.tasks = static_cast<int64_t>(pairs.size());
  out.new_only = static_cast<int64_t>(next.tasks.size()) - out.tasks;
  if (pairs.empty()) return Status(StatusCode::kInvalidArgument, "compare: the two reports share no task id");
  for (size_t jb = 0; jb < base.ks.size(); ++jb) {
    size_t jn = 0;
    while (jn < next.ks.size() && next.ks[jn] != base.ks[jb]) ++jn;
    if (jn == next.ks.size()) continue;
    std::vector<double> a, b;
    for (const auto& [pb, pn] : pairs) {
      a.push_back(pb->pass_at_k.at(jb));
      b.push_back(pn->pass_at_k.at(jn));
    }
    StageComparisonRow row;
    row.k = base.ks[jb];
    auto ia = BootstrapMean(a, o), ib = BootstrapMean(b, o);
    auto d = PairedBootstrapDifference(a, b, o);
    if (!ia.ok()) return ia.status();
    if (!ib.ok()) return ib.status();
    if (!d.ok()) return d.status();
    row.base = *ia;
    row.next = *ib;
    row.difference = *d;
    out.rows.push_back(row);
  }
  if (out.rows.empty()) return Status(StatusCode::kInvalidArgument, "compare: the two reports share no k");
  return out;
}

Expected<StageComparison> CompareEvalFiles(const std::string& base_json, const std::string& new_json,
                                           const BootstrapOptions& o) {
  auto base = ReadEvalJson(base_json);
  if (!base.ok()) return base.status();
  auto next = ReadEvalJson(new_json);
  if (!next.ok()) return next.status();
  return CompareStages(*base, *next, o);
}

std::vector<std::string> FormatComparison(const StageComparison& c) {
  std::vector<std::string> lines;
  for (const auto& row : c.rows) {
    char diff[96];
    std::snprintf(diff, sizeof diff, "%+.4f [%+.4f, %+.4f]", row.difference.estimate, row.difference.lo,
                  row.difference.hi);
    const char* verdict = row.difference.lo > 0   ? "above 0"
                          : row.difference.hi < 0 ? "below 0"
                                                  : "contains 0";
    lines.push_back("pass@" + std::to_string(row.k) + ": base " + FormatInterval(row.base) + ", new " +
                    FormatInterval(row.next) + ", difference " + diff + " (" + verdict + ")");
  }
  return lines;
}

}  // namespace dice::training
