// `dice warmup` (cli/warmup.h).
#include "warmup.h"

#include <torch/cuda.h>
#include <torch/script.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dice/cache/store.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/local_device.h"
#include "dice/core/ir.h"
#include "dice/core/log.h"
#include "dice/torch_ext/optimize.h"
#include "model_inputs.h"
#include "progress.h"

namespace dice::cli {
namespace {

struct WarmupCommand {
  std::string model_path, shard, cache_dir;  // shard "": from the launcher's environment (ShardFromEnv)
  std::vector<std::string> sets;
  double budget_s = 60;
  int max_candidates = 16;
  uint64_t seed = 0;
  bool require_gpu = false;
};

// "i/n" with 0 <= i < n.
bool ParseShard(const std::string& text, int* index, int* count) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 >= text.size() || text.size() > 12) return false;
  for (size_t k = 0; k < text.size(); ++k) {
    if (k != slash && (text[k] < '0' || text[k] > '9')) return false;
  }
  *index = std::stoi(text.substr(0, slash));
  *count = std::stoi(text.substr(slash + 1));
  return *count >= 1 && *index < *count;
}

// Where a shard came from, for the start-up line.
struct Shard {
  int index = 0, count = 1;
  std::string source;  ///< "--shard", "RANK/WORLD_SIZE (torchrun)", "SLURM_PROCID/SLURM_NTASKS (Slurm)" or "" (default 0/1)
};

// The shard from a launcher's environment when --shard is absent: torchrun's
// RANK/WORLD_SIZE first (under Slurm, torchrun's global rank is the one that
// counts), then Slurm's SLURM_PROCID/SLURM_NTASKS, else 0/1. Errors
// (kInvalidArgument) name the variable: one of a pair set without the
// other, a value that is not a non-negative integer, a count of 0 or a rank
// not below the count.
Expected<Shard> ShardFromEnv() {
  const std::pair<const char*, const char*> launchers[] = {{"RANK", "WORLD_SIZE"}, {"SLURM_PROCID", "SLURM_NTASKS"}};
  const char* names[] = {"torchrun", "Slurm"};
  for (int l = 0; l < 2; ++l) {
    const auto [rank_var, size_var] = launchers[l];
    const char* rank = std::getenv(rank_var);
    const char* size = std::getenv(size_var);
    if (rank == nullptr && size == nullptr) continue;
    const std::string pair = std::string(rank_var) + "/" + size_var + " (" + names[l] + ")";
    if (rank == nullptr || size == nullptr) {
      return Status(StatusCode::kInvalidArgument, std::string(rank == nullptr ? size_var : rank_var) + " is set but " +
                                                      (rank == nullptr ? rank_var : size_var) +
                                                      " is not: set both, or give --shard i/n");
    }
    Shard s;
    s.source = pair;
    if (!runtime::ParseLauncherInt(rank, &s.index)) {
      return Status(StatusCode::kInvalidArgument,
                    std::string(rank_var) + "='" + rank + "' is not a non-negative integer (shard index, " + pair + ")");
    }
    if (!runtime::ParseLauncherInt(size, &s.count) || s.count < 1) {
      return Status(StatusCode::kInvalidArgument,
                    std::string(size_var) + "='" + size + "' is not a positive integer (shard count, " + pair + ")");
    }
    if (s.index >= s.count) {
      return Status(StatusCode::kInvalidArgument, std::string(rank_var) + "=" + rank + " is not below " + size_var +
                                                      "=" + size + " (" + pair + ")");
    }
    return s;
  }
  return Shard{};
}

// One shape set "8x4096:f32,4096:f32" -> specs (errors name the --input, model_inputs.h).
Expected<std::vector<InputSpec>> ParseSet(const std::string& set) {
  std::vector<InputSpec> specs;
  size_t begin = 0;
  while (begin <= set.size()) {
    const size_t comma = set.find(',', begin);
    const std::string one = set.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    auto spec = ParseInputFlag(one, set);
    if (!spec.ok()) return spec.status();
    specs.push_back(*spec);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return specs;
}

std::string Last(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// The model loads and every set fits its forward() (model_inputs.h): checked
// before any set is tuned, on the CPU. Returns the exit code, kExitOk when all fit.
int CheckModelTakesEverySet(const WarmupCommand& c, const std::vector<std::vector<InputSpec>>& sets) {
  torch::jit::Module probe;
  try {
    probe = torch::jit::load(c.model_path, c10::Device(c10::kCPU));
  } catch (const std::exception& e) {
    return Fail(kExitBadInput, "cannot load TorchScript model '" + c.model_path + "': " + TorchErrorCause(e));
  }
  for (size_t k = 0; k < sets.size(); ++k) {
    if (Status fits = CheckInputsFitForward(probe, sets[k], InputFlags({c.sets[k]})); !fits.ok()) {
      return Fail(kExitBadInput, fits.message());
    }
  }
  return kExitOk;
}

int Warmup(const WarmupCommand& c) {
  Shard from;
  if (!c.shard.empty()) {
    if (!ParseShard(c.shard, &from.index, &from.count)) {
      return Fail(kExitBadInput, "--shard '" + c.shard + "' is not i/n with 0 <= i < n (e.g. 0/4)");
    }
  } else {
    auto env = ShardFromEnv();
    if (!env.ok()) return Fail(kExitBadInput, env.status().message());
    from = *env;
  }
  const int shard = from.index, shards = from.count;
  if (c.sets.empty()) return Fail(kExitBadInput, "no --input given (one per shape set, e.g. --input 8x4096:bf16)");
  std::vector<std::vector<InputSpec>> sets;
  for (const std::string& s : c.sets) {
    auto specs = ParseSet(s);
    if (!specs.ok()) return Fail(kExitBadInput, specs.status().message());
    sets.push_back(*specs);
  }
  if (const int rc = CheckModelTakesEverySet(c, sets); rc != kExitOk) return rc;
  // Under torchrun / Slurm each rank warms up on its own GPU (cuda:LOCAL_RANK).
  auto local = runtime::LocalDeviceFromEnv(static_cast<int>(torch::cuda::device_count()));
  if (!local.ok()) return Fail(kExitBadInput, local.status().message());
  auto device = runtime::QueryDevice(local->ordinal);
  const bool gpu = device.ok() && torch::cuda::is_available();
  if (!gpu) {
    const std::string why = device.ok() ? "PyTorch sees no CUDA device" : device.status().message();
    if (c.require_gpu) return Fail(kExitNoGpu, "no CUDA device present (" + why + ")");
    Notice(LogLevel::kWarn, "dice: no CUDA device present (%s); warming up compile-only: candidates are generated "
           "and compiled for sm_90 (NVRTC for device form, nvcc for extension form); nothing is verified, timed or "
           "cached as a winner.", why.c_str());
  } else {
    Notice(LogLevel::kInfo, "dice: warming up on cuda:%d, %s (%s)%s", local->ordinal, device->name.c_str(),
           device->arch.c_str(), local->source.empty() ? "" : (" from " + local->source).c_str());
  }
  int mine = 0;
  for (size_t k = 0; k < sets.size(); ++k) mine += static_cast<int>(k % static_cast<size_t>(shards)) == shard;
  Notice(LogLevel::kInfo, "dice: %zu shape set(s), shard %d/%d takes %d%s", sets.size(), shard, shards, mine,
         from.source.empty() ? "" : (" (shard from " + from.source + ")").c_str());

  const c10::Device dev = gpu ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local->ordinal))
                              : c10::Device(c10::kCPU);
  const auto start = std::chrono::steady_clock::now();
  int done = 0, groups = 0, winners = 0, cached = 0, failed = 0;
  bool cache_checked = false;
  for (size_t k = 0; k < sets.size(); ++k) {
    if (static_cast<int>(k % static_cast<size_t>(shards)) != shard) continue;
    const auto t0 = std::chrono::steady_clock::now();
    torch::jit::Module module;
    try {
      module = torch::jit::load(c.model_path, dev);
    } catch (const c10::Error& e) {
      return Fail(kExitBadInput, "cannot load TorchScript model '" + c.model_path + "': " +
                                     Last(e.what_without_backtrace()));
    }
    module.eval();
    torch::manual_seed(c.seed);
    std::vector<c10::IValue> inputs;
    try {
      for (const auto& spec : sets[k]) inputs.emplace_back(RandomInput(spec, dev));
    } catch (const std::exception& e) {  // e.g. more bytes than the device has
      return Fail(kExitBadInput, "--input '" + c.sets[k] + "': cannot allocate the inputs on " + dev.str() + ": " +
                                     TorchErrorCause(e));
    }
    try {
      torch::NoGradGuard no_grad;
      module.forward(inputs);
    } catch (const std::exception& e) {  // a c10::Error, or the interpreter's own (traceback cut to its cause)
      const std::string cause = TorchErrorCause(e);
      const std::string hint = RunFailureHint(sets[k], cause);
      return Fail(kExitBadInput, "--input '" + c.sets[k] + "': the model does not run on these inputs: " + cause +
                                     (hint.empty() ? "" : " (" + hint + ")"));
    }
    // The cache once the first set has run: opening it creates it, and a
    // rejected command leaves nothing behind.
    if (!cache_checked) {
      const std::string dir = c.cache_dir.empty() ? cache::DefaultCacheDir() : c.cache_dir;
      auto store = cache::Store::Open(cache::DatabasePath(dir));
      if (!store.ok()) return Fail(kExitBadInput, "kernel cache unusable: " + store.status().message());
      UseCacheDirForBuilds(c.cache_dir);
      cache_checked = true;
    }
    auto env = torch_ext::Options::FromEnv();
    torch_ext::Options options = env.ok() ? *env : torch_ext::Options{};
    if (!c.cache_dir.empty()) options.cache_dir = c.cache_dir;
    options.example_inputs = inputs;
    options.mode = torch_ext::Mode::kCache;
    options.tune.compile_only = !gpu;
    options.tune.budget_s = c.budget_s;
    options.tune.max_candidates = c.max_candidates;
    auto report = torch_ext::optimize(module, options);
    if (!report.ok()) return Fail(kExitFailure, "--input '" + c.sets[k] + "': " + report.status().message());
    for (const auto& w : report->warnings) Warn(w);
    // Each group's progress, as "[i/n] set k: group 1/2 compile: ..." (cli/progress.h).
    ProgressLine progress;
    const std::string prefix = "[" + std::to_string(done + 1) + "/" + std::to_string(mine) + "] set " +
                               std::to_string(k + 1) + ": ";
    std::optional<TuneHeartbeat> heartbeat(std::in_place, progress, prefix);  // lines through long nvcc builds
    auto tuned = torch_ext::TuneGroups(module, inputs, options, [&](const torch_ext::GroupTuneProgress& g) {
      heartbeat->Show(g.group, g.groups, g.tune);
    });
    heartbeat.reset();
    progress.Finish();
    ++done;
    if (!tuned.ok()) {
      ++failed;
      std::printf("[%d/%d] set %zu (%s): tuning failed: %s\n", done, mine, k + 1, c.sets[k].c_str(),
                  tuned.status().message().c_str());
      std::fflush(stdout);
      continue;
    }
    int set_winners = 0, set_cached = 0, set_compiled = 0;
    std::string best;
    for (const auto& r : *tuned) {
      set_compiled += r.compiled;
      if (!r.winner_origin.empty()) {
        ++set_winners;
        set_cached += r.from_cache;
        char buf[48];
        std::snprintf(buf, sizeof(buf), "%s%.2fx", best.empty() ? "" : " ", r.speedup);
        best += buf;
      }
    }
    groups += static_cast<int>(tuned->size());
    winners += set_winners;
    cached += set_cached;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[%d/%d] set %zu (%s): %zu group(s), %d winner(s) (%d already cached)%s%s, %d candidate(s) "
                "compiled, %.1f s\n",
                done, mine, k + 1, c.sets[k].c_str(), tuned->size(), set_winners, set_cached,
                best.empty() ? "" : ", speedups ", best.c_str(), set_compiled, secs);
    std::fflush(stdout);
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("warm-up: %d set(s), %d group(s), %d winner(s) (%d already cached), %d set(s) failed, %.1f s%s\n",
              done, groups, winners, cached, failed, total, gpu ? "" : " (compile-only: nothing cached)");
  return failed == 0 ? kExitOk : kExitFailure;
}

}  // namespace

void RegisterWarmup(CLI::App& app, CommandTable& table) {
  auto c = std::make_shared<WarmupCommand>();
  auto* cmd = app.add_subcommand("warmup", "tune a model offline for a list of input shapes (tune-sync), with progress");
  cmd->add_option("model", c->model_path, "TorchScript model file (torch.jit.save)")->required();
  cmd->add_option("--input,-i", c->sets,
                  "one shape set per flag: the forward() arguments, comma separated (8x4096:bf16[,4096:bf16]); "
                  "specs as dice tune's --input (8x128:i64:0..50257, 8x128:b8)");
  cmd->add_option("--shard", c->shard, "i/n: warm only the sets k with k % n == i (default: torchrun's "
                                       "RANK/WORLD_SIZE, else Slurm's SLURM_PROCID/SLURM_NTASKS, else 0/1)");
  cmd->add_option("--cache", c->cache_dir, kCacheFlagHelp);
  cmd->add_option("--budget-s", c->budget_s, "tuning budget per fusion group, seconds")->capture_default_str();
  cmd->add_option("--max-candidates", c->max_candidates, "candidates per generator and group")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--seed", c->seed, "seed for the random inputs");
  cmd->add_flag("--require-gpu", c->require_gpu, "exit 3 instead of running compile-only when no GPU is present");
  table.Add(cmd, [c] { return Warmup(*c); });
}

}  // namespace dice::cli
