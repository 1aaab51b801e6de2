// The CuKe builder: see dice/training/dataset.h. Torch-free.
#include "dice/training/dataset.h"

#include <cstdlib>
#include <future>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "dice/cache/store.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/core/ir.h"
#include "dice/runtime/program_judge.h"
#include "dice/training/files.h"
#include "dice/training/examples.h"
#include "dice/training/split.h"

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

// Every option check of BuildDataset. Errors: kInvalidArgument naming the flag.
Status CheckDatasetOptions(const DatasetOptions& o) {
  auto bad = [](const std::string& m) { return Status(StatusCode::kInvalidArgument, "dice train dataset: " + m); };
  if (o.cache_dbs.empty() && o.corpora.empty()) return bad("give at least one --cache-db or --corpus source");
  if (o.out_path.empty()) return bad("--out is required");
  if (!(o.min_speedup >= 0)) return bad("--min-speedup must be >= 0");
  const Status split = CheckSplitOptions({o.heldout_percent, o.validation_percent});
  if (!split.ok()) return bad(split.message());
  if (o.verify != "auto" && o.verify != "judge" && o.verify != "none") {
    return bad("--verify must be auto, judge or none, got '" + o.verify + "'");
  }
  if (o.verify_jobs < 1) return bad("--verify-jobs must be >= 1");
  return Status::Ok();
}

// The items of a corpus file: a JSON array, else JSONL (a line that is not
// JSON becomes a null item, counted malformed later). Errors: those of
// ReadFile; kCorrupt when no line is JSON.
Expected<std::vector<nlohmann::json>> ReadCorpusItems(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  std::vector<nlohmann::json> items;
  auto whole = nlohmann::json::parse(*text, nullptr, false);
  if (!whole.is_discarded() && whole.is_array()) {
    for (auto& j : whole) items.push_back(std::move(j));
    return items;
  }
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
  return items;
}

// The string field `k` of corpus item `j`, or null when absent or not a string.
const std::string* StringField(const nlohmann::json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get_ptr<const std::string*>() : nullptr;
}

// A corpus item's level: the file's (integer or digit string) when in 1..3,
// else from the calls in the reference's forward.
int CorpusLevel(const nlohmann::json& j, const std::string& reference) {
  int level = 0;
  if (j.contains("level") && j["level"].is_number_integer()) level = j["level"].get<int>();
  if (j.contains("level") && j["level"].is_string()) level = std::atoi(j["level"].get<std::string>().c_str());
  if (level < 1 || level > 3) level = LevelFromOps(ForwardCalls(reference));
  return level;
}

// The cache winner `w` (graph and specs parsed) as a "device" example.
CukeExample DeviceExample(const cache::WinnerRecord& w, const ir::Graph& graph,
                          const std::vector<ir::TensorSpec>& specs, const std::string& db) {
  CukeExample e;
  e.id = "cache:" + w.task_key;
  e.kind = "device";
  e.level = LevelFromOps(static_cast<int64_t>(graph.ops.size()));
  e.source = "cache:" + db;
  e.reference = ir::RenderReferenceProgram(graph, specs, "cuda");
  e.prefix = "// device form: extern \"C\" __global__ kernels, launched by the plan below\n";
  e.middle = w.source;
  e.suffix = "// launch plan: " + w.launch_plan_json + "\n";
  e.graph = w.graph_canonical;  // what the device-form judge (reward.h) verifies an answer against
  e.input_specs = w.input_specs;
  e.launch_plan = w.launch_plan_json;
  e.speedup = w.speedup;
  e.verified = "cache:" + (w.gpu_name.empty() ? w.arch : w.gpu_name);
  e.hash = NormalisedSourceHash(w.source);
  return e;
}

// A corpus pair waiting to be judged (when judging), so the output keeps
// the sources' order.
struct Pending {
  CukeExample e2e;
  std::optional<CukeExample> infill;
  std::string infill_program;  // prefix + middle + suffix when it differs from the e2e program
  std::optional<runtime::ProgramVerdict> e2e_verdict, infill_verdict;
  bool task = false;  // an answer-less task (keep_tasks): nothing to verify, kept as is
};

// One BuildDataset run. Run() is the pipeline: cache winners (kept at
// once), corpus items (pending), the judge over the pending pairs (when
// judging), the verdict and speedup filters, then the output file. Every
// kept example passes Keep (dedupe, task hash, split, difficulty).
class DatasetBuilder {
 public:
  DatasetBuilder(const DatasetOptions& o, const std::function<void(const std::string&)>& log_fn)
      : o_(o), log_fn_(log_fn) {}

  // Errors: see BuildDataset (dataset.h); the options are checked already.
  Expected<DatasetReport> Run() {
    DecideVerification();
    for (const auto& db : o_.cache_dbs) DICE_RETURN_IF_ERROR(ReadCache(db));
    for (const auto& path : o_.corpora) {
      auto items = ReadCorpusItems(path);
      if (!items.ok()) return items.status();
      int64_t item = 0;
      for (const auto& j : *items) {
        ++r_.read;
        AddCorpusItem(path, j, ++item);
      }
    }
    if (judge_) DICE_RETURN_IF_ERROR(JudgePending());
    for (auto& p : pending_) {
      if (p.task) {
        Keep(std::move(p.e2e));
        continue;
      }
      Admit(p.e2e, p.e2e_verdict);
      if (p.infill) Admit(*p.infill, p.infill_program.empty() ? p.e2e_verdict : p.infill_verdict);
    }
    DICE_RETURN_IF_ERROR(Write());
    return r_;
  }

 private:
  void Log(const std::string& line) const {
    if (log_fn_) log_fn_(line);
  }

  // Whether corpus pairs are judged here (verify, and a GPU for "auto"),
  // and the report's note that says so.
  void DecideVerification() {
    r_.gpu_present = runtime::QueryDevice(0).ok();
    judge_ = o_.verify == "judge" || (o_.verify == "auto" && r_.gpu_present);
    if (judge_) {
      r_.verification_note = "imported pairs are re-verified and timed here: KernelBench protocol on " +
                             o_.verify_device + " (dice judge), " + std::to_string(o_.verify_jobs) +
                             " at a time; cache winners keep the speedup measured where they were tuned";
    } else {
      r_.verification_note =
          std::string(r_.gpu_present ? "--verify none" : "no GPU here") +
          ": imported pairs are not re-verified or timed and are marked unverified-here; cache winners keep the "
          "speedup measured where they were tuned";
    }
    Log("dataset: " + r_.verification_note);
    judge_options_.device = o_.verify_device;
    judge_options_.timeout_s = o_.verify_timeout_s;
  }

  // Dedupes `e` by kind and answer hash, then stamps its task hash, its
  // op-chain (a cache winner's group), split and difficulty and adds it to
  // the output. The split key is the op-chain when there is one, else the
  // task hash (split.h).
  void Keep(CukeExample e) {
    if (!seen_.insert(e.kind + ":" + e.hash).second) {
      ++r_.duplicates;
      return;
    }
    e.task_hash = NormalisedSourceHash(e.reference);
    if (IsDeviceKind(e.kind) && !e.graph.empty()) {
      auto graph = ir::Parse(e.graph);
      if (graph.ok()) e.op_chain = OpChainKey(*graph);
    }
    e.split = SplitOfKey(e.op_chain.empty() ? "task:" + e.task_hash : e.op_chain,
                         SplitOptions{o_.heldout_percent, o_.validation_percent});
    e.difficulty = DifficultyOf(e.level);
    out_.push_back(std::move(e));
  }

  // Source (a): every verified winner of the cache `db` at min_speedup as a
  // "device" example and its "device_infill" splits. Errors: those of the
  // store, prefixed with the cache's path.
  Status ReadCache(const std::string& db) {
    auto store = cache::Store::Open(db);
    if (!store.ok()) return Status(store.status().code(), "cache " + db + ": " + store.status().message());
    auto winners = (*store)->ListWinners();
    if (!winners.ok()) return Status(winners.status().code(), "cache " + db + ": " + winners.status().message());
    for (const auto& summary : *winners) {
      ++r_.read;
      // ListWinners leaves out source and cubin (it serves `dice cache ls`): read the whole record.
      auto full = (*store)->GetWinner(summary.task_key);
      if (!full.ok()) return Status(full.status().code(), "cache " + db + ": " + full.status().message());
      if (!full->has_value()) continue;  // removed since the listing
      const cache::WinnerRecord& w = **full;
      auto graph = ir::Parse(w.graph_canonical);
      auto specs = ParseInputSpecs(w.input_specs);
      if (!graph.ok() || !specs.ok() || w.source.empty()) {
        ++r_.malformed;
        Log("dataset: cache " + db + " winner " + w.task_key.substr(0, 16) + " is malformed: " +
            (!graph.ok() ? "graph: " + graph.status().message()
                         : !specs.ok() ? specs.status().message() : std::string("no source")));
        continue;
      }
      if (!w.verified) {
        ++r_.unverified_winner;
        continue;
      }
      if (w.speedup < o_.min_speedup) {
        ++r_.below_speedup;
        continue;
      }
      CukeExample e = DeviceExample(w, *graph, *specs, db);
      // Kernel infilling tasks from the same winner (examples.h
      // SplitKernelForInfill): a few lines of its kernels to fill in,
      // judged in the device form like the whole kernel.
      for (auto& split : SplitKernelForInfill(w.source, o_.device_infill_spans, o_.device_infill_max_bytes)) {
        CukeExample in = e;
        in.kind = "device_infill";
        in.id = e.id + "@" + std::to_string(split.prefix.size());
        in.hash = e.hash + ":" + std::to_string(split.prefix.size());
        in.preamble = std::move(split.preamble);
        in.prefix = std::move(split.prefix);
        in.middle = std::move(split.middle);
        in.suffix = std::move(split.suffix);
        Keep(std::move(in));
      }
      Keep(std::move(e));
    }
    return Status::Ok();
  }

  // Source (b): corpus item number `item` of `path` as a pending "e2e" pair
  // (and "infill" when it has prefix/middle/suffix), or an answer-less task
  // (kept with keep_tasks); a malformed item is counted and logged.
  void AddCorpusItem(const std::string& path, const nlohmann::json& j, int64_t item) {
    const std::string *ref = StringField(j, "pytorch_code"), *cuda = StringField(j, "cuda_code");
    // The id is "id" (infilling set) or "idx" (end-to-end set).
    const char* id_key = j.is_object() && j.contains("id") ? "id" : "idx";
    if (!j.is_object() || !j.contains(id_key) || ref == nullptr || cuda == nullptr || ref->empty()) {
      ++r_.malformed;
      const std::string which = j.is_object() && j.contains(id_key) ? " " + j[id_key].dump() : "";
      Log("dataset: corpus " + path + " item " + std::to_string(item) + which + " is malformed: " +
          (j.is_null() ? std::string("not valid JSON")
           : !j.is_object() ? std::string("not a JSON object")
           : !j.contains(id_key) ? std::string("no \"id\" or \"idx\"")
           : ref == nullptr ? std::string("\"pytorch_code\" is missing or not a string")
           : cuda == nullptr ? std::string("\"cuda_code\" is missing or not a string")
                             : std::string("\"pytorch_code\" is empty")));
      return;
    }
    const std::string id = j[id_key].is_string() ? j[id_key].get<std::string>() : j[id_key].dump();
    const int level = CorpusLevel(j, *ref);
    if (cuda->empty()) {  // a task without a reference solution: no pair to learn from
      ++r_.no_answer;
      if (!o_.keep_tasks) return;
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
      pending_.push_back(std::move(p));
      return;
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
    const std::string *prefix = StringField(j, "prefix"), *middle = StringField(j, "middle"),
                      *suffix = StringField(j, "suffix");
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
    pending_.push_back(std::move(p));
  }

  // Judges every pending pair's program (and a differing infill program)
  // against its reference. Every program is a child process (a load_inline
  // build): verify_jobs at once. Errors: those of JudgeProgram, naming the item.
  Status JudgePending() {
    struct Job {
      size_t index;
      bool infill;
      std::future<Expected<runtime::ProgramVerdict>> verdict;
    };
    std::vector<std::pair<size_t, bool>> work;
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (pending_[i].task) continue;
      work.emplace_back(i, false);
      if (!pending_[i].infill_program.empty()) work.emplace_back(i, true);
    }
    const size_t jobs = static_cast<size_t>(o_.verify_jobs);
    for (size_t first = 0; first < work.size(); first += jobs) {
      std::vector<Job> running;
      for (size_t w = first; w < std::min(work.size(), first + jobs); ++w) {
        const auto [i, infill] = work[w];
        const std::string& program = infill ? pending_[i].infill_program : pending_[i].e2e.program;
        running.push_back({i, infill, std::async(std::launch::async, [this, i = i, program_ptr = &program] {
                             return runtime::JudgeProgram(pending_[i].e2e.reference, *program_ptr, judge_options_);
                           })});
      }
      for (auto& job : running) {
        auto v = job.verdict.get();
        if (!v.ok()) return v.status().WithContext("verifying " + pending_[job.index].e2e.id);
        (job.infill ? pending_[job.index].infill_verdict : pending_[job.index].e2e_verdict) = *v;
      }
      Log("dataset: verified " + std::to_string(std::min(work.size(), first + jobs)) + "/" +
          std::to_string(work.size()) + " programs");
    }
    return Status::Ok();
  }

  // The verdict (when judged: a failure is dropped, a pass gets the measured
  // speedup), the speedup filter, then Keep.
  void Admit(CukeExample e, const std::optional<runtime::ProgramVerdict>& v) {
    if (judge_) {
      if (!v->correct) {
        ++r_.failed_verification;
        Log("dataset: " + e.id + " (" + e.kind + ") fails verification: " + v->outcome + ": " +
            v->error.substr(0, v->error.find('\n')).substr(0, 300));
        return;
      }
      ++r_.verified;
      e.speedup = v->speedup;
      e.verified = "judge:" + o_.verify_device;
    }
    if (e.speedup && *e.speedup < o_.min_speedup) {
      ++r_.below_speedup;
      return;
    }
    if (!e.speedup) ++r_.not_timed;
    Keep(std::move(e));
  }

  // The kept examples as JSONL at out_path (atomically; its directory
  // made), counted by kind, split, op-chain and level. Errors: kIoError.
  Status Write() {
    std::string body;
    std::map<std::string, std::set<std::string>> chains;  // by split
    for (const char* split : {"train", "validation", "heldout"}) chains[split];
    for (const auto& e : out_) {
      ++r_.split_kinds[e.split][e.kind];
      if (!e.op_chain.empty()) chains[e.split].insert(e.op_chain);
      r_.validation += e.split == "validation";
      body += e.ToJsonLine() + "\n";
      ++r_.written;
      r_.infill += e.kind == "infill";
      r_.e2e += e.kind == "e2e";
      r_.device += e.kind == "device";
      r_.device_infill += e.kind == "device_infill";
      r_.task += e.kind == "task";
      r_.heldout += e.split == "heldout";
      r_.level_counts[e.level - 1]++;
    }
    for (const auto& [split, set] : chains) r_.split_op_chains[split] = static_cast<int64_t>(set.size());
    const size_t slash = o_.out_path.rfind('/');
    if (slash != std::string::npos && slash > 0) DICE_RETURN_IF_ERROR(MakeDirs(o_.out_path.substr(0, slash)));
    return WriteFileAtomic(o_.out_path, body);
  }

  const DatasetOptions& o_;
  const std::function<void(const std::string&)>& log_fn_;
  DatasetReport r_;
  bool judge_ = false;  // corpus pairs are judged here
  runtime::ProgramJudgeOptions judge_options_;
  std::vector<Pending> pending_;  // corpus items in source order
  std::vector<CukeExample> out_;  // kept, in output order
  std::set<std::string> seen_;    // kind:hash of every kept example
};

}  // namespace

std::string NormalisedSourceHash(const std::string& source) { return ir::Sha256Hex(StripAndCollapse(source)); }

Expected<DatasetReport> BuildDataset(const DatasetOptions& o, const std::function<void(const std::string&)>& log_fn) {
  DICE_RETURN_IF_ERROR(CheckDatasetOptions(o));
  return DatasetBuilder(o, log_fn).Run();
}

}  // namespace dice::training
