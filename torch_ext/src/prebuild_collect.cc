// prebuild_collect.cc — the first call's prebuild pass (prebuild_collect.h).
#include "prebuild_collect.h"

#include <atomic>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune_queue.h"

namespace dice::torch_ext {
namespace {

struct Collector {
  std::atomic<bool> on{false};
  std::mutex mu;  // guards keys and tasks
  std::set<std::string> keys;
  std::vector<std::pair<Task, int>> tasks;
};

Collector& C() {
  static Collector* c = new Collector;  // leaked like the rest of the process state
  return *c;
}

}  // namespace

void BeginPrebuildCollection() {
  Collector& c = C();
  std::lock_guard<std::mutex> lock(c.mu);
  c.keys.clear();
  c.tasks.clear();
  c.on.store(true, std::memory_order_release);
}

bool PrebuildCollecting() { return C().on.load(std::memory_order_relaxed); }

void CollectForPrebuild(const Task& task, int device) {
  Collector& c = C();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.keys.insert(task.Key()).second) c.tasks.emplace_back(task, device);
}

std::string FinishPrebuild() {
  Collector& c = C();
  std::vector<std::pair<Task, int>> tasks;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.on.store(false, std::memory_order_release);
    tasks.swap(c.tasks);
    c.keys.clear();
  }
  nlohmann::json j;
  j["tasks"] = tasks.size();
  auto r = PrebuildNow(tasks);
  if (!r.ok()) {
    j["error"] = r.status().ToString();
    return j.dump();
  }
  j["requested"] = r->requested;
  j["distinct"] = r->distinct;
  j["built"] = r->built;
  j["cached"] = r->cached;
  j["failed"] = r->failed;
  j["seconds"] = r->seconds;
  j["first_error"] = r->first_error;
  return j.dump();
}

}  // namespace dice::torch_ext
