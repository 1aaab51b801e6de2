// Winner resolution: loaded -> local cache -> shared server -> re-verify ->
// load (winner_resolution.h).
#include "winner_resolution.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <chrono>
#include <optional>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "dice/runtime/precision_policy.h"
#include "runtime_state.h"
#include "tune_queue.h"

namespace dice::torch_ext {
namespace {

// Winners this process has loaded, by task key and device: a cubin loaded
// into one device's context cannot be launched on another's (extension
// libraries are never unloaded; device kernels live while an op or this
// table holds them). Each remembers whether its record is reduced
// precision: Find skips such a winner when the policy now refuses it.
class LoadedWinners {
 public:
  std::optional<LoadedWinner> Find(const std::string& key, int device, bool reduced_precision_allowed) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_key_.find({key, device});
    if (it == by_key_.end() || (it->second.second && !reduced_precision_allowed)) return std::nullopt;
    return it->second.first;
  }
  void Keep(const std::string& key, int device, const LoadedWinner& winner, bool reduced_precision) {
    std::lock_guard<std::mutex> lock(mu_);
    by_key_[{key, device}] = {winner, reduced_precision};
  }

 private:
  std::mutex mu_;
  std::map<std::pair<std::string, int>, std::pair<LoadedWinner, bool>> by_key_;
};

// How often tune-sync looks again while another process holds the key's claim.
constexpr std::chrono::milliseconds kClaimPoll{1000};

// TuneNow, waiting while another process tunes the task (tune-sync blocks
// until tuned): each look serves its winner once stored, or claims the key
// once the claim is released or expired.
Expected<runtime::TuneReport> TuneWaitingForClaims(const WinnerRequest& req, const std::vector<std::string>* bytes) {
  bool told = false;
  for (;;) {
    auto rep = TuneNow(*req.task, bytes, {}, req.device);
    if (!rep.ok() || rep->claimed_by.empty()) return rep;
    if (!told) std::fprintf(stderr, "dice: %s is being tuned by %s; waiting for its winner\n", rep->description.c_str(),
                            rep->claimed_by.c_str());
    told = true;
    std::this_thread::sleep_for(kClaimPoll);
  }
}

LoadedWinners& Loaded() {
  static LoadedWinners* w = new LoadedWinners;  // leaked like the rest of the process state
  return *w;
}

Status CacheError(const Status& st) { return Status(st.code(), "cache: " + st.message()); }

// The local cache's record for `key` (null when none); `local` is set to the
// store it came from.
Expected<std::optional<cache::WinnerRecord>> ReadLocal(const std::string& key, std::shared_ptr<cache::Store>* local) {
  auto locked = LockStore();
  if (!locked.ok()) return CacheError(locked.status());
  auto w = locked->store->GetWinner(key);
  if (!w.ok()) return CacheError(w.status());
  *local = locked->store;
  return std::move(w).value();
}

// A pulled or imported entry, not yet proven on this GPU: the tuner verifies
// and times only this kernel, then the verified record is read back.
Expected<cache::WinnerRecord> Reverify(const WinnerRequest& req, const cache::WinnerRecord& rec) {
  const std::string from = "kernel from " + rec.pulled_from + " not served: ";
  if (GetRuntimeSettings().tune.compile_only)
    return Status(StatusCode::kNoDevice, from + "re-verification needs a GPU (compile-only run)");
  auto rep = TuneWaitingForClaims(req, nullptr);
  if (!rep.ok()) return Status(rep.status().code(), from + "re-verification needs a GPU: " + rep.status().message());
  if (rep->winner_origin.empty()) return Status(StatusCode::kVerifyFailed, from + "it failed re-verification on this GPU");
  auto locked = LockStore();
  auto w = locked.ok() ? locked->store->GetWinner(req.key)
                       : Expected<std::optional<cache::WinnerRecord>>(locked.status());
  if (!w.ok() || !w->has_value() || !(**w).verified)
    return Status(StatusCode::kCorrupt, "cache: re-verified winner for " + req.key + " cannot be read back");
  return std::move(**w);
}

// Once per process and key; best effort.
void RecordHit(const std::string& key) {
  auto locked = LockStore();
  if (locked.ok()) (void)locked->store->RecordHit(key);
}

// Tune-sync: tunes the missed task now. Returns "" when a winner was stored,
// else why none was.
Expected<std::string> TuneOnMiss(const WinnerRequest& req) {
  std::vector<std::string> bytes;
  if (req.captured_inputs) bytes = req.captured_inputs();
  auto rep = TuneWaitingForClaims(req, bytes.empty() ? nullptr : &bytes);
  if (!rep.ok()) return Status(rep.status().code(), "tuning failed: " + rep.status().message());
  if (!rep->winner_origin.empty()) return std::string();
  std::string why = NoWinnerText(*rep, GetRuntimeSettings().tune.margin);
  std::fprintf(stderr, "dice: tuned %s: %s\n", rep->description.c_str(), why.c_str());
  return why;
}

// An extension-form winner: the shared object is written to a private
// temporary file, dlopen'ed and its entry point kept; the library stays
// loaded for the process's lifetime.
Expected<runtime::ExtensionEntryFn> LoadExtension(const cache::WinnerRecord& rec) {
  auto fail = [](const std::string& why) { return Status(StatusCode::kCompileError, "extension load failed: " + why); };
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") + "/dice-winner-XXXXXX.so";
  int fd = ::mkstemps(path.data(), 3);
  if (fd < 0) return fail("mkstemps " + path);
  size_t off = 0;
  while (off < rec.cubin.size()) {
    ssize_t w = ::write(fd, rec.cubin.data() + off, rec.cubin.size() - off);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  ::close(fd);
  if (off != rec.cubin.size()) {
    ::unlink(path.c_str());
    return fail("writing " + path);
  }
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ::unlink(path.c_str());
  if (handle == nullptr) return fail(std::string("dlopen: ") + ::dlerror());
  auto fn = reinterpret_cast<runtime::ExtensionEntryFn>(::dlsym(handle, runtime::kExtensionEntryName));
  if (fn == nullptr) return fail(std::string("no ") + runtime::kExtensionEntryName + " in the cached library");
  return fn;
}

// A device-form winner: its cubin loaded into the current CUDA context.
Expected<std::shared_ptr<runtime::LoadedKernel>> LoadDeviceKernel(const WinnerRequest& req, const cache::WinnerRecord& rec) {
  auto plan = LaunchPlan::FromJson(rec.launch_plan_json);
  if (!plan.ok()) return Status(plan.status().code(), "bad launch plan: " + plan.status().message());
  auto k = runtime::LoadedKernel::Load(rec.cubin, *plan, req.num_inputs, req.num_outputs);
  if (!k.ok()) return Status(k.status().code(), "kernel load failed: " + k.status().message());
  return std::shared_ptr<runtime::LoadedKernel>(std::move(k).value());
}

Expected<LoadedWinner> Load(const WinnerRequest& req, const cache::WinnerRecord& rec) {
  auto form = WinnerForm(rec);
  if (!form.ok()) return form.status();
  LoadedWinner w;
  w.form = *form;
  w.baseline_us = rec.baseline_us;
  w.best_us = rec.best_us;
  switch (*form) {
    case CandidateForm::kDevice: {
      auto k = LoadDeviceKernel(req, rec);
      if (!k.ok()) return k.status();
      w.kernel = std::move(k).value();
      break;
    }
    case CandidateForm::kExtension: {
      auto fn = LoadExtension(rec);
      if (!fn.ok()) return fn.status();
      w.extension = *fn;
      break;
    }
    case CandidateForm::kLibrary:
      return Status(StatusCode::kUnsupported,
                    "library-backed winner " + rec.origin + " cannot be served by this build");
  }
  Loaded().Keep(req.key, req.device, w, rec.reduced_precision);
  return w;
}

}  // namespace

Expected<CandidateForm> WinnerForm(const cache::WinnerRecord& record) {
  if (record.versions_json.empty()) return CandidateForm::kDevice;
  auto bad = [&](const std::string& why) {
    return Status(StatusCode::kCorrupt, "cache: winner " + record.task_key + ": " + why);
  };
  nlohmann::json v = nlohmann::json::parse(record.versions_json, nullptr, /*allow_exceptions=*/false);
  if (!v.is_object()) return bad("versions are not a JSON object");
  auto it = v.find("form");
  if (it == v.end()) return CandidateForm::kDevice;
  if (!it->is_string()) return bad("form is not a string");
  const std::string& form = it->get_ref<const std::string&>();
  auto parsed = ParseCandidateForm(form);
  if (!parsed.ok()) return bad(parsed.status().message());
  return parsed;
}

Expected<LoadedWinner> ResolveWinner(const WinnerRequest& req) {
  LoadedWinner none;
  const runtime::TuneOptions policy = CurrentTuneOptions();  // PyTorch's TF32 switches as they are now
  const bool tf32_allowed = runtime::AllowsReducedPrecision(policy, req.task->graph);
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (auto w = Loaded().Find(req.key, req.device, tf32_allowed)) return *w;
    std::shared_ptr<cache::Store> local;  // kept alive for the remote lookup below
    auto found = ReadLocal(req.key, &local);
    if (!found.ok()) return found.status();
    std::optional<cache::WinnerRecord> rec = std::move(found).value();
    // Local miss: ask the shared server (short timeout, back-off when it is
    // down; outside the store lock).
    if (!rec && attempt == 0 && Remote() != nullptr) rec = Remote()->Lookup(req.key, local.get());
    // A TF32 winner the policy refuses is a miss (tune-sync tunes it again
    // under the policy); the reason is the no-winner text.
    const std::string refused = rec ? runtime::RefusedWinnerReason(policy, req.task->graph, *rec) : "";
    if (!refused.empty()) {
      const bool retuned = attempt == 1 && !none.no_winner.empty();
      none.no_winner = retuned ? refused + "; tuned again: " + none.no_winner : refused;
      rec.reset();
    }
    if (rec && !rec->verified) {
      auto verified = Reverify(req, *rec);
      if (!verified.ok()) return verified.status();
      rec = std::move(verified).value();
    }
    if (rec) {
      RecordHit(req.key);
      return Load(req, *rec);
    }
    if (!req.tune_on_miss || attempt == 1) break;
    auto why = TuneOnMiss(req);
    if (!why.ok()) return why.status();
    none.no_winner = std::move(why).value();
  }
  return none;
}

}  // namespace dice::torch_ext
