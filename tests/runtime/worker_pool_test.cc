// Tests of the worker process machinery (worker_pool.h, worker_protocol.h)
// and of the Tuner's compile-only mode. CPU only: they spawn ordinary
// programs (/bin/sleep, /bin/false, a scripted fake worker) and the real
// dice-worker, which must answer "no device" on a machine without a GPU.
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "relu_graph.h"
#include "dice/cache/store.h"
#include "dice/generator/templates.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/core/task.h"
#include "dice/runtime/tuner.h"
#include "dice/runtime/worker_pool.h"
#include "dice/runtime/worker_protocol.h"

namespace dice::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// A process that no longer exists and is not a zombie of ours.
bool ProcessIsGone(int pid) {
  int status = 0;
  errno = 0;
  pid_t r = ::waitpid(pid, &status, WNOHANG);
  bool not_our_child = (r == -1 && errno == ECHILD);
  bool no_such_process = (::kill(pid, 0) == -1 && errno == ESRCH);
  return not_our_child && no_such_process;
}

std::string MakeTempDir() {
  std::string tmpl = ::testing::TempDir() + "dice-worker-test-XXXXXX";
  char* dir = ::mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  return tmpl;
}

using runtime_test::ReluGraph;

Task ReluTask() {
  auto task = Task::Make(ReluGraph(), {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4099})}, TargetInfo{});
  EXPECT_TRUE(task.ok()) << task.status().ToString();
  return *task;
}

// ------------------------------------------------------------ protocol

TEST(WorkerProtocol, TuneRequestRoundTripsThroughJson) {
  worker::TuneRequest req;
  req.graph_canonical = ir::Canonical(ReluGraph());
  req.inputs = {ir::TensorSpec::Contiguous(ir::DType::kBFloat16, {3, 5})};
  req.arch = "sm_90";
  req.trials = 7;
  req.allow_reduced_precision = true;
  req.budget_s = 12.5;
  req.measure_baseline = false;
  req.known_baseline_us = 42.25;
  req.captured_path = "/dev/shm/x";
  req.captured_bytes = 30;
  Candidate c;
  c.origin = "hand:relu";
  c.source = "extern \"C\" __global__ void k(const float* x, float* y) {}";
  c.plan.launches.push_back(KernelLaunch{"k", {17, 1, 1}, {256, 1, 1}, 64});
  c.extra_flags = {"-DVEC=4"};
  c.reduced_precision = true;
  req.items.push_back(worker::TuneItem{9, c});

  auto back = worker::DecodeRequest(worker::EncodeTuneRequest(req));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->type, worker::RequestType::kTune);
  const worker::TuneRequest& r = back->tune;
  EXPECT_EQ(r.graph_canonical, req.graph_canonical);
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.inputs[0], req.inputs[0]);
  EXPECT_EQ(r.trials, 7);
  EXPECT_TRUE(r.allow_reduced_precision);
  EXPECT_DOUBLE_EQ(r.budget_s, 12.5);
  EXPECT_FALSE(r.measure_baseline);
  EXPECT_DOUBLE_EQ(r.known_baseline_us, 42.25);
  EXPECT_EQ(r.captured_path, "/dev/shm/x");
  EXPECT_EQ(r.captured_bytes, 30u);
  ASSERT_EQ(r.items.size(), 1u);
  EXPECT_EQ(r.items[0].id, 9);
  EXPECT_EQ(r.items[0].candidate.Hash(), c.Hash());
  EXPECT_EQ(r.items[0].candidate.origin, "hand:relu");
}

TEST(WorkerProtocol, ExtensionCandidateWithoutLaunchPlanRoundTrips) {
  // An extension-form candidate launches its own kernels: no plan. The
  // request must still decode (the H200 run found the worker rejecting it).
  worker::TuneRequest req;
  req.graph_canonical = ir::Canonical(ReluGraph());
  req.inputs = {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4})};
  req.arch = "sm_90";
  Candidate c;
  c.origin = "ext:relu";
  c.form = CandidateForm::kExtension;
  c.source = "torch::Tensor dice_forward(torch::Tensor in0) { return in0.relu(); }";
  req.items.push_back(worker::TuneItem{3, c});
  auto back = worker::DecodeRequest(worker::EncodeTuneRequest(req));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->tune.items.size(), 1u);
  EXPECT_EQ(back->tune.items[0].candidate.form, CandidateForm::kExtension);
  EXPECT_TRUE(back->tune.items[0].candidate.plan.launches.empty());
  EXPECT_EQ(back->tune.items[0].candidate.Hash(), c.Hash());
  // A device-form candidate without launches is still malformed.
  c.form = CandidateForm::kDevice;
  req.items = {worker::TuneItem{4, c}};
  EXPECT_EQ(worker::DecodeRequest(worker::EncodeTuneRequest(req)).status().code(), StatusCode::kCorrupt);
}

TEST(WorkerProtocol, ResultCarriesBinaryCubinExactly) {
  for (size_t len : {0u, 1u, 2u, 3u, 4u, 255u, 256u, 1001u}) {
    worker::CandidateResult res;
    res.id = 3;
    res.outcome = Outcome::kVerified;
    res.time_us = 12.5;
    for (size_t i = 0; i < len; ++i) res.cubin.push_back(static_cast<char>(i * 7 + 1));
    auto ev = worker::DecodeEvent(worker::EncodeResult(res));
    ASSERT_TRUE(ev.ok()) << ev.status().ToString();
    ASSERT_EQ(ev->type, worker::EventType::kResult);
    EXPECT_EQ(ev->result.cubin, res.cubin) << "length " << len;
    EXPECT_EQ(ev->result.id, 3);
    EXPECT_EQ(ev->result.outcome, Outcome::kVerified);
    EXPECT_DOUBLE_EQ(ev->result.time_us, 12.5);
  }
}

TEST(WorkerProtocol, ResultOutcomeTravelsAsItsNameAndUnknownNamesAreCorrupt) {
  worker::CandidateResult res;
  res.outcome = Outcome::kVerifyFailed;
  const std::string wire = worker::EncodeResult(res);
  EXPECT_NE(wire.find("\"outcome\":\"verify_failed\""), std::string::npos) << wire;
  auto ev = worker::DecodeEvent(wire);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_EQ(ev->result.outcome, Outcome::kVerifyFailed);

  std::string bad = wire;
  bad.replace(bad.find("verify_failed"), 13, "verify_faile");
  auto rejected = worker::DecodeEvent(bad);
  ASSERT_FALSE(rejected.ok());
  EXPECT_EQ(rejected.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(rejected.status().message().find("verify_faile"), std::string::npos) << rejected.status().message();
}

TEST(WorkerProtocol, RejectsMalformedMessages) {
  EXPECT_EQ(worker::DecodeEvent("not json").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(worker::DecodeEvent(R"({"type":"teleport"})").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(worker::DecodeEvent(R"({"type":"begin"})").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(worker::DecodeRequest(R"({"type":"tune","graph":"x"})").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(worker::Base64Decode("abc").status().code(), StatusCode::kCorrupt);
}

TEST(WorkerProtocol, FramesSurviveSocketAndTimeOutWhenSilent) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::string big(300000, 'x');  // larger than a socket buffer: needs a reader
  ASSERT_TRUE(worker::WriteFrame(sv[0], "hello").ok());
  auto a = worker::ReadFrame(sv[1], 1000);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, "hello");

  auto t0 = Clock::now();
  auto silent = worker::ReadFrame(sv[1], 200);
  EXPECT_EQ(silent.status().code(), StatusCode::kTimeout);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);

  // An oversized length prefix is rejected, not allocated.
  const unsigned char huge[4] = {0xff, 0xff, 0xff, 0xff};
  ASSERT_EQ(::write(sv[0], huge, 4), 4);
  EXPECT_EQ(worker::ReadFrame(sv[1], 1000).status().code(), StatusCode::kCorrupt);

  ::close(sv[0]);
  EXPECT_EQ(worker::ReadFrame(sv[1], 1000).status().code(), StatusCode::kCrashed);
  // Writing to a closed peer is an error value, not SIGPIPE.
  EXPECT_EQ(worker::WriteFrame(sv[1], big).code(), StatusCode::kCrashed);
  ::close(sv[1]);
}

// ------------------------------------------------------------ processes

TEST(WorkerPool, ReportsMissingWorkerBinaryClearly) {
  WorkerPoolOptions o;
  o.worker_path = "/nonexistent/dir/dice-worker";
  WorkerPool pool(o);
  auto h = pool.Hello();
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kNotFound);
  EXPECT_NE(h.status().message().find("/nonexistent/dir/dice-worker"), std::string::npos);
  EXPECT_NE(h.status().message().find("DICE_WORKER"), std::string::npos);
}

TEST(WorkerPool, KillsHangingWorkerOnTimeoutAndLeavesNoZombie) {
  auto w = WorkerProcess::Spawn("/bin/sleep", {"1000"});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const int pid = (*w)->pid();
  ASSERT_GT(pid, 0);
  ASSERT_TRUE((*w)->Send(worker::EncodeHelloRequest()).ok());
  auto t0 = Clock::now();
  auto reply = (*w)->Receive(0.3);
  double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kTimeout);
  EXPECT_GE(waited, 0.25);
  EXPECT_LT(waited, 5.0);
  EXPECT_FALSE((*w)->alive());
  EXPECT_TRUE(ProcessIsGone(pid)) << "pid " << pid << " still exists or is an unreaped zombie";
}

TEST(WorkerPool, HelloTimesOutOnSilentWorker) {
  WorkerPoolOptions o;
  o.worker_path = "/bin/sleep";
  o.args = {"1000"};
  o.startup_timeout_s = 0.3;
  WorkerPool pool(o);
  auto h = pool.Hello();
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kTimeout);
}

TEST(WorkerPool, ReportsWorkerThatExitsAsCrashedWithItsStatus) {
  WorkerPoolOptions o;
  o.worker_path = "/bin/false";
  WorkerPool pool(o);
  auto h = pool.Hello();
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kCrashed);
  EXPECT_NE(h.status().message().find("exited with status 1"), std::string::npos) << h.status().message();
}

TEST(WorkerPool, ReportsWorkerKilledBySignalAsCrashed) {
  auto w = WorkerProcess::Spawn("/bin/sh", {"-c", "kill -TERM $$"});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const int pid = (*w)->pid();
  auto reply = (*w)->Receive(10);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kCrashed);
  EXPECT_NE(reply.status().message().find("signal 15"), std::string::npos) << reply.status().message();
  EXPECT_TRUE(ProcessIsGone(pid));
}

// A scripted worker speaking the real protocol: candidates whose origin is
// "crash" kill the worker with SIGKILL after "begin", "hang" never finish,
// "bad" fail to compile, anything else verifies in 5 µs. Baseline 10 µs.
constexpr const char* kFakeWorker = R"PY(#!/usr/bin/env python3
import json, os, signal, struct, sys, time
inp, out = sys.stdin.buffer, sys.stdout.buffer
def read():
    h = inp.read(4)
    if len(h) < 4: sys.exit(0)
    n, = struct.unpack('<I', h)
    return json.loads(inp.read(n))
def send(m):
    b = json.dumps(m).encode()
    out.write(struct.pack('<I', len(b)) + b); out.flush()
while True:
    req = read()
    if req['type'] == 'shutdown': sys.exit(0)
    if req['type'] != 'tune': continue
    with open(os.environ['FAKE_LOG'], 'a') as f: f.write(','.join(str(i['id']) for i in req['items']) + '\n')
    for it in req['items']:
        if it['origin'] == 'bad':
            send({'type': 'result', 'id': it['id'], 'outcome': 'compile_error', 'error': 'nvrtc: boom'})
    if req['measure_baseline']: send({'type': 'baseline', 'baseline_us': 10.0, 'error': ''})
    for it in req['items']:
        if it['origin'] == 'bad': continue
        send({'type': 'begin', 'id': it['id']})
        if it['origin'] == 'crash': os.kill(os.getpid(), signal.SIGKILL)
        if it['origin'] == 'hang': time.sleep(1000)
        send({'type': 'result', 'id': it['id'], 'outcome': 'verified', 'time_us': 5.0, 'cubin': 'AAEC'})
    send({'type': 'done', 'error': ''})
)PY";

TEST(WorkerPool, TuneRecordsCrashAndHangThenResubmitsTheRest) {
  if (::access("/usr/bin/env", X_OK) != 0 || std::system("python3 -c 'pass' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 is needed for the scripted fake worker";
  }
  const std::string dir = MakeTempDir();
  const std::string script = dir + "/fake-worker.py";
  const std::string log = dir + "/requests.log";
  {
    std::ofstream f(script);
    f << kFakeWorker;
  }
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  ASSERT_EQ(::setenv("FAKE_LOG", log.c_str(), 1), 0);

  WorkerPoolOptions o;
  o.worker_path = script;
  o.startup_timeout_s = 20;
  WorkerPool pool(o);

  worker::TuneRequest req;
  req.graph_canonical = ir::Canonical(ReluGraph());
  req.inputs = {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4099})};
  const std::vector<std::string> origins = {"ok", "crash", "bad", "ok", "hang", "ok"};
  for (size_t i = 0; i < origins.size(); ++i) {
    Candidate c;
    c.origin = origins[i];
    c.source = "// " + std::to_string(i);
    c.plan.launches.push_back(KernelLaunch{"k", {1, 1, 1}, {32, 1, 1}, 0});
    req.items.push_back(worker::TuneItem{static_cast<int>(100 + i), c});
  }
  auto t0 = Clock::now();
  auto res = pool.Tune(req, /*candidate_timeout_s=*/1.0, /*budget_s=*/60);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 30.0);
  ASSERT_EQ(res->results.size(), origins.size());
  const std::vector<Outcome> expected = {Outcome::kVerified, Outcome::kCrashed, Outcome::kCompileError,
                                         Outcome::kVerified, Outcome::kTimeout,  Outcome::kVerified};
  for (size_t i = 0; i < origins.size(); ++i) {
    EXPECT_EQ(res->results[i].id, static_cast<int>(100 + i));
    EXPECT_EQ(res->results[i].outcome, expected[i]) << "candidate " << i << ": " << res->results[i].error;
  }
  EXPECT_NE(res->results[1].error.find("signal 9"), std::string::npos) << res->results[1].error;
  EXPECT_EQ(res->results[0].cubin, std::string("\x00\x01\x02", 3));
  EXPECT_DOUBLE_EQ(res->baseline_us, 10.0);
  EXPECT_EQ(res->respawns, 2);

  // Three workers served the batch; each got only what was still open.
  std::ifstream f(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "100,101,102,103,104,105");
  EXPECT_EQ(lines[1], "103,104,105");
  EXPECT_EQ(lines[2], "105");
  ::unsetenv("FAKE_LOG");
}

TEST(WorkerPool, RealWorkerAnswersHelloWithoutCrashing) {
  WorkerPoolOptions o;  // default path: the build tree's dice-worker
  WorkerPool pool(o);
  auto h = pool.Hello();
  ASSERT_TRUE(h.ok()) << h.status().ToString() << " (worker path " << ResolveWorkerPath("") << ")";
  EXPECT_EQ(h->protocol_version, worker::kProtocolVersion);
  EXPECT_GT(h->pid, 0);
  EXPECT_GT(h->nvrtc_version, 0);
  EXPECT_FALSE(h->torch_version.empty());
  if (CudaDriver::Get().ok()) {
    EXPECT_TRUE(h->has_device);
    EXPECT_EQ(h->device.arch.rfind("sm_", 0), 0u);
  } else {
    EXPECT_FALSE(h->has_device);
    EXPECT_FALSE(h->no_device_reason.empty());
    EXPECT_NE(h->no_device_reason.find("NoDevice"), std::string::npos) << h->no_device_reason;
  }
}

// ------------------------------------------------------------ tuner

TEST(Tuner, CompileOnlyCompilesTemplateCandidatesAndStoresNothing) {
  const std::string dir = MakeTempDir();
  auto store = cache::Store::Open(cache::DatabasePath(dir));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  TuneOptions opt;
  opt.compile_only = true;
  opt.max_candidates = 4;
  Tuner tuner(store->get(), {std::make_shared<generator::TemplateGenerator>()}, opt);
  Task task = ReluTask();
  auto report = tuner.Tune(task);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_GT(report->tried, 0);
  EXPECT_LE(report->tried, 4);
  EXPECT_GT(report->compiled, 0);
  EXPECT_EQ(report->verified, 0);
  EXPECT_TRUE(report->winner_origin.empty());
  EXPECT_FALSE(report->from_cache);
  EXPECT_EQ(report->task_key, task.Key());
  for (const auto& o : report->outcomes) {
    EXPECT_TRUE(o.outcome == Outcome::kCompiled || o.outcome == Outcome::kCompileError) << o.origin << ": " << o.outcome;
    if (o.outcome == Outcome::kCompiled) {
      EXPECT_GT(o.compile_ms, 0.0);
    }
  }
  auto winner = (*store)->GetWinner(task.Key());
  ASSERT_TRUE(winner.ok());
  EXPECT_FALSE(winner->has_value());
  auto attempts = (*store)->ListAttempts(task.Key());
  ASSERT_TRUE(attempts.ok());
  EXPECT_TRUE(attempts->empty());
}

TEST(Tuner, TuningWithoutGpuFailsWithNoDevice) {
  if (CudaDriver::Get().ok()) GTEST_SKIP() << "a GPU is present";
  TuneOptions opt;
  Tuner tuner(nullptr, {std::make_shared<generator::TemplateGenerator>()}, opt);
  auto report = tuner.Tune(ReluTask());
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kNoDevice) << report.status().ToString();
}

TEST(Tuner, RejectsCapturedInputsOfWrongSize) {
  TuneOptions opt;
  opt.compile_only = true;
  Tuner tuner(nullptr, {std::make_shared<generator::TemplateGenerator>()}, opt);
  std::vector<std::string> captured = {std::string(10, '\0')};
  auto report = tuner.Tune(ReluTask(), &captured);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dice::runtime
