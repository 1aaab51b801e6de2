// prebuild.cc — PrebuildExtensions (dice/runtime/prebuild.h): distinct
// extension builds on a small pool of threads, each running one nvcc.
#include "dice/runtime/prebuild.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "build_cache.h"
#include "dice/core/env.h"
#include "dice/runtime/error_headline.h"

namespace dice::runtime {

int DefaultPrebuildJobs() {
  const int half = std::clamp(static_cast<int>(std::thread::hardware_concurrency() / 2), 1, 16);
  return static_cast<int>(EnvInt("DICE_PREBUILD_JOBS", half, 0, 64));
}

PrebuildReport PrebuildExtensions(const std::vector<PrebuildItem>& items, int parallel,
                                  const ExtensionCompileOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  PrebuildReport report;
  report.requested = static_cast<int>(items.size());
  std::set<std::tuple<std::string, std::string, int>> seen;
  std::vector<const PrebuildItem*> distinct;
  for (const PrebuildItem& item : items) {
    if (seen.emplace(item.candidate.Hash(), item.arch, item.num_inputs).second) distinct.push_back(&item);
  }
  report.distinct = static_cast<int>(distinct.size());
  // Without a build cache nothing built here would reach the tune.
  if (!distinct.empty() && !build_cache::ResolveDir(options.build_cache_dir).empty()) {
    std::atomic<size_t> next{0};
    std::mutex mu;  // guards the counts below
    auto work = [&] {
      for (size_t i = next++; i < distinct.size(); i = next++) {
        const PrebuildItem& it = *distinct[i];
        auto build = CompileExtensionCached(it.candidate, it.arch, it.num_inputs, options);
        std::lock_guard<std::mutex> lock(mu);
        if (!build.ok()) {
          ++report.failed;
          if (report.first_error.empty()) {
            report.first_error = it.candidate.origin + ": " + ErrorHeadline(build.status().message());
          }
        } else if ((*build)->from_cache()) {
          ++report.cached;
        } else {
          ++report.built;
        }
      }
    };
    const size_t threads = std::min(distinct.size(), static_cast<size_t>(std::max(1, parallel)));
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(work);
    for (auto& t : pool) t.join();
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace dice::runtime
