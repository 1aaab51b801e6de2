// The CuKe builder: see dice/training/dataset.h. Torch-free.
#include "dice/training/dataset.h"

#include <cstdlib>
#include <future>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "dice/cache/store.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/core/ir.h"
#include "dice/runtime/program_judge.h"
#include "dice/training/files.h"
#include "dice/training/examples.h"

namespace dice::training {
namespace {

std::string StripAndCollapse(const std::string& s) {
  std::string out;
  bool space = false;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 2, "//") == 0) {
      i = s.find('\n', i);
      if (i == std::string::npos) break;
      continue;
    }
    if (s.compare(i, 2, "/*") == 0) {
      i = s.find("*/", i + 2);
      if (i == std::string::npos) break;
      i += 2;
      continue;
    }
    const char c = s[i++];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      space = true;
      continue;
    }
    if (space && !out.empty()) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

int LevelFromOps(int64_t ops) { return ops <= 1 ? 1 : ops <= 6 ? 2 : 3; }
const char* DifficultyOf(int level) { return level == 1 ? "single_op" : level == 2 ? "fused_chain" : "network"; }

// Calls in the reference's forward body: torch.*, F.*, nn.*, self.<attr>(.
int64_t ForwardCalls(const std::string& program) {
  size_t at = program.find("def forward");
  if (at == std::string::npos) return 1;
  size_t end = program.find("\ndef ", at + 1);
  const size_t cls = program.find("\nclass ", at + 1);
  if (cls != std::string::npos && (end == std::string::npos || cls < end)) end = cls;
  const std::string body = program.substr(at, end == std::string::npos ? std::string::npos : end - at);
  int64_t n = 0;
  for (const char* p : {"torch.", "F.", "nn.", "self."}) {
    for (size_t k = body.find(p); k != std::string::npos; k = body.find(p, k + 1)) {
      if (k > 0 && (std::isalnum(static_cast<unsigned char>(body[k - 1])) || body[k - 1] == '_')) continue;
      size_t j = k + std::string(p).size();
      while (j < body.size() && (std::isalnum(static_cast<unsigned char>(body[j])) || body[j] == '_' || body[j] == '.')) ++j;
      if (j < body.size() && body[j] == '(') ++n;
    }
  }
  return std::max<int64_t>(1, n);
}

bool InHeldout(const std::string& task_hash, double percent) {
  // First 8 hex digits as a fraction of 2^32.
  const double x = static_cast<double>(std::stoul(task_hash.substr(0, 8), nullptr, 16)) / 4294967296.0;
  return x * 100.0 < percent;
}

}  // namespace

std::string NormalisedSourceHash(const std::string& source) { return ir::Sha256Hex(StripAndCollapse(source)); }

Expected<DatasetReport> BuildDataset(const DatasetOptions& o, const std::function<void(const std::string&)>& log_fn) {
  auto log = [&](const std::string& line) {
    if (log_fn) log_fn(line);
  };
  auto bad = [](const std::string& m) { return Status(StatusCode::kInvalidArgument, "dice train dataset: " + m); };
  if (o.cache_dbs.empty() && o.corpora.empty()) return bad("give at least one --cache-db or --corpus source");
  if (o.out_path.empty()) return bad("--out is required");
  if (!(o.min_speedup >= 0)) return bad("--min-speedup must be >= 0");
  if (!(o.heldout_percent >= 0 && o.heldout_percent <= 100)) return bad("--heldout-percent must be in [0, 100]");
  if (o.verify != "auto" && o.verify != "judge" && o.verify != "none") {
    return bad("--verify must be auto, judge or none, got '" + o.verify + "'");
  }
  if (o.verify_jobs < 1) return bad("--verify-jobs must be >= 1");
  DatasetReport r;
  r.gpu_present = QueryDevice(0).ok();
  const bool judge = o.verify == "judge" || (o.verify == "auto" && r.gpu_present);
  if (judge) {
    r.verification_note = "imported pairs are re-verified and timed here: KernelBench protocol on " + o.verify_device +
                          " (dice judge), " + std::to_string(o.verify_jobs) + " at a time; cache winners keep the "
                          "speedup measured where they were tuned";
  } else {
    r.verification_note =
        std::string(r.gpu_present ? "--verify none" : "no GPU here") +
        ": imported pairs are not re-verified or timed and are marked unverified-here; cache winners keep the "
        "speedup measured where they were tuned";
  }
  log("dataset: " + r.verification_note);
  ProgramJudgeOptions judge_options;
  judge_options.device = o.verify_device;
  judge_options.timeout_s = o.verify_timeout_s;
  // Corpus pairs wait here until they are judged (when judging), so the
  // output keeps the sources' order.
  struct Pending {
    CukeExample e2e;
    std::optional<CukeExample> infill;
    std::string infill_program;  // prefix + middle + suffix when it differs from the e2e program
    std::optional<ProgramVerdict> e2e_verdict, infill_verdict;
    bool task = false;  // an answer-less task (keep_tasks): nothing to verify, kept as is
  };
  std::vector<Pending> pending;

  std::vector<CukeExample> out;
  std::set<std::string> seen;
  auto keep = [&](CukeExample e) {
    if (!seen.insert(e.kind + ":" + e.hash).second) {
      ++r.duplicates;
      return;
    }
    e.task_hash = NormalisedSourceHash(e.reference);
    e.split = InHeldout(e.task_hash, o.heldout_percent) ? "heldout" : "train";
    e.difficulty = DifficultyOf(e.level);
    out.push_back(std::move(e));
  };

  for (const auto& db : o.cache_dbs) {
    auto store = cache::Store::Open(db);
    if (!store.ok()) return Status(store.status().code(), "cache " + db + ": " + store.status().message());
    auto winners = (*store)->ListWinners();
    if (!winners.ok()) return Status(winners.status().code(), "cache " + db + ": " + winners.status().message());
    for (const auto& summary : *winners) {
      ++r.read;
      // ListWinners leaves out source and cubin (it serves `dice cache ls`): read the whole record.
      auto full = (*store)->GetWinner(summary.task_key);
      if (!full.ok()) return Status(full.status().code(), "cache " + db + ": " + full.status().message());
      if (!full->has_value()) continue;  // removed since the listing
      const cache::WinnerRecord& w = **full;
      auto graph = ir::Parse(w.graph_canonical);
      auto specs = ParseInputSpecs(w.input_specs);
      if (!graph.ok() || !specs.ok() || w.source.empty()) {
        ++r.malformed;
        log("dataset: cache " + db + " winner " + w.task_key.substr(0, 16) + " is malformed: " +
            (!graph.ok() ? "graph: " + graph.status().message()
                         : !specs.ok() ? specs.status().message() : std::string("no source")));
        continue;
      }
      if (!w.verified) {
        ++r.unverified_winner;
        continue;
      }
      if (w.speedup < o.min_speedup) {
        ++r.below_speedup;
        continue;
      }
      CukeExample e;
      e.id = "cache:" + w.task_key;
      e.kind = "device";
      e.level = LevelFromOps(static_cast<int64_t>(graph->ops.size()));
      e.source = "cache:" + db;
      e.reference = ir::RenderReferenceProgram(*graph, *specs, "cuda");
      e.prefix = "// device form: extern \"C\" __global__ kernels, launched by the plan below\n";
      e.middle = w.source;
      e.suffix = "// launch plan: " + w.launch_plan_json + "\n";
      e.graph = w.graph_canonical;  // what the device-form judge (reward.h) verifies an answer against
      e.input_specs = w.input_specs;
      e.launch_plan = w.launch_plan_json;
      e.speedup = w.speedup;
      e.verified = "cache:" + (w.gpu_name.empty() ? w.arch : w.gpu_name);
      e.hash = NormalisedSourceHash(w.source);
      // Kernel infilling tasks from the same winner (examples.h
      // SplitKernelForInfill): a few lines of its kernels to fill in,
      // judged in the device form like the whole kernel.
      for (auto& split : SplitKernelForInfill(w.source, o.device_infill_spans, o.device_infill_max_bytes)) {
        CukeExample in = e;
        in.kind = "device_infill";
        in.id = e.id + "@" + std::to_string(split.prefix.size());
        in.hash = e.hash + ":" + std::to_string(split.prefix.size());
        in.preamble = std::move(split.preamble);
        in.prefix = std::move(split.prefix);
        in.middle = std::move(split.middle);
        in.suffix = std::move(split.suffix);
        keep(std::move(in));
      }
      keep(std::move(e));
    }
  }

  for (const auto& path : o.corpora) {
    auto text = ReadFile(path);
    if (!text.ok()) return text.status();
    std::vector<nlohmann::json> items;
    auto whole = nlohmann::json::parse(*text, nullptr, false);
    if (!whole.is_discarded() && whole.is_array()) {
      for (auto& j : whole) items.push_back(std::move(j));
    } else {
      std::stringstream ss(*text);
      std::string line;
      int64_t valid = 0;
      while (std::getline(ss, line)) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        auto j = nlohmann::json::parse(line, nullptr, false);
        valid += !j.is_discarded();
        items.push_back(j.is_discarded() ? nlohmann::json() : std::move(j));
      }
      if (valid == 0) return Status(StatusCode::kCorrupt, "corpus " + path + " is neither a JSON array nor JSONL");
    }
    int64_t item = 0;
    for (const auto& j : items) {
      ++r.read;
      ++item;
      auto str = [&](const char* k) -> const std::string* {
        return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get_ptr<const std::string*>() : nullptr;
      };
      const std::string *ref = str("pytorch_code"), *cuda = str("cuda_code");
      // The id is "id" (infilling set) or "idx" (end-to-end set).
      const char* id_key = j.is_object() && j.contains("id") ? "id" : "idx";
      if (!j.is_object() || !j.contains(id_key) || ref == nullptr || cuda == nullptr || ref->empty()) {
        ++r.malformed;
        const std::string which = j.is_object() && j.contains(id_key) ? " " + j[id_key].dump() : "";
        log("dataset: corpus " + path + " item " + std::to_string(item) + which + " is malformed: " +
            (j.is_null() ? std::string("not valid JSON")
             : !j.is_object() ? std::string("not a JSON object")
             : !j.contains(id_key) ? std::string("no \"id\" or \"idx\"")
             : ref == nullptr ? std::string("\"pytorch_code\" is missing or not a string")
             : cuda == nullptr ? std::string("\"cuda_code\" is missing or not a string")
                               : std::string("\"pytorch_code\" is empty")));
        continue;
      }
      const std::string id = j[id_key].is_string() ? j[id_key].get<std::string>() : j[id_key].dump();
      int level = 0;
      if (j.contains("level") && j["level"].is_number_integer()) level = j["level"].get<int>();
      if (j.contains("level") && j["level"].is_string()) level = std::atoi(j["level"].get<std::string>().c_str());
      if (level < 1 || level > 3) level = LevelFromOps(ForwardCalls(*ref));
      if (cuda->empty()) {  // a task without a reference solution: no pair to learn from
        ++r.no_answer;
        if (o.keep_tasks) {
          CukeExample t;
          t.id = "corpus:" + id;
          t.kind = "task";
          t.level = level;
          t.source = "corpus:" + path;
          t.reference = *ref;
          t.verified = "unverified-here";
          t.hash = NormalisedSourceHash(*ref);
          Pending p;
          p.e2e = std::move(t);
          p.task = true;
          pending.push_back(std::move(p));
        }
        continue;
      }
      std::optional<double> speedup;
      if (j.contains("speedup") && j["speedup"].is_number()) speedup = j["speedup"].get<double>();
      CukeExample base;
      base.id = "corpus:" + id;
      base.level = level;
      base.source = "corpus:" + path;
      base.reference = *ref;
      base.speedup = speedup;
      base.verified = "unverified-here";
      Pending p;
      p.e2e = base;
      p.e2e.kind = "e2e";
      p.e2e.program = *cuda;
      p.e2e.hash = NormalisedSourceHash(*cuda);
      const std::string *prefix = str("prefix"), *middle = str("middle"), *suffix = str("suffix");
      if (middle != nullptr && !middle->empty() && suffix != nullptr) {
        CukeExample in = base;
        in.kind = "infill";
        in.prefix = prefix ? *prefix : "";
        in.middle = *middle;
        in.suffix = *suffix;
        in.hash = NormalisedSourceHash(*middle);
        const std::string assembled = in.prefix + in.middle + in.suffix;
        if (assembled != *cuda) p.infill_program = assembled;
        p.infill = std::move(in);
      }
      pending.push_back(std::move(p));
    }
  }

  if (judge) {
    // Every program is a child process (a load_inline build): verify_jobs at once.
    struct Job {
      size_t index;
      bool infill;
      std::future<Expected<ProgramVerdict>> verdict;
    };
    std::vector<std::pair<size_t, bool>> work;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (pending[i].task) continue;
      work.emplace_back(i, false);
      if (!pending[i].infill_program.empty()) work.emplace_back(i, true);
    }
    for (size_t first = 0; first < work.size(); first += static_cast<size_t>(o.verify_jobs)) {
      std::vector<Job> running;
      for (size_t w = first; w < std::min(work.size(), first + static_cast<size_t>(o.verify_jobs)); ++w) {
        const auto [i, infill] = work[w];
        const std::string& program = infill ? pending[i].infill_program : pending[i].e2e.program;
        running.push_back({i, infill, std::async(std::launch::async, [&, i, program_ptr = &program] {
                             return JudgeProgram(pending[i].e2e.reference, *program_ptr, judge_options);
                           })});
      }
      for (auto& job : running) {
        auto v = job.verdict.get();
        if (!v.ok()) return v.status().WithContext("verifying " + pending[job.index].e2e.id);
        (job.infill ? pending[job.index].infill_verdict : pending[job.index].e2e_verdict) = *v;
      }
      log("dataset: verified " + std::to_string(std::min(work.size(), first + static_cast<size_t>(o.verify_jobs))) +
          "/" + std::to_string(work.size()) + " programs");
    }
  }
  // Verdicts (when judged), the speedup filter, then dedupe (keep).
  auto admit = [&](CukeExample e, const std::optional<ProgramVerdict>& v) {
    if (judge) {
      if (!v->correct) {
        ++r.failed_verification;
        log("dataset: " + e.id + " (" + e.kind + ") fails verification: " + v->outcome + ": " +
            v->error.substr(0, v->error.find('\n')).substr(0, 300));
        return;
      }
      ++r.verified;
      e.speedup = v->speedup;
      e.verified = "judge:" + o.verify_device;
    }
    if (e.speedup && *e.speedup < o.min_speedup) {
      ++r.below_speedup;
      return;
    }
    if (!e.speedup) ++r.not_timed;
    keep(std::move(e));
  };
  for (auto& p : pending) {
    if (p.task) {
      keep(std::move(p.e2e));
      continue;
    }
    admit(p.e2e, p.e2e_verdict);
    if (p.infill) admit(*p.infill, p.infill_program.empty() ? p.e2e_verdict : p.infill_verdict);
  }

  std::string body;
  for (const auto& e : out) {
    body += e.ToJsonLine() + "\n";
    ++r.written;
    r.infill += e.kind == "infill";
    r.e2e += e.kind == "e2e";
    r.device += e.kind == "device";
    r.device_infill += e.kind == "device_infill";
    r.task += e.kind == "task";
    r.heldout += e.split == "heldout";
    r.level_counts[e.level - 1]++;
  }
  const size_t slash = o.out_path.rfind('/');
  if (slash != std::string::npos && slash > 0) DICE_RETURN_IF_ERROR(MakeDirs(o.out_path.substr(0, slash)));
  DICE_RETURN_IF_ERROR(WriteFileAtomic(o.out_path, body));
  return r;
}

}  // namespace dice::training
