// `dice train sweep` (template sweeps into a cache): see dice/training/sweep.h.
#include "dice/training/sweep.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "dice/cache/store.h"
#include "dice/generator/templates.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/core/task.h"
#include "dice/runtime/tuner.h"
#include "dice/training/files.h"

namespace dice::training {

Expected<std::vector<SweepEntry>> ReadSweepCatalog(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  auto j = nlohmann::json::parse(*text, nullptr, false);
  auto corrupt = [&](const std::string& where, const std::string& why) {
    return Status(StatusCode::kCorrupt, "sweep catalog " + path + ": " + where + ": " + why);
  };
  if (j.is_discarded() || !j.is_array()) return corrupt("top level", "not a JSON array");
  std::vector<SweepEntry> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    std::string where = "entry " + std::to_string(i);
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("ir") || !e["ir"].is_string() ||
        !e.contains("shapes") || !e["shapes"].is_array()) {
      return corrupt(where, "needs string \"name\", string \"ir\" and array \"shapes\"");
    }
    SweepEntry s;
    s.name = e["name"].get<std::string>();
    where += " (" + s.name + ")";
    auto graph = ir::Parse(e["ir"].get<std::string>());
    if (!graph.ok()) return corrupt(where, graph.status().message());
    DICE_RETURN_IF_ERROR(ir::Validate(*graph).WithContext("sweep catalog " + path + ": " + where));
    for (const auto& set : e["shapes"]) {
      if (!set.is_array() || set.size() != graph->inputs.size()) {
        return corrupt(where, "each shape set needs one spec per graph input (" +
                                  std::to_string(graph->inputs.size()) + ")");
      }
      std::vector<ir::TensorSpec> specs;
      for (size_t k = 0; k < set.size(); ++k) {
        if (!set[k].is_string()) return corrupt(where, "a spec is not a string");
        auto spec = ir::ParseInputSpec(set[k].get<std::string>());
        if (!spec.ok()) return corrupt(where, spec.status().message());
        if (static_cast<int>(spec->shape.size()) != graph->inputs[k].rank || spec->dtype != graph->inputs[k].dtype) {
          return corrupt(where, "spec " + set[k].get<std::string>() + " does not match input %" + std::to_string(k));
        }
        specs.push_back(*spec);
      }
      s.shapes.push_back(std::move(specs));
    }
    if (s.shapes.empty()) return corrupt(where, "no shape set");
    s.graph = std::move(*graph);
    out.push_back(std::move(s));
  }
  if (out.empty()) return corrupt("top level", "no entry");
  return out;
}

Expected<SweepReport> RunSweep(const SweepOptions& o, const std::function<void(const std::string&)>& log_fn) {
  auto log = [&](const std::string& line) {
    if (log_fn) log_fn(line);
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto catalog = ReadSweepCatalog(o.catalog_path);
  if (!catalog.ok()) return catalog.status();
  std::set<std::string> only;
  std::stringstream names(o.only);
  for (std::string n; std::getline(names, n, ',');) {
    if (!n.empty()) only.insert(n);
  }
  for (const auto& n : only) {
    bool found = false;
    for (const auto& e : *catalog) found |= e.name == n;
    if (!found) return Status(StatusCode::kInvalidArgument, "--only: no entry named '" + n + "' in " + o.catalog_path);
  }
  auto store = cache::Store::Open(o.cache_db);
  if (!store.ok()) return store.status().WithContext("--cache-db " + o.cache_db);

  SweepReport report;
  auto device = runtime::QueryDevice(o.device);
  report.compile_only = o.compile_only || !device.ok();
  if (!report.compile_only) report.gpu = device->name;
  log(report.compile_only ? "sweep: compile-only (" +
                                (o.compile_only ? std::string("--compile-only") : device.status().message()) +
                                "): candidates are generated and compiled with NVRTC, nothing is stored"
                          : "sweep: tuning on " + report.gpu + " into " + o.cache_db);
  runtime::TuneOptions to;
  to.max_candidates = o.max_candidates;
  to.budget_s = o.budget_s;
  to.compile_only = report.compile_only;
  to.device = o.device;
  runtime::Tuner tuner(store->get(), {std::make_shared<generator::TemplateGenerator>()}, to);
  const TargetInfo target = runtime::TargetForDevice(o.device);
  for (const auto& e : *catalog) {
    if (!only.empty() && !only.count(e.name)) continue;
    for (const auto& specs : e.shapes) {
      SweepRow row;
      row.name = e.name;
      for (size_t k = 0; k < specs.size(); ++k) row.shapes += (k ? ";" : "") + specs[k].ToString();
      ++report.tasks;
      auto task = Task::Make(e.graph, specs, target);
      if (!task.ok()) {
        log("sweep: " + e.name + " " + row.shapes + ": " + task.status().message());
        continue;
      }
      auto r = tuner.Tune(*task);
      if (!r.ok()) {
        log("sweep: " + e.name + " " + row.shapes + ": tuning failed: " + r.status().ToString());
        continue;
      }
      row.tried = r->tried;
      row.compiled = r->compiled;
      row.verified = r->verified;
      row.baseline_us = r->baseline_us;
      row.best_us = r->best_us;
      row.speedup = r->speedup;
      row.winner_origin = r->winner_origin;
      row.from_cache = r->from_cache;
      report.compiled += r->compiled;
      if (!r->winner_origin.empty()) ++report.winners;
      char buf[160];
      if (report.compile_only) {
        std::snprintf(buf, sizeof(buf), "tried %d compiled %d (compile-only: not verified or timed)", r->tried,
                      r->compiled);
      } else if (!r->winner_origin.empty()) {
        std::snprintf(buf, sizeof(buf), "tried %d compiled %d verified %d baseline %.2f us best %.2f us speedup %.2fx",
                      r->tried, r->compiled, r->verified, r->baseline_us, r->best_us, r->speedup);
      } else {
        // No winner: best_us/speedup are 0 by contract; print the fastest
        // timed candidate instead, so the row does not read as a 0 us kernel.
        double fastest = 0;
        for (const auto& c : r->outcomes) {
          if (c.time_us > 0 && (fastest == 0 || c.time_us < fastest)) fastest = c.time_us;
        }
        std::snprintf(buf, sizeof(buf), "tried %d compiled %d verified %d baseline %.2f us; no winner (fastest %.2f us)",
                      r->tried, r->compiled, r->verified, r->baseline_us, fastest);
      }
      log("sweep: " + e.name + " " + row.shapes + ": " + buf + (r->from_cache ? " (cached)" : "") +
          (r->winner_origin.empty() ? "" : " " + r->winner_origin));
      report.rows.push_back(std::move(row));
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log("sweep: " + std::to_string(report.tasks) + " tasks, " + std::to_string(report.compiled) + " candidates compiled, " +
      std::to_string(report.winners) + " winners" +
      (report.compile_only ? " (compile-only: none stored; run on a GPU to get winners for a dataset)"
       : report.winners > 0 ? "; next: dice train dataset --cache-db " + o.cache_db + " --out cuke.jsonl"
                            : ""));
  return report;
}

}  // namespace dice::training
