// Per-candidate progress while a worker tunes a batch (worker_protocol.h
// "progress" events, worker_pool.h WorkerProgressCallback, tuner.h kMeasure
// events). CPU only: the worker is a scripted fake speaking the real
// protocol (python3), as in worker_pool_test.cc.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fixed_generator.h"
#include "relu_graph.h"
#include "dice/core/task.h"
#include "dice/runtime/tuner.h"
#include "dice/runtime/worker_pool.h"
#include "dice/runtime/worker_protocol.h"

namespace dice::runtime {
namespace {

// A worker that answers hello with a device of the arch in FAKE_ARCH (and
// the UUID it was bound to, if any), and tunes like this: items whose origin
// is "bad" fail to compile; when the request asks for progress (and
// FAKE_NO_PROGRESS is unset: an older worker) one "progress" event names the
// others; baseline 10 µs; then each other item verifies in the µs its origin
// names ("ok:7" -> 7 µs), "wrong" fails verification. Every event sent is
// appended to FAKE_LOG.
constexpr const char* kProgressWorker = R"PY(#!/usr/bin/env python3
import json, os, struct, sys
inp, out = sys.stdin.buffer, sys.stdout.buffer
def read():
    h = inp.read(4)
    if len(h) < 4: sys.exit(0)
    n, = struct.unpack('<I', h)
    return json.loads(inp.read(n))
def send(m):
    with open(os.environ['FAKE_LOG'], 'a') as f: f.write(m['type'] + '\n')
    b = json.dumps(m).encode()
    out.write(struct.pack('<I', len(b)) + b); out.flush()
while True:
    req = read()
    if req['type'] == 'shutdown': sys.exit(0)
    if req['type'] == 'hello':
        send({'type': 'hello_reply', 'protocol_version': 1, 'has_device': True, 'arch': os.environ['FAKE_ARCH'],
              'name': 'Fake GPU', 'uuid': os.environ.get('DICE_DEVICE_UUID', ''), 'pid': os.getpid()})
        continue
    if req['type'] != 'tune': continue
    good = [it for it in req['items'] if it['origin'] != 'bad']
    for it in req['items']:
        if it['origin'] == 'bad':
            send({'type': 'result', 'id': it['id'], 'outcome': 'compile_error', 'error': 'nvrtc: boom'})
    if req.get('progress') and 'FAKE_NO_PROGRESS' not in os.environ:
        send({'type': 'progress', 'compiled': [it['id'] for it in good]})
    if req['measure_baseline']: send({'type': 'baseline', 'baseline_us': 10.0, 'error': ''})
    for it in good:
        send({'type': 'begin', 'id': it['id']})
        if it['origin'] == 'wrong':
            send({'type': 'result', 'id': it['id'], 'outcome': 'verify_failed', 'error': 'max error 1.0'})
        else:
            send({'type': 'result', 'id': it['id'], 'outcome': 'verified',
                  'time_us': float(it['origin'].split(':')[1]), 'cubin': 'AAEC'})
    send({'type': 'done', 'error': ''})
)PY";

bool HavePython() {
  return ::access("/usr/bin/env", X_OK) == 0 && std::system("python3 -c 'pass' >/dev/null 2>&1") == 0;
}

// Writes the fake worker into a fresh directory; sets FAKE_LOG and FAKE_ARCH.
class WorkerProgressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HavePython()) GTEST_SKIP() << "python3 is needed for the scripted fake worker";
    std::string tmpl = ::testing::TempDir() + "dice-progress-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    script_ = dir_ + "/fake-worker.py";
    log_ = dir_ + "/events.log";
    {
      std::ofstream f(script_);
      f << kProgressWorker;
    }
    ASSERT_EQ(::chmod(script_.c_str(), 0755), 0);
    ASSERT_EQ(::setenv("FAKE_LOG", log_.c_str(), 1), 0);
    ASSERT_EQ(::setenv("FAKE_ARCH", TargetInfo{}.arch.c_str(), 1), 0);
  }
  void TearDown() override {
    ::unsetenv("FAKE_LOG");
    ::unsetenv("FAKE_ARCH");
    ::unsetenv("FAKE_NO_PROGRESS");
  }

  // The event types the worker sent, in order.
  std::vector<std::string> SentEvents() const {
    std::ifstream f(log_);
    std::vector<std::string> lines;
    for (std::string line; std::getline(f, line);) lines.push_back(line);
    return lines;
  }

  std::string dir_, script_, log_;
};

Candidate MakeCandidate(const std::string& origin, int i) {
  Candidate c;
  c.origin = origin;
  c.source = "// candidate " + std::to_string(i);
  c.plan.launches.push_back(KernelLaunch{"k", {1, 1, 1}, {32, 1, 1}, 0});
  return c;
}

worker::TuneRequest MakeRequest(const std::vector<std::string>& origins) {
  worker::TuneRequest req;
  req.graph_canonical = ir::Canonical(runtime_test::ReluGraph());
  req.inputs = {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4099})};
  for (size_t i = 0; i < origins.size(); ++i) {
    req.items.push_back(worker::TuneItem{static_cast<int>(10 + i), MakeCandidate(origins[i], static_cast<int>(i))});
  }
  return req;
}

// ------------------------------------------------------------ protocol

TEST(WorkerProgressProtocol, ProgressEventRoundTripsWithItsCompiledIds) {
  auto ev = worker::DecodeEvent(worker::EncodeProgress({3, 1, 4}));
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_EQ(ev->type, worker::EventType::kProgress);
  EXPECT_EQ(ev->compiled_ids, (std::vector<int>{3, 1, 4}));

  auto empty = worker::DecodeEvent(worker::EncodeProgress({}));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->compiled_ids.empty());
}

TEST(WorkerProgressProtocol, MalformedProgressEventIsCorrupt) {
  auto ev = worker::DecodeEvent(R"({"type":"progress","compiled":"3"})");
  ASSERT_FALSE(ev.ok());
  EXPECT_EQ(ev.status().code(), StatusCode::kCorrupt);
}

TEST(WorkerProgressProtocol, ProgressFlagTravelsOnlyWhenAskedAndOldRequestsReadWithout) {
  worker::TuneRequest req = MakeRequest({"ok:1"});
  const std::string plain = worker::EncodeTuneRequest(req);
  EXPECT_EQ(plain.find("\"progress\""), std::string::npos) << "a request without progress reads as before";
  auto decoded = worker::DecodeRequest(plain);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_FALSE(decoded->tune.progress);

  req.progress = true;
  auto asked = worker::DecodeRequest(worker::EncodeTuneRequest(req));
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  EXPECT_TRUE(asked->tune.progress);
}

// ------------------------------------------------------------ worker pool

TEST_F(WorkerProgressTest, PoolReportsCompileBatchBaselineAndEachResultInOrder) {
  WorkerPoolOptions o;
  o.worker_path = script_;
  o.startup_timeout_s = 20;
  WorkerPool pool(o);
  std::vector<WorkerTuneProgress> seen;
  auto res = pool.Tune(MakeRequest({"ok:7", "bad", "wrong", "ok:3"}), 10, 60,
                       [&](const WorkerTuneProgress& p) { seen.push_back(p); });
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  // compile_error result, progress, baseline, three results.
  ASSERT_EQ(seen.size(), 6u);
  for (const auto& p : seen) EXPECT_EQ(p.total, 4);
  EXPECT_EQ(seen[0].finished, 1);  // the compile error
  EXPECT_EQ(seen[0].compiled, 0);
  EXPECT_EQ(seen[1].compiled, 3);  // the progress event: known before any result
  EXPECT_EQ(seen[1].finished, 1);
  EXPECT_EQ(seen[1].baseline_us, 0.0);
  EXPECT_DOUBLE_EQ(seen[2].baseline_us, 10.0);
  EXPECT_EQ(seen[3].verified, 1);
  EXPECT_DOUBLE_EQ(seen[3].best_us, 7.0);
  EXPECT_EQ(seen[4].finished, 3);  // the wrong one: finished, not verified
  EXPECT_EQ(seen[4].verified, 1);
  const WorkerTuneProgress& last = seen.back();
  EXPECT_EQ(last.finished, 4);
  EXPECT_EQ(last.compiled, 3);
  EXPECT_EQ(last.verified, 2);
  EXPECT_EQ(last.timed, 2);
  EXPECT_DOUBLE_EQ(last.best_us, 3.0);
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_LE(seen[i - 1].finished, seen[i].finished) << i;
    EXPECT_LE(seen[i - 1].compiled, seen[i].compiled) << i;
  }
  EXPECT_EQ(res->results[0].outcome, Outcome::kVerified);
  EXPECT_EQ(res->results[1].outcome, Outcome::kCompileError);
  EXPECT_EQ(res->results[2].outcome, Outcome::kVerifyFailed);
}

TEST_F(WorkerProgressTest, PoolWithoutCallbackAsksForNoProgressEvents) {
  WorkerPoolOptions o;
  o.worker_path = script_;
  o.startup_timeout_s = 20;
  WorkerPool pool(o);
  auto res = pool.Tune(MakeRequest({"ok:7", "ok:3"}), 10, 60);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  const std::vector<std::string> sent = SentEvents();
  EXPECT_EQ(std::count(sent.begin(), sent.end(), "progress"), 0);
  EXPECT_EQ(std::count(sent.begin(), sent.end(), "result"), 2);
}

TEST_F(WorkerProgressTest, OlderWorkerWithoutProgressEventsIsCountedFromItsResults) {
  ASSERT_EQ(::setenv("FAKE_NO_PROGRESS", "1", 1), 0);
  WorkerPoolOptions o;
  o.worker_path = script_;
  o.startup_timeout_s = 20;
  WorkerPool pool(o);
  std::vector<WorkerTuneProgress> seen;
  auto res = pool.Tune(MakeRequest({"ok:5", "wrong"}), 10, 60, [&](const WorkerTuneProgress& p) { seen.push_back(p); });
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  ASSERT_EQ(seen.size(), 3u);  // baseline, two results
  EXPECT_EQ(seen[0].compiled, 0);
  EXPECT_EQ(seen[1].compiled, 1);  // a verified result compiled
  EXPECT_EQ(seen.back().compiled, 2);
  EXPECT_EQ(seen.back().finished, 2);
  EXPECT_EQ(seen.back().verified, 1);
  EXPECT_DOUBLE_EQ(seen.back().best_us, 5.0);
}

// ------------------------------------------------------------ tuner

TEST_F(WorkerProgressTest, TunerSendsAMeasureEventPerWorkerEventBeforeSelecting) {
  std::vector<Candidate> candidates = {MakeCandidate("ok:8", 0), MakeCandidate("ok:4", 1),
                                       MakeCandidate("bad", 2)};
  TuneOptions opt;
  opt.worker_path = script_;
  opt.margin = 0.05;
  Tuner tuner(nullptr, {std::make_shared<runtime_test::FixedGenerator>(candidates)}, opt);
  auto task = Task::Make(runtime_test::ReluGraph(), {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4099})},
                         TargetInfo{});
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  std::vector<TuneProgress> events;
  auto report = tuner.Tune(*task, nullptr, [&](const TuneProgress& p) { events.push_back(p); });
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->winner_origin, "ok:4");

  std::vector<TuneProgress> measure;
  for (const auto& e : events) {
    if (e.phase == TunePhase::kMeasure) measure.push_back(e);
  }
  // Handed over, compile error, compile batch, baseline, two results, answered.
  ASSERT_EQ(measure.size(), 7u);
  EXPECT_EQ(measure.front().finished, 0);
  EXPECT_EQ(measure.front().compiled, 0);
  EXPECT_EQ(measure[2].compiled, 2);
  EXPECT_DOUBLE_EQ(measure[3].baseline_us, 10.0);
  EXPECT_DOUBLE_EQ(measure[4].best_us, 8.0);
  EXPECT_DOUBLE_EQ(measure[5].best_us, 4.0);
  EXPECT_EQ(measure[5].finished, 3);
  for (size_t i = 1; i < measure.size(); ++i) {
    EXPECT_LE(measure[i - 1].finished, measure[i].finished) << i;
    EXPECT_LE(measure[i - 1].elapsed_s, measure[i].elapsed_s) << i;
  }
  for (const auto& e : measure) EXPECT_EQ(e.generated, 3);
  const TuneProgress& done = events.back();
  EXPECT_EQ(done.phase, TunePhase::kDone);
  EXPECT_EQ(done.verified, 2);
  EXPECT_DOUBLE_EQ(done.best_us, 4.0);
  EXPECT_DOUBLE_EQ(done.baseline_us, 10.0);
}

}  // namespace
}  // namespace dice::runtime
