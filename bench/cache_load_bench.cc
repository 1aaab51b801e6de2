// Load test of the HTTP kernel cache (issue 5): N concurrent clients doing
// mixed GET/PUT against a real CacheServer on loopback for a bounded time,
// then a check that every acknowledged PUT is readable with its bytes and
// the database passes integrity_check. Runs on a CPU machine.
//
//   cache_load_bench [--clients 16] [--seconds 30] [--put-fraction 0.2]
//                    [--keys 1000] [--payload-bytes 16384] [--db FILE]
//
// Prints requests/s and p50/p99 latency (µs) per operation and overall, and
// "lost: 0". Exit 0 when nothing was lost and no request failed, 1
// otherwise, 2 on bad arguments. Numbers go to docs/PERF.md.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dice/cache/http_client.h"
#include "dice/cache/http_server.h"
#include "dice/cache/store.h"

namespace {

using dice::cache::CacheClient;
using dice::cache::CacheServer;
using dice::cache::WinnerRecord;
using Clock = std::chrono::steady_clock;

struct Args {
  int clients = 16;
  double seconds = 30;
  double put_fraction = 0.2;
  int keys = 1000;
  size_t payload_bytes = 16384;
  std::string db;
};

std::string Key(uint64_t n) {
  static const char* hex = "0123456789abcdef";
  std::string k(64, '0');
  for (int i = 63; i >= 0 && n > 0; --i, n >>= 4) k[static_cast<size_t>(i)] = hex[n & 15];
  k[0] = 'd';
  return k;
}

WinnerRecord Record(uint64_t n, size_t payload_bytes, double speedup) {
  WinnerRecord r;
  r.task_key = Key(n);
  r.graph_canonical = "input %0 f32 rank=2\n%1 = relu(%0)\noutput %1\n";
  r.input_specs = "f32[1024," + std::to_string(n % 8192 + 1) + "]";
  r.arch = "sm_90";
  r.gpu_name = "NVIDIA H200";
  r.origin = "template:elementwise/load" + std::to_string(n);
  r.candidate_hash = std::to_string(n);
  r.source = "extern \"C\" __global__ void k(float* y) { /* " + std::to_string(n) + " */ }";
  r.cubin.resize(payload_bytes);
  for (size_t i = 0; i < payload_bytes; ++i) r.cubin[i] = static_cast<char>((i * 31 + n) & 0xff);
  r.launch_plan_json = R"({"grid":[64,1,1],"block":[256,1,1]})";
  r.baseline_us = 100;
  r.best_us = 100 / speedup;
  r.speedup = speedup;
  r.versions_json = "{}";
  r.content_hash = dice::cache::ContentHash(r);
  return r;
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (flag == "--clients") a->clients = std::atoi(v);
    else if (flag == "--seconds") a->seconds = std::atof(v);
    else if (flag == "--put-fraction") a->put_fraction = std::atof(v);
    else if (flag == "--keys") a->keys = std::atoi(v);
    else if (flag == "--payload-bytes") a->payload_bytes = static_cast<size_t>(std::atoll(v));
    else if (flag == "--db") a->db = v;
    else return false;
  }
  return a->clients >= 1 && a->clients <= 1024 && a->seconds > 0 && a->seconds <= 600 && a->put_fraction >= 0 &&
         a->put_fraction <= 1 && a->keys >= 1 && a->payload_bytes >= 1 && a->payload_bytes <= (64u << 20) - 65536;
}

struct ClientResult {
  std::vector<double> get_us, put_us;
  std::vector<uint64_t> acknowledged;  // keys of 201/200 PUT answers
  int64_t errors = 0;
  std::string first_error;
};

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr, "usage: cache_load_bench [--clients N<=1024] [--seconds S<=600] [--put-fraction F] "
                         "[--keys K] [--payload-bytes B] [--db FILE]\n");
    return 2;
  }
  std::string tmpdir;
  if (args.db.empty()) {
    char tmpl[] = "/tmp/dice_cache_load_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return 1;
    tmpdir = tmpl;
    args.db = tmpdir + "/kernels.db";
  }
  const std::string token = "load-token";
  CacheServer server;
  dice::Status st = server.Start(args.db, "127.0.0.1", 0, token);
  if (!st.ok()) {
    std::fprintf(stderr, "cannot start the server: %s\n", st.ToString().c_str());
    return 1;
  }
  // Preload the keys the GETs read.
  {
    CacheClient loader(server.url(), token);
    for (int k = 0; k < args.keys; ++k) {
      auto put = loader.Put(Record(static_cast<uint64_t>(k), args.payload_bytes, 2.0));
      if (!put.ok()) {
        std::fprintf(stderr, "preload failed: %s\n", put.status().ToString().c_str());
        return 1;
      }
    }
  }
  std::printf("server %s, %d preloaded entries of %zu payload bytes; %d clients, %.0f s, %.0f%% PUT\n",
              server.url().c_str(), args.keys, args.payload_bytes, args.clients, args.seconds,
              100 * args.put_fraction);
  std::fflush(stdout);

  std::vector<ClientResult> results(static_cast<size_t>(args.clients));
  std::atomic<bool> go{false};
  const auto deadline_after = std::chrono::duration<double>(args.seconds);
  std::vector<std::thread> threads;
  Clock::time_point start;
  for (int c = 0; c < args.clients; ++c) {
    threads.emplace_back([&, c] {
      ClientResult& r = results[static_cast<size_t>(c)];
      CacheClient client(server.url(), token, std::chrono::milliseconds(10000));
      std::mt19937_64 rng(static_cast<uint64_t>(c) * 7919 + 1);
      std::uniform_real_distribution<double> coin(0, 1);
      std::uniform_int_distribution<int> pick(0, args.keys - 1);
      uint64_t seq = 0;
      while (!go) std::this_thread::yield();
      const auto end = start + std::chrono::duration_cast<Clock::duration>(deadline_after);
      while (Clock::now() < end) {
        const bool put = coin(rng) < args.put_fraction;
        const auto t0 = Clock::now();
        if (put) {
          // Fresh keys per client (1e9 * (c+1) + seq) so every PUT is a write.
          const uint64_t n = 1000000000ull * static_cast<uint64_t>(c + 1) + seq++;
          auto stored = client.Put(Record(n, args.payload_bytes, 3.0));
          r.put_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
          if (stored.ok() && *stored) {
            r.acknowledged.push_back(n);
          } else {
            ++r.errors;
            if (r.first_error.empty()) r.first_error = stored.ok() ? "not stored" : stored.status().ToString();
          }
        } else {
          auto got = client.Get(Key(static_cast<uint64_t>(pick(rng))));
          r.get_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
          if (!got.ok() || !got->has_value()) {
            ++r.errors;
            if (r.first_error.empty()) r.first_error = got.ok() ? "missing preloaded entry" : got.status().ToString();
          }
        }
      }
    });
  }
  start = Clock::now();
  go = true;
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> get_us, put_us, all_us;
  std::vector<uint64_t> acknowledged;
  int64_t errors = 0;
  std::string first_error;
  for (auto& r : results) {
    get_us.insert(get_us.end(), r.get_us.begin(), r.get_us.end());
    put_us.insert(put_us.end(), r.put_us.begin(), r.put_us.end());
    acknowledged.insert(acknowledged.end(), r.acknowledged.begin(), r.acknowledged.end());
    errors += r.errors;
    if (first_error.empty()) first_error = r.first_error;
  }
  all_us = get_us;
  all_us.insert(all_us.end(), put_us.begin(), put_us.end());
  const size_t requests = all_us.size();

  // Nothing lost: every acknowledged PUT reads back with its exact bytes.
  int64_t lost = 0;
  {
    CacheClient checker(server.url(), token);
    for (uint64_t n : acknowledged) {
      auto got = checker.Get(Key(n));
      if (!got.ok() || !got->has_value() || (**got).cubin != Record(n, args.payload_bytes, 3.0).cubin) ++lost;
    }
  }
  server.Stop();
  auto store = dice::cache::Store::Open(args.db);
  const dice::Status integrity = store.ok() ? (*store)->CheckIntegrity() : store.status();

  std::printf("requests: %zu in %.1f s = %.0f req/s (GET %zu, PUT %zu)\n", requests, elapsed,
              static_cast<double>(requests) / elapsed, get_us.size(), put_us.size());
  std::printf("latency µs: all p50 %.0f p99 %.0f | GET p50 %.0f p99 %.0f | PUT p50 %.0f p99 %.0f\n",
              Percentile(all_us, 0.5), Percentile(all_us, 0.99), Percentile(get_us, 0.5), Percentile(get_us, 0.99),
              Percentile(put_us, 0.5), Percentile(put_us, 0.99));
  std::printf("acknowledged PUTs: %zu; lost: %lld; failed requests: %lld%s%s; integrity_check: %s\n",
              acknowledged.size(), static_cast<long long>(lost), static_cast<long long>(errors),
              first_error.empty() ? "" : " (first: ", first_error.empty() ? "" : (first_error + ")").c_str(),
              integrity.ok() ? "ok" : integrity.ToString().c_str());
  if (!tmpdir.empty()) {
    for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((args.db + suffix).c_str());
    ::rmdir(tmpdir.c_str());
  }
  return lost == 0 && errors == 0 && integrity.ok() && requests > 0 ? 0 : 1;
}
