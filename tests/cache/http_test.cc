// The HTTP cache (http_server.h / http_client.h) against a real server on
// 127.0.0.1 with an ephemeral port. Malformed requests go through a raw
// httplib::Client so that nothing in CacheClient can tidy them up.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "dice/cache/http_client.h"
#include "dice/cache/http_server.h"
#include "dice/cache/store.h"
#include "cache_test_support.h"

namespace dice::cache {
namespace {

using testing::ExpectSameRecord;

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr char kToken[] = "s3cret-token";

// A 64-hex key that differs per `n`.
std::string Key(int n) {
  std::string k(64, '0');
  std::string tail = std::to_string(n);
  k.replace(64 - tail.size(), tail.size(), tail);
  k[0] = 'a';
  return k;
}

// A cubin-like payload with every byte value, NULs included.
std::string BinaryCubin(int salt) {
  std::string bytes = "\x7f" "ELF";
  bytes.push_back('\0');
  for (int i = 0; i < 512; ++i) bytes.push_back(static_cast<char>((i * 7 + salt) & 0xff));
  bytes.push_back('\0');
  return bytes;
}

WinnerRecord MakeRecord(const std::string& key, double speedup, int salt = 0, const std::string& arch = "sm_90") {
  WinnerRecord r;
  r.task_key = key;
  r.graph_canonical = "graph(%x: f32[1024,8192]) { %y = relu(%x) }";
  r.input_specs = "f32[1024,8192]";
  r.arch = arch;
  r.gpu_name = "NVIDIA H200";
  r.origin = "template:elementwise/b256/v4";
  r.candidate_hash = "cand" + std::to_string(salt);
  r.source = "extern \"C\" __global__ void k(float* y) { /* " + std::to_string(salt) + " */ }";
  r.cubin = BinaryCubin(salt);
  r.launch_plan_json = R"({"grid":[128,1,1],"block":[256,1,1]})";
  r.baseline_us = 100.0;
  r.best_us = 100.0 / speedup;
  r.speedup = speedup;
  r.reduced_precision = false;
  r.versions_json = R"({"dice":"0.1"})";
  r.created_at = 1700000000 + salt;
  r.content_hash = ContentHash(r);
  return r;
}

class HttpCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dice-http-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    db_ = (fs::path(dir_) / "kernels.db").string();
    StartServer();
  }
  void TearDown() override {
    server_.Stop();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void StartServer(size_t max_body = kDefaultMaxBodyBytes, const std::string& token = kToken) {
    Status st = server_.Start(db_, "127.0.0.1", 0, token, max_body);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_GT(server_.port(), 0);
  }
  httplib::Client Raw() {
    httplib::Client cli("127.0.0.1", server_.port());
    cli.set_connection_timeout(std::chrono::seconds(5));
    cli.set_read_timeout(std::chrono::seconds(5));
    return cli;
  }
  httplib::Headers Auth(const std::string& token = kToken) { return {{"Authorization", "Bearer " + token}}; }
  // The entry as the database holds it (opened beside the server's Store).
  std::optional<WinnerRecord> InDatabase(const std::string& key) {
    auto store = Store::Open(db_);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    auto rec = (*store)->GetWinner(key);
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    return rec.ok() ? *rec : std::nullopt;
  }
  void ExpectHealthy() {
    auto cli = Raw();
    auto res = cli.Get("/v1/health");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    json j = json::parse(res->body);
    EXPECT_EQ(j["status"], "ok");
    EXPECT_EQ(j["schema"], kSchemaVersion);
  }

  std::string dir_, db_;
  CacheServer server_;
};


TEST(Base64Test, RoundTripsEveryByteAndRejectsBadText) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{255}, size_t{256}}) {
    auto back = Base64Decode(Base64Encode(all.substr(0, n)));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, all.substr(0, n));
  }
  EXPECT_FALSE(Base64Decode("abc").ok());
  EXPECT_FALSE(Base64Decode("ab!d").ok());
  EXPECT_FALSE(Base64Decode("a=bc").ok());
}

TEST(TaskKeyTest, AcceptsOnlyLowercaseHex64) {
  EXPECT_TRUE(IsValidTaskKey(Key(1)));
  std::string upper = Key(1);
  upper[1] = 'A';
  EXPECT_FALSE(IsValidTaskKey(upper));
  EXPECT_FALSE(IsValidTaskKey(Key(1).substr(1)));
  EXPECT_FALSE(IsValidTaskKey(".."));
  EXPECT_FALSE(IsValidTaskKey(Key(1).substr(0, 62) + "/."));
}

TEST_F(HttpCacheTest, PushPullRoundTripIsByteExact) {
  CacheClient client(server_.url(), kToken);
  auto schema = client.Health();
  ASSERT_TRUE(schema.ok()) << schema.status().ToString();
  EXPECT_EQ(*schema, kSchemaVersion);

  WinnerRecord rec = MakeRecord(Key(1), 2.5, 3);
  ASSERT_NE(rec.cubin.find('\0'), std::string::npos);
  auto stored = client.Put(rec);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_TRUE(*stored);

  auto got = client.Get(rec.task_key);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  ExpectSameRecord(**got, rec);

  auto db = InDatabase(rec.task_key);
  ASSERT_TRUE(db.has_value());
  EXPECT_EQ(db->cubin, rec.cubin);
}

TEST_F(HttpCacheTest, PutWithoutTokenIs401AndWritesNothing) {
  WinnerRecord rec = MakeRecord(Key(2), 2.0);
  auto cli = Raw();
  auto res = cli.Put("/v1/kernels/" + rec.task_key, WinnerToWireJson(rec, true), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_FALSE(InDatabase(rec.task_key).has_value());

  CacheClient anonymous(server_.url(), "");
  auto put = anonymous.Put(rec);
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.status().message().find("401"), std::string::npos) << put.status().ToString();
  EXPECT_NE(put.status().message().find(server_.url()), std::string::npos) << put.status().ToString();
  EXPECT_FALSE(InDatabase(rec.task_key).has_value());
}

TEST_F(HttpCacheTest, PutWithWrongTokenIs403AndWritesNothing) {
  WinnerRecord rec = MakeRecord(Key(3), 2.0);
  auto cli = Raw();
  auto res = cli.Put("/v1/kernels/" + rec.task_key, Auth("wrong-token"), WinnerToWireJson(rec, true),
                     "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  // A prefix of the right token is wrong too.
  res = cli.Put("/v1/kernels/" + rec.task_key, Auth(std::string(kToken).substr(0, 4)), WinnerToWireJson(rec, true),
                "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);

  CacheClient wrong(server_.url(), "wrong-token");
  auto put = wrong.Put(rec);
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.status().message().find("403"), std::string::npos) << put.status().ToString();
  EXPECT_FALSE(InDatabase(rec.task_key).has_value());
}

TEST_F(HttpCacheTest, ASecondServerOnAPortInUseIsABindError) {
  // cpp-httplib's default socket options set SO_REUSEPORT, under which the
  // second bind succeeds and the kernel splits connections between the two
  // databases; the server sets SO_REUSEADDR only.
  CacheServer second;
  const std::string other_db = (fs::path(dir_) / "other.db").string();
  Status st = second.Start(other_db, "127.0.0.1", server_.port(), kToken);
  EXPECT_FALSE(st.ok()) << "a second server bound port " << server_.port();
  EXPECT_NE(st.message().find("cannot bind 127.0.0.1:" + std::to_string(server_.port())), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("address in use"), std::string::npos) << st.message();
  second.Stop();
  ExpectHealthy();  // the first one still answers
}

TEST_F(HttpCacheTest, ServerWithoutTokenRefusesAllWrites) {
  server_.Stop();
  StartServer(kDefaultMaxBodyBytes, /*token=*/"");
  WinnerRecord rec = MakeRecord(Key(4), 2.0);
  auto cli = Raw();
  auto res = cli.Put("/v1/kernels/" + rec.task_key, Auth(""), WinnerToWireJson(rec, true), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_FALSE(InDatabase(rec.task_key).has_value());
}

TEST_F(HttpCacheTest, OversizedBodyIs413AndServerKeepsServing) {
  server_.Stop();
  StartServer(/*max_body=*/2048);
  WinnerRecord rec = MakeRecord(Key(5), 2.0);
  rec.cubin = std::string(8192, '\0');
  rec.content_hash = ContentHash(rec);
  auto cli = Raw();
  auto res = cli.Put("/v1/kernels/" + rec.task_key, Auth(), WinnerToWireJson(rec, true), "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 413);
  EXPECT_FALSE(InDatabase(rec.task_key).has_value());
  ExpectHealthy();

  // A small record still goes through on the same server.
  CacheClient client(server_.url(), kToken);
  WinnerRecord small = MakeRecord(Key(6), 2.0);
  small.cubin = std::string("\0\1\2", 3);
  auto put = client.Put(small);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_TRUE(*put);
}

TEST_F(HttpCacheTest, MalformedJsonIs400) {
  auto cli = Raw();
  for (const std::string& body : {std::string("{not json"), std::string("[1,2,3]"), std::string("{}"),
                                 std::string(R"({"task_key": 5})")}) {
    auto res = cli.Put("/v1/kernels/" + Key(7), Auth(), body, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << body;
    EXPECT_TRUE(json::parse(res->body).contains("error")) << res->body;
  }
  // Bad base64 in cubin_base64.
  json j = json::parse(WinnerToWireJson(MakeRecord(Key(7), 2.0), true));
  j["cubin_base64"] = "not*base64";
  auto res = cli.Put("/v1/kernels/" + Key(7), Auth(), j.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_FALSE(InDatabase(Key(7)).has_value());
  ExpectHealthy();
}

TEST_F(HttpCacheTest, WrongContentHashIs400) {
  WinnerRecord rec = MakeRecord(Key(8), 2.0);
  json j = json::parse(WinnerToWireJson(rec, true));
  j["source"] = rec.source + "// tampered";
  auto cli = Raw();
  auto res = cli.Put("/v1/kernels/" + rec.task_key, Auth(), j.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(res->body.find("content hash mismatch"), std::string::npos) << res->body;
  EXPECT_FALSE(InDatabase(rec.task_key).has_value());
}

TEST_F(HttpCacheTest, BodyKeyDifferentFromPathKeyIs400) {
  WinnerRecord rec = MakeRecord(Key(9), 2.0);
  auto cli = Raw();
  auto res = cli.Put("/v1/kernels/" + Key(10), Auth(), WinnerToWireJson(rec, true), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_FALSE(InDatabase(Key(9)).has_value());
  EXPECT_FALSE(InDatabase(Key(10)).has_value());
}

TEST_F(HttpCacheTest, UnknownKeyIs404AndClientGetsNothing) {
  auto cli = Raw();
  auto res = cli.Get("/v1/kernels/" + Key(11));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  CacheClient client(server_.url(), "");
  auto got = client.Get(Key(11));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(got->has_value());
}

TEST_F(HttpCacheTest, PathTricksAre4xxAndServerKeepsServing) {
  CacheClient client(server_.url(), kToken);
  ASSERT_TRUE(client.Put(MakeRecord(Key(12), 2.0)).ok());
  auto cli = Raw();
  cli.set_url_encode(false);  // send the paths exactly as written
  std::string upper = Key(12);
  upper[0] = 'A';
  for (const std::string& path :
       {std::string("/v1/kernels/../kernels.db"), std::string("/v1/kernels/%2e%2e/kernels.db"),
        std::string("/v1/kernels/%2e%2e"), std::string("/v1/kernels/..%2fkernels.db"),
        std::string("/v1/kernels/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd"), std::string("/v1/kernels/not-hex"), upper,
        std::string("/v1/kernels/") + Key(12) + "/..", std::string("/../../etc/passwd")}) {
    auto res = cli.Get(path);
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    EXPECT_GE(res->status, 400) << path;
    EXPECT_LT(res->status, 500) << path;
    EXPECT_EQ(res->body.find("SQLite format"), std::string::npos) << path;
    EXPECT_EQ(res->body.find("root:"), std::string::npos) << path;
  }
  auto res = cli.Put("/v1/kernels/%2e%2e", Auth(), WinnerToWireJson(MakeRecord(Key(13), 2.0), true),
                     "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  ExpectHealthy();
  auto got = client.Get(Key(12));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->has_value());
}

TEST_F(HttpCacheTest, ConcurrentWritersLeaveOneEntryWithTheBetterSpeedup) {
  const std::string key = Key(14);
  WinnerRecord slow = MakeRecord(key, 1.5, /*salt=*/1);
  WinnerRecord fast = MakeRecord(key, 3.0, /*salt=*/2);
  std::vector<std::thread> writers;
  std::vector<std::string> errors(2);
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      CacheClient client(server_.url(), kToken, std::chrono::seconds(10));
      const WinnerRecord& mine = w == 0 ? slow : fast;
      for (int i = 0; i < 25; ++i) {
        auto put = client.Put(mine);
        if (!put.ok()) errors[w] = put.status().ToString();
      }
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");

  CacheClient client(server_.url(), "");
  auto got = client.Get(key);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  ExpectSameRecord(**got, fast);
  auto all = client.List();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_DOUBLE_EQ((*all)[0].speedup, 3.0);

  // A slower entry later is kept out and reported as such.
  CacheClient writer(server_.url(), kToken);
  auto again = writer.Put(slow);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(*again);
}

TEST_F(HttpCacheTest, StopThenStartOnSameDatabaseKeepsEntries) {
  WinnerRecord rec = MakeRecord(Key(15), 2.0, 5);
  {
    CacheClient client(server_.url(), kToken);
    ASSERT_TRUE(client.Put(rec).ok());
  }
  const std::string old_url = server_.url();
  server_.Stop();
  EXPECT_FALSE(server_.running());
  CacheClient dead(old_url, "", std::chrono::milliseconds(500));
  auto none = dead.Get(rec.task_key);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find(old_url), std::string::npos) << none.status().ToString();

  StartServer();
  CacheClient client(server_.url(), kToken);
  auto got = client.Get(rec.task_key);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  ExpectSameRecord(**got, rec);
}

TEST_F(HttpCacheTest, ListFiltersByArchAndPagesWithoutPayload) {
  CacheClient client(server_.url(), kToken);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client.Put(MakeRecord(Key(20 + i), 2.0, i, "sm_90")).ok());
  ASSERT_TRUE(client.Put(MakeRecord(Key(30), 2.0, 9, "sm_80")).ok());

  auto cli = Raw();
  auto res = cli.Get("/v1/kernels?arch=sm_90&page=2&page_size=2");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  json j = json::parse(res->body);
  EXPECT_EQ(j["total"], 3);
  ASSERT_EQ(j["entries"].size(), 1u);
  EXPECT_EQ(j["entries"][0]["arch"], "sm_90");
  EXPECT_FALSE(j["entries"][0].contains("source"));
  EXPECT_FALSE(j["entries"][0].contains("cubin_base64"));

  for (const char* bad : {"/v1/kernels?page=0", "/v1/kernels?page=x", "/v1/kernels?page_size=100000"}) {
    auto r = cli.Get(bad);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad;
  }

  auto sm90 = client.List("sm_90");
  ASSERT_TRUE(sm90.ok()) << sm90.status().ToString();
  EXPECT_EQ(sm90->size(), 3u);
  for (const auto& r : *sm90) {
    EXPECT_EQ(r.arch, "sm_90");
    EXPECT_TRUE(r.cubin.empty());
  }
  auto all = client.List();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 4u);
}

TEST_F(HttpCacheTest, MetricsCountRequestsByRouteAndCodeAndEntries) {
  CacheClient client(server_.url(), kToken);
  ASSERT_TRUE(client.Put(MakeRecord(Key(40), 2.0)).ok());
  ASSERT_TRUE(client.Get(Key(41)).ok());  // 404
  auto cli = Raw();
  auto res = cli.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find(R"(dice_cache_http_requests_total{route="put_kernel",code="201"} 1)"), std::string::npos)
      << res->body;
  EXPECT_NE(res->body.find(R"(dice_cache_http_requests_total{route="get_kernel",code="404"} 1)"), std::string::npos)
      << res->body;
  EXPECT_NE(res->body.find("dice_cache_entries 1\n"), std::string::npos) << res->body;
}

// A server that lies about an entry's content: the client must not return it.
TEST(HttpClientTest, RejectsEntryWhoseBytesDoNotMatchItsContentHash) {
  WinnerRecord rec = MakeRecord(Key(50), 2.0);
  json j = json::parse(WinnerToWireJson(rec, true));
  j["cubin_base64"] = Base64Encode(rec.cubin + "X");  // damaged, hash unchanged
  httplib::Server fake;
  fake.Get(R"(/v1/kernels/(.*))", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(j.dump(), "application/json");
  });
  int port = fake.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread loop([&] { fake.listen_after_bind(); });
  while (!fake.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  CacheClient client("http://127.0.0.1:" + std::to_string(port), "");
  auto got = client.Get(rec.task_key);
  fake.stop();
  loop.join();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kCorrupt) << got.status().ToString();
  EXPECT_NE(got.status().message().find("content hash mismatch"), std::string::npos);
}

TEST(HttpClientTest, RejectsInvalidKeyWithoutSendingARequest) {
  CacheClient client("http://127.0.0.1:1", "");
  auto got = client.Get("../kernels.db");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dice::cache
