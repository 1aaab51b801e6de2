// The process-wide settings, input capture and cache handles (runtime_state.h).
#include "runtime_state.h"

#include <cstdio>
#include <cstdlib>

#include "dice/core/log.h"
#include "group_record.h"

namespace dice::torch_ext {
namespace state_internal {
std::atomic<int> g_mode{static_cast<int>(Mode::kOff)};
std::atomic<bool> g_mode_loaded{false};
std::atomic<bool> g_capture{false};
}  // namespace state_internal

namespace {

struct State {
  std::mutex mu;  // guards settings, settings_set, captured
  RuntimeSettings settings;
  bool settings_set = false;
  std::vector<CapturedCall> captured;

  std::mutex store_mu;  // guards store, store_dir; held by LockedStore
  std::shared_ptr<cache::Store> store;
  std::string store_dir;

  std::once_flag remote_once;
  std::unique_ptr<cache::RemoteCache> remote;
};

State& S() {
  static State* s = new State;  // leaked: the tuner thread may outlive static destruction
  return *s;
}

RuntimeSettings EnvSettingsOrOff() {
  auto s = SettingsFromEnv();
  if (s.ok()) return *s;
  RuntimeSettings d;
  d.mode = Mode::kOff;
  return d;
}

// REQUIRES: s.mu held.
void LoadSettingsLocked(State& s) {
  if (s.settings_set) return;
  s.settings = EnvSettingsOrOff();
  s.settings_set = true;
  // A program embedding the library (no CLI) honours DICE_LOG_LEVEL too.
  if (Status st = InitLogLevelFromEnv(); !st.ok()) std::fprintf(stderr, "dice: warning: %s\n", st.message().c_str());
  (void)Remote();  // checks DICE_REMOTE_CACHE at start-up (reports a bad URL once)
}

}  // namespace

Expected<RuntimeSettings> SettingsFromEnv() {
  RuntimeSettings o;
  const char* mode = std::getenv("DICE_MODE");
  auto m = ParseMode(mode ? mode : "");
  if (!m.ok()) return m.status().WithContext("DICE_MODE");
  o.mode = *m;
  if (const char* dir = std::getenv("DICE_CACHE_DIR")) o.cache_dir = dir;
  return o;
}

void SetRuntimeSettings(const RuntimeSettings& settings) {
  (void)Remote();  // checks DICE_REMOTE_CACHE at start-up (reports a bad URL once)
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.settings = settings;
  s.settings_set = true;
  state_internal::g_mode.store(static_cast<int>(settings.mode));
  state_internal::g_mode_loaded.store(true, std::memory_order_release);
}

runtime::TuneOptions CurrentTuneOptions() {
  runtime::TuneOptions o = GetRuntimeSettings().tune;
  ApplyFrameworkPrecision(&o);
  return o;
}

RuntimeSettings GetRuntimeSettings() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  LoadSettingsLocked(s);
  return s.settings;
}

Mode state_internal::LoadMode() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  LoadSettingsLocked(s);
  g_mode.store(static_cast<int>(s.settings.mode));
  g_mode_loaded.store(true, std::memory_order_release);
  return s.settings.mode;
}

void SetCapturingInputs(bool enabled) {
  if (enabled) {
    for (GroupRecord* g : AllGroupRecords()) {
      std::lock_guard<std::mutex> lock(g->mu);
      g->captured_signatures.clear();
    }
  }
  state_internal::g_capture.store(enabled);
}

void AddCapturedCall(CapturedCall call) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.captured.push_back(std::move(call));
}

std::vector<CapturedCall> TakeStoredCapturedCalls() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<CapturedCall> out = std::move(s.captured);
  s.captured.clear();
  return out;
}

Expected<LockedStore> LockStore() {
  State& s = S();
  std::unique_lock<std::mutex> lock(s.store_mu);
  std::string dir = GetRuntimeSettings().cache_dir;
  if (dir.empty()) dir = cache::DefaultCacheDir();
  if (!s.store || s.store_dir != dir) {
    auto opened = cache::Store::Open(cache::DatabasePath(dir));
    if (!opened.ok()) return opened.status();
    s.store = std::move(opened).value();
    s.store_dir = dir;
  }
  return LockedStore{std::move(lock), s.store};
}

cache::RemoteCache* Remote() {
  State& s = S();
  std::call_once(s.remote_once, [&s] {
    auto o = cache::RemoteCacheOptions::FromEnv();
    if (!o.ok()) {
      std::fprintf(stderr, "dice: error: %s; remote cache lookups disabled\n", o.status().message().c_str());
      return;
    }
    if (!o->url.empty()) s.remote = std::make_unique<cache::RemoteCache>(*o);
  });
  return s.remote.get();
}

}  // namespace dice::torch_ext
