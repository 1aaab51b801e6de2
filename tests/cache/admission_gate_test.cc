// The server's admission gate (cache/src/admission_gate.h): never more
// holders than its limit, waiters admitted in arrival order, no limit at 0;
// and the server still answers every read when the gate admits one at a
// time (DICE_CACHE_SERVE_HANDLERS=1).
#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../../cache/src/admission_gate.h"
#include "dice/cache/http_client.h"
#include "dice/cache/http_server.h"

namespace dice::cache {
namespace {

namespace fs = std::filesystem;

TEST(AdmissionGateTest, NeverAdmitsMoreThanItsLimit) {
  for (size_t limit : {size_t{1}, size_t{2}, size_t{3}}) {
    AdmissionGate gate(limit);
    std::atomic<int> inside{0}, most{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 200; ++i) {
          AdmissionSlot slot(gate);
          const int now = ++inside;
          int seen = most.load();
          while (now > seen && !most.compare_exchange_weak(seen, now)) {
          }
          std::this_thread::yield();
          --inside;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_LE(most.load(), static_cast<int>(limit));
    EXPECT_GE(most.load(), 1);
  }
}

TEST(AdmissionGateTest, WaitersAreAdmittedInArrivalOrder) {
  AdmissionGate gate(1);
  gate.Acquire();  // the slot is taken: everyone below waits
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread> threads;
  for (int t = 0; t < 5; ++t) {
    threads.emplace_back([&, t] {
      AdmissionSlot slot(gate);
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(t);
    });
    // Each thread queues before the next starts (it cannot pass the gate).
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  gate.Release();
  for (auto& t : threads) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(AdmissionGateTest, ZeroMeansNoLimit) {
  AdmissionGate gate(0);
  for (int i = 0; i < 100; ++i) gate.Acquire();  // would block at any limit below 100
  for (int i = 0; i < 100; ++i) gate.Release();
}

TEST(AdmissionGateTest, ServerWithOneHandlerAtATimeAnswersConcurrentClients) {
  std::string tmpl = (fs::temp_directory_path() / "dice-gate-test-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  ::setenv("DICE_CACHE_SERVE_HANDLERS", "1", 1);
  CacheServer server;
  const Status st = server.Start(tmpl + "/kernels.db", "127.0.0.1", 0, "token");
  ::unsetenv("DICE_CACHE_SERVE_HANDLERS");
  ASSERT_TRUE(st.ok()) << st.ToString();
  WinnerRecord r;
  r.task_key = std::string(64, 'c');
  r.graph_canonical = "g";
  r.input_specs = "f32[1]";
  r.arch = "sm_90";
  r.gpu_name = "NVIDIA H200";
  r.origin = "o";
  r.candidate_hash = "h";
  r.source = "s";
  r.cubin = std::string(100000, 'x');
  r.launch_plan_json = "{}";
  r.baseline_us = 2;
  r.best_us = 1;
  r.speedup = 2;
  r.versions_json = "{}";
  ASSERT_TRUE(CacheClient(server.url(), "token").Put(r).ok());
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      CacheClient client(server.url(), "");
      for (int i = 0; i < 10; ++i) {
        auto got = client.Get(r.task_key);
        auto list = client.List();
        if (got.ok() && got->has_value() && (**got).cubin == r.cubin && list.ok() && list->size() == 1) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 60);
  server.Stop();
  std::error_code ec;
  fs::remove_all(tmpl, ec);
}

}  // namespace
}  // namespace dice::cache
