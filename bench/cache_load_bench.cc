// Load test of the HTTP kernel cache (issues 5 and 20): N concurrent clients
// doing a mix of GET by key, PUT, list pages (GET /v1/kernels, page_size 50)
// and dashboard pages (GET /) against a real CacheServer on loopback for a
// bounded time, then a check that every acknowledged PUT is readable with
// its bytes and the database passes integrity_check. Runs on a CPU machine.
//
//   cache_load_bench [--clients 16] [--seconds 30] [--put-fraction 0.2]
//                    [--list-fraction 0.1] [--dashboard-fraction 0.02]
//                    [--keys 1000] [--payload-bytes 16384]
//                    [--payload-max-bytes B] [--spread-fraction 1]
//                    [--db FILE] [--no-integrity-check 1] [--log-requests 1]
//                    [--server-times 1] [--server-cpu N --client-cpu M]
//                    [--get-form binary|json] [--list-mode offset|keyset]
//
// Each client thread has one keep-alive connection; its GETs parse the
// answer and check the content hash as CacheClient::Get does. The body of a
// PUT is built before its clock starts. The cache is seeded with --keys entries through the Store (not HTTP), one
// PutWinner each. Cubin sizes: --payload-bytes each, or, with
// --payload-max-bytes, log-uniform in [payload-bytes, payload-max-bytes] for
// a --spread-fraction of the entries (the others keep --payload-bytes); the
// size and bytes of entry n are a function of n. With --db FILE the file is
// kept, and a file already seeded with at least --keys entries of this
// program is reused without seeding again. Lists and dashboards ask for a
// page drawn uniformly from all pages. The server's per-request log lines
// (spdlog, info) are off unless --log-requests 1.
//
// --server-times 1 reads the server's request log (the ms= field of each
// line, pre-routing to answer written; lines are parsed, not printed) and
// prints the server-side p50/p99 per route beside the client-side figures,
// so the gap between the two is what queueing and the clients cost.
// --get-form: binary (default) asks for the binary wire form (Accept:
// application/vnd.dice.winner) and reads what the Content-Type names, as
// CacheClient::Get does since session 25; json sends no Accept (the
// answer every client got before). --list-mode: offset (default) asks for
// page=P, P uniform over all pages; keyset asks for after=K, K a seeded key
// drawn uniformly (a page at a uniform depth, as a client following
// next_after meets them).
// --server-cpu N --client-cpu M pin the server's threads (accept loop and
// workers, which inherit the mask of the thread that starts the server) to
// CPU N and the client threads to CPU M (both or neither).
//
// Prints req/s and p50/p99 latency (µs) per route and overall, and "lost:
// 0". Exit 0 when nothing was lost and no request failed, 1 otherwise, 2 on
// bad arguments. Numbers go to docs/PERF.md.
#include <httplib.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

// spdlog as http_server.cc uses it (header-only on Debian's external fmt).
#ifndef SPDLOG_FMT_EXTERNAL
#define SPDLOG_FMT_EXTERNAL 1
#endif
#if !defined(FMT_SHARED) && !defined(FMT_HEADER_ONLY)
#define FMT_HEADER_ONLY 1
#endif
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
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

constexpr int kListPageSize = 50;

struct Args {
  int clients = 16;
  double seconds = 30;
  double put_fraction = 0.2;
  double list_fraction = 0.1;
  double dashboard_fraction = 0.02;
  int keys = 1000;
  size_t payload_bytes = 16384;
  size_t payload_max_bytes = 0;  // 0: every cubin is payload_bytes
  double spread_fraction = 1;
  bool integrity_check = true;
  bool log_requests = false;
  bool server_times = false;
  int server_cpu = -1;  // -1: not pinned
  int client_cpu = -1;
  bool get_binary = true;
  bool list_keyset = false;
  std::string db;
};

std::string Key(uint64_t n) {
  static const char* hex = "0123456789abcdef";
  std::string k(64, '0');
  for (int i = 63; i >= 0 && n > 0; --i, n >>= 4) k[static_cast<size_t>(i)] = hex[n & 15];
  k[0] = 'd';
  return k;
}

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Cubin size of entry n under the payload mix.
size_t CubinBytes(uint64_t n, const Args& a) {
  if (a.payload_max_bytes <= a.payload_bytes) return a.payload_bytes;
  const double u1 = static_cast<double>(Mix(n) >> 11) / 9007199254740992.0;
  if (u1 >= a.spread_fraction) return a.payload_bytes;
  const double u2 = static_cast<double>(Mix(n ^ 0x5bd1e995ull) >> 11) / 9007199254740992.0;
  const double lo = std::log(static_cast<double>(a.payload_bytes));
  const double hi = std::log(static_cast<double>(a.payload_max_bytes));
  return static_cast<size_t>(std::exp(lo + u2 * (hi - lo)));
}

WinnerRecord Record(uint64_t n, const Args& a, double speedup) {
  WinnerRecord r;
  r.task_key = Key(n);
  r.graph_canonical = "dice-ir v1\ninput %0 f32 rank=2\n%1 = relu(%0)\noutput %1\n";
  r.input_specs = "f32[1024," + std::to_string(n % 8192 + 1) + "]";
  r.arch = n % 4 == 3 ? "sm_80" : "sm_90";
  r.gpu_name = n % 4 == 3 ? "NVIDIA A100-SXM4-80GB" : "NVIDIA H200";
  r.origin = "template:elementwise/load" + std::to_string(n);
  r.candidate_hash = std::to_string(n);
  r.source = "extern \"C\" __global__ void k(float* y) { /* " + std::to_string(n) + " */ }";
  r.cubin.resize(CubinBytes(n, a));
  uint64_t state = Mix(n + 1);
  for (size_t i = 0; i < r.cubin.size(); i += 8) {
    state = Mix(state);
    std::memcpy(&r.cubin[i], &state, std::min<size_t>(8, r.cubin.size() - i));
  }
  r.launch_plan_json = R"({"grid":[64,1,1],"block":[256,1,1]})";
  r.baseline_us = 100;
  r.best_us = 100 / speedup;
  r.speedup = speedup;
  r.hits = static_cast<int64_t>(n % 17);
  r.created_at = 1764000000 + static_cast<int64_t>(n % 1000000);
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
    else if (flag == "--list-fraction") a->list_fraction = std::atof(v);
    else if (flag == "--dashboard-fraction") a->dashboard_fraction = std::atof(v);
    else if (flag == "--keys") a->keys = std::atoi(v);
    else if (flag == "--payload-bytes") a->payload_bytes = static_cast<size_t>(std::atoll(v));
    else if (flag == "--payload-max-bytes") a->payload_max_bytes = static_cast<size_t>(std::atoll(v));
    else if (flag == "--spread-fraction") a->spread_fraction = std::atof(v);
    else if (flag == "--no-integrity-check") a->integrity_check = std::atoi(v) == 0;
    else if (flag == "--log-requests") a->log_requests = std::atoi(v) != 0;
    else if (flag == "--server-times") a->server_times = std::atoi(v) != 0;
    else if (flag == "--server-cpu") a->server_cpu = std::atoi(v);
    else if (flag == "--client-cpu") a->client_cpu = std::atoi(v);
    else if (flag == "--db") a->db = v;
    else if (flag == "--get-form" && (std::strcmp(v, "binary") == 0 || std::strcmp(v, "json") == 0))
      a->get_binary = std::strcmp(v, "binary") == 0;
    else if (flag == "--list-mode" && (std::strcmp(v, "offset") == 0 || std::strcmp(v, "keyset") == 0))
      a->list_keyset = std::strcmp(v, "keyset") == 0;
    else return false;
  }
  const size_t largest = std::max(a->payload_bytes, a->payload_max_bytes);
  return a->clients >= 1 && a->clients <= 1024 && a->seconds > 0 && a->seconds <= 600 && a->put_fraction >= 0 &&
         a->list_fraction >= 0 && a->dashboard_fraction >= 0 &&
         a->put_fraction + a->list_fraction + a->dashboard_fraction <= 1 && a->keys >= 1 && a->payload_bytes >= 1 &&
         largest <= (40u << 20) && a->spread_fraction >= 0 && a->spread_fraction <= 1 &&
         (a->server_cpu < 0) == (a->client_cpu < 0) && a->server_cpu < CPU_SETSIZE && a->client_cpu < CPU_SETSIZE;
}

// Pins the calling thread (and the threads it starts from now on) to `cpu`.
bool PinThisThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  const int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  if (rc != 0) std::fprintf(stderr, "cannot pin to CPU %d: %s\n", cpu, std::strerror(rc));
  return rc == 0;
}

// The server's request log as a sink: per route label, the ms= of each
// line (the server's own handling time), nothing printed.
class ServerTimesSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // Route label -> server-side ms of each request, after the run.
  std::map<std::string, std::vector<double>> TakeTimes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::move(ms_);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string_view line(msg.payload.data(), msg.payload.size());
    const size_t r = line.find(" route="), m = line.find(" ms=");
    if (r == std::string_view::npos || m == std::string_view::npos) return;
    const size_t r_end = line.find(' ', r + 7);
    ms_[std::string(line.substr(r + 7, r_end - r - 7))].push_back(std::atof(std::string(line.substr(m + 4)).c_str()));
  }
  void flush_() override {}

 private:
  std::map<std::string, std::vector<double>> ms_;  // guarded by base_sink's mutex_
};

// Seeds entries 0..keys-1 through the Store unless the file already has them.
bool Seed(const Args& a) {
  auto store = dice::cache::Store::Open(a.db);
  if (!store.ok()) {
    std::fprintf(stderr, "cannot open %s: %s\n", a.db.c_str(), store.status().ToString().c_str());
    return false;
  }
  auto last = (*store)->GetWinner(Key(static_cast<uint64_t>(a.keys - 1)));
  if (last.ok() && last->has_value() && (**last).cubin == Record(static_cast<uint64_t>(a.keys - 1), a, 2.0).cubin) {
    std::printf("reusing the %d seeded entries of %s\n", a.keys, a.db.c_str());
    return true;
  }
  const auto t0 = Clock::now();
  uint64_t bytes = 0;
  for (int k = 0; k < a.keys; ++k) {
    WinnerRecord r = Record(static_cast<uint64_t>(k), a, 2.0);
    bytes += r.cubin.size();
    auto put = (*store)->PutWinner(std::move(r));
    if (!put.ok()) {
      std::fprintf(stderr, "seeding failed at %d: %s\n", k, put.status().ToString().c_str());
      return false;
    }
    if ((k + 1) % 10000 == 0) {
      std::printf("seeded %d entries, %.2f GB of cubins, %.0f s\n", k + 1, static_cast<double>(bytes) / 1e9,
                  std::chrono::duration<double>(Clock::now() - t0).count());
      std::fflush(stdout);
    }
  }
  std::printf("seeded %d entries (%.2f GB of cubins, mean %.0f KB) in %.0f s\n", a.keys,
              static_cast<double>(bytes) / 1e9, static_cast<double>(bytes) / a.keys / 1e3,
              std::chrono::duration<double>(Clock::now() - t0).count());
  return true;
}

enum Route { kGet, kPut, kList, kDashboard, kRoutes };
constexpr std::array<const char*, kRoutes> kRouteNames = {"GET", "PUT", "list", "dashboard"};

struct ClientResult {
  std::array<std::vector<double>, kRoutes> us;
  std::vector<uint64_t> acknowledged;  // keys of 201/200 PUT answers
  int64_t errors = 0;
  std::string first_error;
  void Fail(const std::string& why) {
    ++errors;
    if (first_error.empty()) first_error = why;
  }
};

// GET /v1/kernels/{key} as CacheClient::Get does it: the answer parsed and
// its content hash checked. "" when fine, else what went wrong.
std::string GetAndCheck(httplib::Client& http, const std::string& key, bool binary) {
  const httplib::Headers accept{{"Accept", std::string(dice::cache::kWinnerBinaryType)}};
  auto res = binary ? http.Get(("/v1/kernels/" + key).c_str(), accept) : http.Get(("/v1/kernels/" + key).c_str());
  if (!res) return "GET: " + httplib::to_string(res.error());
  if (res->status != 200) return "GET: status " + std::to_string(res->status);
  auto rec = dice::cache::IsWinnerBinaryType(res->get_header_value("Content-Type"))
                 ? dice::cache::WinnerFromWireBinary(std::move(res->body))
                 : dice::cache::WinnerFromWireJson(res->body);
  if (!rec.ok()) return "GET: " + rec.status().ToString();
  if (rec->task_key != key || dice::cache::ContentHash(*rec) != rec->content_hash) return "GET: bad entry " + key;
  return "";
}

// One client thread's loop until `end`, on one keep-alive connection.
void RunClient(const Args& a, int port, const std::string& token, uint64_t put_base, int c, Clock::time_point end,
               ClientResult* r) {
  httplib::Client http("127.0.0.1", port);
  http.set_keep_alive(true);
  http.set_tcp_nodelay(true);
  http.set_read_timeout(std::chrono::seconds(10));
  http.set_write_timeout(std::chrono::seconds(10));
  const httplib::Headers auth = {{"Authorization", "Bearer " + token}};
  std::mt19937_64 rng(static_cast<uint64_t>(c) * 7919 + 1);
  std::uniform_real_distribution<double> coin(0, 1);
  std::uniform_int_distribution<int> pick(0, a.keys - 1);
  std::uniform_int_distribution<int> page(1, (a.keys + kListPageSize - 1) / kListPageSize);
  uint64_t seq = 0;
  while (Clock::now() < end) {
    const double u = coin(rng);
    const double put = a.put_fraction, list = put + a.list_fraction, dash = list + a.dashboard_fraction;
    const Route route = u < put ? kPut : u < list ? kList : u < dash ? kDashboard : kGet;
    std::string error;
    uint64_t n = 0;
    std::string body;
    if (route == kPut) {
      // Fresh keys per run and client so every PUT is a write.
      n = put_base + 1000000000ull * static_cast<uint64_t>(c + 1) + seq++;
      body = dice::cache::WinnerToWireJson(Record(n, a, 3.0), true);
    }
    const auto t0 = Clock::now();
    if (route == kPut) {
      auto res = http.Put(("/v1/kernels/" + Key(n)).c_str(), auth, body, "application/json");
      if (!res || res->status != 201) error = "PUT: " + (res ? std::to_string(res->status) : httplib::to_string(res.error()));
    } else if (route == kGet) {
      error = GetAndCheck(http, Key(static_cast<uint64_t>(pick(rng))), a.get_binary);
    } else {
      const std::string path = route == kDashboard ? "/?page=" + std::to_string(page(rng))
                               : a.list_keyset     ? "/v1/kernels?page_size=50&after=" + Key(static_cast<uint64_t>(pick(rng)))
                                                   : "/v1/kernels?page_size=50&page=" + std::to_string(page(rng));
      auto res = http.Get(path.c_str());
      if (!res || res->status != 200) error = path + ": " + (res ? std::to_string(res->status) : "no answer");
    }
    r->us[route].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (!error.empty()) {
      r->Fail(error);
    } else if (route == kPut) {
      r->acknowledged.push_back(n);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr, "usage: cache_load_bench [--clients N<=1024] [--seconds S<=600] [--put-fraction F] "
                         "[--list-fraction F] [--dashboard-fraction F] [--keys K] [--payload-bytes B] "
                         "[--payload-max-bytes B] [--spread-fraction F] [--db FILE] [--no-integrity-check 1] "
                         "[--log-requests 1] [--server-times 1] [--server-cpu N --client-cpu M] "
                         "[--get-form binary|json] [--list-mode offset|keyset]\n");
    return 2;
  }
  std::shared_ptr<ServerTimesSink> times;
  if (args.server_times) {
    times = std::make_shared<ServerTimesSink>();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("cache_load_bench", times));
    spdlog::set_level(spdlog::level::info);
  } else if (!args.log_requests) {
    spdlog::set_level(spdlog::level::warn);
  }
  std::string tmpdir;
  if (args.db.empty()) {
    char tmpl[] = "/tmp/dice_cache_load_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return 1;
    tmpdir = tmpl;
    args.db = tmpdir + "/kernels.db";
  }
  if (!Seed(args)) return 1;
  const std::string token = "load-token";
  if (args.server_cpu >= 0 && !PinThisThread(args.server_cpu)) return 1;
  CacheServer server;
  dice::Status st = server.Start(args.db, "127.0.0.1", 0, token);
  if (!st.ok()) {
    std::fprintf(stderr, "cannot start the server: %s\n", st.ToString().c_str());
    return 1;
  }
  std::printf("server %s, %d entries; %d clients, %.0f s, %.0f%% PUT, %.0f%% list, %.0f%% dashboard, rest GET; "
              "GET form %s, list mode %s\n",
              server.url().c_str(), args.keys, args.clients, args.seconds, 100 * args.put_fraction,
              100 * args.list_fraction, 100 * args.dashboard_fraction, args.get_binary ? "binary" : "json",
              args.list_keyset ? "keyset" : "offset");
  if (args.client_cpu >= 0) {
    if (!PinThisThread(args.client_cpu)) return 1;
    std::printf("server threads pinned to CPU %d, client threads to CPU %d\n", args.server_cpu, args.client_cpu);
  }
  std::fflush(stdout);

  // PUT keys: 10^12 * (unix seconds mod 10^6) + 10^9 * (client + 1) + n, so
  // runs on a kept --db file write fresh keys too.
  const uint64_t put_base = 1000000000000ull * static_cast<uint64_t>(std::time(nullptr) % 1000000);
  std::vector<ClientResult> results(static_cast<size_t>(args.clients));
  std::vector<std::thread> threads;
  const Clock::time_point start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(args.seconds));
  for (int c = 0; c < args.clients; ++c) {
    threads.emplace_back(RunClient, std::cref(args), server.port(), token, put_base, c, end,
                         &results[static_cast<size_t>(c)]);
  }
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  // Before the read-back below adds GETs of its own.
  std::map<std::string, std::vector<double>> server_ms;
  if (times) server_ms = times->TakeTimes();

  std::array<std::vector<double>, kRoutes> us;
  std::vector<double> all_us;
  std::vector<uint64_t> acknowledged;
  int64_t errors = 0;
  std::string first_error;
  for (auto& r : results) {
    for (int k = 0; k < kRoutes; ++k) {
      us[k].insert(us[k].end(), r.us[k].begin(), r.us[k].end());
      all_us.insert(all_us.end(), r.us[k].begin(), r.us[k].end());
    }
    acknowledged.insert(acknowledged.end(), r.acknowledged.begin(), r.acknowledged.end());
    errors += r.errors;
    if (first_error.empty()) first_error = r.first_error;
  }

  // Nothing lost: every acknowledged PUT reads back with its exact bytes.
  int64_t lost = 0;
  {
    CacheClient checker(server.url(), token, std::chrono::milliseconds(10000));
    for (uint64_t n : acknowledged) {
      auto got = checker.Get(Key(n));
      if (!got.ok() || !got->has_value() || (**got).cubin != Record(n, args, 3.0).cubin) ++lost;
    }
  }
  server.Stop();
  dice::Status integrity = dice::Status::Ok();
  if (args.integrity_check) {
    auto store = dice::cache::Store::Open(args.db);
    integrity = store.ok() ? (*store)->CheckIntegrity() : store.status();
  }

  std::printf("requests: %zu in %.1f s = %.0f req/s\n", all_us.size(), elapsed,
              static_cast<double>(all_us.size()) / elapsed);
  std::printf("%-10s %9s %9s %9s %9s\n", "route", "requests", "req/s", "p50 µs", "p99 µs");
  for (int k = 0; k < kRoutes; ++k) {
    if (us[k].empty()) continue;
    std::printf("%-10s %9zu %9.0f %9.0f %9.0f\n", kRouteNames[k], us[k].size(),
                static_cast<double>(us[k].size()) / elapsed, Percentile(us[k], 0.5), Percentile(us[k], 0.99));
  }
  std::printf("%-10s %9zu %9.0f %9.0f %9.0f\n", "all", all_us.size(), static_cast<double>(all_us.size()) / elapsed,
              Percentile(all_us, 0.5), Percentile(all_us, 0.99));
  if (times) {
    // Log labels of the bench's routes (http_server.cc RouteOf).
    const std::array<const char*, kRoutes> labels = {"get_kernel", "put_kernel", "list_kernels", "dashboard"};
    std::printf("server-side (request log, pre-routing to answer written):\n");
    for (int k = 0; k < kRoutes; ++k) {
      auto& v = server_ms[labels[k]];
      if (v.empty() || us[k].empty()) continue;
      std::printf("%-10s %9zu %9s %9.0f %9.0f\n", kRouteNames[k], v.size(), "", 1000 * Percentile(v, 0.5),
                  1000 * Percentile(v, 0.99));
    }
  }
  std::printf("acknowledged PUTs: %zu; lost: %lld; failed requests: %lld%s%s; integrity_check: %s\n",
              acknowledged.size(), static_cast<long long>(lost), static_cast<long long>(errors),
              first_error.empty() ? "" : " (first: ", first_error.empty() ? "" : (first_error + ")").c_str(),
              !args.integrity_check ? "skipped" : integrity.ok() ? "ok" : integrity.ToString().c_str());
  if (!tmpdir.empty()) {
    for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((args.db + suffix).c_str());
    ::rmdir(tmpdir.c_str());
  }
  return lost == 0 && errors == 0 && integrity.ok() && !all_us.empty() ? 0 : 1;
}
