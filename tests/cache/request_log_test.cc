// The cache server's request log (http_server.h "Logging"): one info line
// per request through spdlog with method, path, route, status, bytes and
// ms; the bearer token never appears in it.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

// spdlog as http_server.cc uses it (header-only on Debian's external fmt).
#ifndef SPDLOG_FMT_EXTERNAL
#define SPDLOG_FMT_EXTERNAL 1
#endif
#if !defined(FMT_SHARED) && !defined(FMT_HEADER_ONLY)
#define FMT_HEADER_ONLY 1
#endif
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>

#include "dice/cache/http_client.h"
#include "dice/cache/http_server.h"
#include "dice/cache/store.h"

namespace dice::cache {
namespace {

namespace fs = std::filesystem;

constexpr char kToken[] = "tok-6f1c9e0d-never-in-a-log";

WinnerRecord MakeRecord() {
  WinnerRecord r;
  r.task_key = std::string(63, 'a') + "1";
  r.graph_canonical = "dice-ir v1\ninput %0 f32 rank=2\n%1 = relu(%0)\noutput %1\n";
  r.input_specs = "f32[8,8]";
  r.arch = "sm_90";
  r.gpu_name = "NVIDIA H200";
  r.origin = "template:x";
  r.candidate_hash = "c1";
  r.source = "__global__ void k() {}";
  r.cubin = std::string("\x7f" "ELF\0", 5);
  r.launch_plan_json = "{}";
  r.baseline_us = 2;
  r.best_us = 1;
  r.speedup = 2;
  r.versions_json = "{}";
  r.content_hash = ContentHash(r);
  return r;
}

// Routes spdlog's default logger into a string for the test's lifetime.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink->set_pattern("%l %v");
    auto logger = std::make_shared<spdlog::logger>("captured", sink);
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string Text() {
    spdlog::default_logger()->flush();
    return out_.str();
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream out_;
};

class RequestLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dice-reqlog-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST_F(RequestLogTest, OneInfoLinePerRequestWithMethodRouteStatusBytesAndMs) {
  CapturedLog log;
  {
    CacheServer server;
    ASSERT_TRUE(server.Start(dir_ + "/kernels.db", "127.0.0.1", 0, kToken).ok());
    CacheClient client(server.url(), kToken);
    ASSERT_TRUE(*client.Put(MakeRecord()));
    auto got = client.Get(MakeRecord().task_key);
    ASSERT_TRUE(got.ok() && got->has_value());
    httplib::Client raw("127.0.0.1", server.port());
    auto missing = raw.Get("/v1/kernels/" + std::string(64, 'b'));
    ASSERT_TRUE(missing);
    EXPECT_EQ(missing->status, 404);
    server.Stop();  // every answer was logged before Stop returns
  }
  const std::string text = log.Text();
  const std::regex put(R"(info dice cache serve: PUT /v1/kernels/a{63}1 route=put_kernel status=201 bytes=\d+ in=\d+ ms=\d+\.\d\d)");
  const std::regex get(R"(info dice cache serve: GET /v1/kernels/a{63}1 route=get_kernel status=200 bytes=\d+ in=0 ms=\d+\.\d\d)");
  const std::regex not_found(R"(info dice cache serve: GET /v1/kernels/b{64} route=get_kernel status=404 bytes=\d+)");
  EXPECT_TRUE(std::regex_search(text, put)) << text;
  EXPECT_TRUE(std::regex_search(text, get)) << text;
  EXPECT_TRUE(std::regex_search(text, not_found)) << text;
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_EQ(lines, 3u) << text;
}

TEST_F(RequestLogTest, BearerTokensNeverReachTheLog) {
  CapturedLog log;
  {
    CacheServer server;
    ASSERT_TRUE(server.Start(dir_ + "/kernels.db", "127.0.0.1", 0, kToken).ok());
    httplib::Client raw("127.0.0.1", server.port());
    const httplib::Headers good = {{"Authorization", std::string("Bearer ") + kToken}};
    const httplib::Headers wrong = {{"Authorization", "Bearer wrong-tok-3b7a"}};
    auto put = raw.Put(("/v1/kernels/" + MakeRecord().task_key).c_str(), good,
                       WinnerToWireJson(MakeRecord(), true), "application/json");
    ASSERT_TRUE(put);
    EXPECT_EQ(put->status, 201);
    auto refused = raw.Put(("/v1/kernels/" + MakeRecord().task_key).c_str(), wrong,
                           WinnerToWireJson(MakeRecord(), true), "application/json");
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 403);
    // A token put into the query string stays out of the log as well.
    auto list = raw.Get((std::string("/v1/kernels?token=") + kToken).c_str(), good);
    ASSERT_TRUE(list);
    EXPECT_EQ(list->status, 200);
    // A path with a newline cannot forge a second log line.
    auto forged = raw.Get("/v1/kernels/x%0ainfo%20forged");
    ASSERT_TRUE(forged);
    server.Stop();
  }
  const std::string text = log.Text();
  EXPECT_NE(text.find("route=put_kernel status=201"), std::string::npos) << text;
  EXPECT_NE(text.find("route=put_kernel status=403"), std::string::npos) << text;
  EXPECT_NE(text.find("route=list_kernels status=200"), std::string::npos) << text;
  EXPECT_EQ(text.find(kToken), std::string::npos) << text;
  EXPECT_EQ(text.find("wrong-tok-3b7a"), std::string::npos) << text;
  EXPECT_EQ(text.find("Bearer"), std::string::npos) << text;
  EXPECT_EQ(text.find("\ninfo forged"), std::string::npos) << text;
  EXPECT_NE(text.find("/v1/kernels/x\\x0ainfo forged"), std::string::npos) << text;
}

}  // namespace
}  // namespace dice::cache
