// The binary wire form of a winner (http_server.h: WinnerToWireBinary,
// WinnerFromWireBinary, AcceptsWinnerBinary) and its negotiation on
// GET /v1/kernels/{key}: asked for by Accept, JSON for everyone else, and
// CacheClient::Get reading either (an old server answers JSON whatever it
// is asked).
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
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

constexpr char kToken[] = "wire-binary-token";

std::string Key(int n) {
  std::string k(64, '0');
  const std::string tail = std::to_string(n);
  k.replace(64 - tail.size(), tail.size(), tail);
  k[0] = 'b';
  return k;
}

// A record whose cubin holds every byte value, '\n' and NULs included, and
// whose text fields hold newlines and quotes (escaped in the header line).
WinnerRecord MakeRecord(int n, size_t cubin_bytes = 1000) {
  WinnerRecord r;
  r.task_key = Key(n);
  r.graph_canonical = "dice-ir v1\ninput %0 f32 rank=2\n%1 = relu(%0)\noutput %1\n";
  r.input_specs = "f32[8,8]";
  r.arch = "sm_90";
  r.gpu_name = "NVIDIA H200";
  r.origin = "template:\"quoted\"";
  r.candidate_hash = "cand" + std::to_string(n);
  r.source = "extern \"C\" __global__ void k() {\n  // line two\n}\n";
  for (size_t i = 0; i < cubin_bytes; ++i) r.cubin.push_back(static_cast<char>((i * 31 + static_cast<size_t>(n)) & 0xff));
  r.launch_plan_json = R"({"grid":[1,1,1]})";
  r.baseline_us = 10;
  r.best_us = 5;
  r.speedup = 2;
  r.reduced_precision = true;
  r.versions_json = "{}";
  r.created_at = 1700000000 + n;
  r.content_hash = ContentHash(r);
  return r;
}


TEST(WireBinaryTest, RoundTripsEveryByteAndEverySize) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{1000}, size_t{300000}}) {
    const WinnerRecord rec = MakeRecord(static_cast<int>(size), size);
    const std::string body = WinnerToWireBinary(rec);
    // One header line, then the cubin as it is.
    const size_t nl = body.find('\n');
    ASSERT_NE(nl, std::string::npos);
    EXPECT_EQ(body.substr(nl + 1), rec.cubin);
    EXPECT_EQ(json::parse(body.substr(0, nl))["cubin_bytes"], size);
    auto back = WinnerFromWireBinary(body);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    ExpectSameRecord(*back, rec);
  }
}

TEST(WireBinaryTest, RefusesMalformedBodiesNamingWhy) {
  const WinnerRecord rec = MakeRecord(1);
  const std::string good = WinnerToWireBinary(rec);
  const size_t nl = good.find('\n');
  const std::string header = good.substr(0, nl);
  auto with_header = [&](const json& h) { return h.dump() + "\n" + rec.cubin; };
  json j = json::parse(header);

  struct Case {
    std::string body;
    std::string says;
  };
  json negative = j, text_count = j, no_count = j, no_source = j, no_key = j, fractional = j;
  negative["cubin_bytes"] = -1;
  text_count["cubin_bytes"] = "1000";
  no_count.erase("cubin_bytes");
  no_source.erase("source");
  no_key.erase("task_key");
  fractional["cubin_bytes"] = 999.5;
  const Case cases[] = {
      {"", "header line"},
      {header, "header line"},                    // no '\n', no cubin
      {good.substr(0, good.size() - 1), "cubin_bytes"},  // one byte short
      {good + "x", "cubin_bytes"},                       // one byte over
      {"not json\n" + rec.cubin, "malformed JSON"},
      {"[1,2]\n" + rec.cubin, "not an object"},
      {with_header(negative), "cubin_bytes"},
      {with_header(text_count), "cubin_bytes"},
      {with_header(fractional), "cubin_bytes"},
      {with_header(no_count), "cubin_bytes"},
      {with_header(no_source), "source"},
      {with_header(no_key), "task_key"},
      {"\n" + rec.cubin, "malformed JSON"},
  };
  for (const Case& c : cases) {
    auto r = WinnerFromWireBinary(c.body);
    ASSERT_FALSE(r.ok()) << c.body.substr(0, 80);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().message();
  }
}

// The list entry as nlohmann writes the object (the writer before session 25).
std::string ReferenceSummary(const WinnerRecord& rec) {
  json j{{"task_key", rec.task_key},         {"graph_canonical", rec.graph_canonical},
         {"input_specs", rec.input_specs},   {"arch", rec.arch},
         {"gpu_name", rec.gpu_name},         {"origin", rec.origin},
         {"candidate_hash", rec.candidate_hash}, {"launch_plan_json", rec.launch_plan_json},
         {"baseline_us", rec.baseline_us},   {"best_us", rec.best_us},
         {"speedup", rec.speedup},           {"reduced_precision", rec.reduced_precision},
         {"versions_json", rec.versions_json}, {"created_at", rec.created_at},
         {"content_hash", rec.content_hash}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

TEST(WireBinaryTest, SummaryTextIsByteForByteNlohmannsDump) {
  WinnerRecord rec = MakeRecord(3);
  EXPECT_EQ(WinnerToWireJson(rec, false), ReferenceSummary(rec));
  std::string every_ascii;
  for (int c = 0; c < 0x80; ++c) every_ascii.push_back(static_cast<char>(c));
  for (const std::string& odd : {every_ascii, std::string("caf\xc3\xa9 \xe2\x82\xac"), std::string("bad \xff\xfe utf8"),
                                 std::string("\"\\\"\\"), std::string(), std::string("\x7f\x1f\x01")}) {
    rec.graph_canonical = odd;
    rec.origin = odd + "x";
    rec.gpu_name = "y" + odd;
    EXPECT_EQ(WinnerToWireJson(rec, false), ReferenceSummary(rec)) << odd;
  }
  for (double v : {0.0, -0.0, 1.0, 2.5, 1e-7, 1e300, 123456789.125, std::nan(""), HUGE_VAL}) {
    rec.speedup = v;
    rec.baseline_us = -v;
    EXPECT_EQ(WinnerToWireJson(rec, false), ReferenceSummary(rec)) << v;
  }
  rec.created_at = -5;
  rec.reduced_precision = false;
  EXPECT_EQ(WinnerToWireJson(rec, false), ReferenceSummary(rec));
  // The full record and the binary header parse back to the same fields.
  rec = MakeRecord(4);
  rec.source = every_ascii + "\xc3\xa9";
  auto full = WinnerFromWireJson(WinnerToWireJson(rec, true));
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  ExpectSameRecord(*full, rec);
  auto bin = WinnerFromWireBinary(WinnerToWireBinary(rec));
  ASSERT_TRUE(bin.ok()) << bin.status().ToString();
  ExpectSameRecord(*bin, rec);
}

TEST(WireBinaryTest, AcceptPicksBinaryOnlyWhenNamedWithoutQZero) {
  const std::string t(kWinnerBinaryType);
  for (const std::string& yes : std::vector<std::string>{t, "APPLICATION/VND.DICE.WINNER", t + ";q=0.5", t + " ; q=1", "application/json, " + t,
        "text/html;q=0.9,\t" + t + " ,*/*;q=0.1", t + ";q=0.001", t + ";version=1", t + ";q=", t + ";q=0x"}) {
    EXPECT_TRUE(AcceptsWinnerBinary(yes)) << yes;
  }
  for (const std::string& no : std::vector<std::string>{std::string(), std::string("*/*"), std::string("application/*"), std::string("application/json"),
        t + ";q=0", t + ";q=0.0", t + "; Q=0.000", t + ";q=0.", "application/vnd.dice.winnerx",
        "xapplication/vnd.dice.winner", "application/vnd.dice", std::string(",,,;;;==="),
        std::string("\x00\x01", 2) + t, "application/vnd.dice.winner/extra", t + std::string(kMaxAcceptBytes, ' ')}) {
    EXPECT_FALSE(AcceptsWinnerBinary(no)) << no.substr(0, 60);
  }
  EXPECT_TRUE(IsWinnerBinaryType(t));
  EXPECT_TRUE(IsWinnerBinaryType(t + "; charset=binary"));
  EXPECT_FALSE(IsWinnerBinaryType("application/json"));
  EXPECT_FALSE(IsWinnerBinaryType(""));
}

class WireBinaryServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dice-wire-binary-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(server_.Start(dir_ + "/kernels.db", "127.0.0.1", 0, kToken).ok());
    CacheClient client(server_.url(), kToken);
    ASSERT_TRUE(client.Put(rec_).ok());
  }
  void TearDown() override {
    server_.Stop();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  httplib::Result Get(const std::string& path, const httplib::Headers& headers = {}) {
    httplib::Client cli("127.0.0.1", server_.port());
    cli.set_read_timeout(std::chrono::seconds(5));
    return cli.Get(path, headers);
  }
  WinnerRecord rec_ = MakeRecord(7, 70000);
  std::string dir_;
  CacheServer server_;
};

TEST_F(WireBinaryServerTest, AnswersBinaryWhenAskedAndJsonOtherwise) {
  const std::string path = "/v1/kernels/" + rec_.task_key;
  auto bin = Get(path, {{"Accept", std::string(kWinnerBinaryType)}});
  ASSERT_TRUE(bin);
  ASSERT_EQ(bin->status, 200);
  EXPECT_TRUE(IsWinnerBinaryType(bin->get_header_value("Content-Type")));
  EXPECT_EQ(bin->get_header_value("Vary"), "Accept");
  auto parsed = WinnerFromWireBinary(bin->body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ExpectSameRecord(*parsed, rec_);

  // No Accept (every client before), wildcards, other types, q=0, junk and
  // an oversized header: the JSON answer as before.
  for (const httplib::Headers& h :
       {httplib::Headers{}, httplib::Headers{{"Accept", "*/*"}}, httplib::Headers{{"Accept", "application/json"}},
        httplib::Headers{{"Accept", std::string(kWinnerBinaryType) + ";q=0"}},
        httplib::Headers{{"Accept", ";;,,\"=\"=,"}},
        httplib::Headers{{"Accept", std::string(kWinnerBinaryType) + std::string(5000, ',')}}}) {
    auto res = Get(path, h);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
    auto rec = WinnerFromWireJson(res->body);
    ASSERT_TRUE(rec.ok()) << rec.status().ToString();
    ExpectSameRecord(*rec, rec_);
  }
}

TEST_F(WireBinaryServerTest, ErrorsStayJsonWhenBinaryIsAsked) {
  const httplib::Headers bin{{"Accept", std::string(kWinnerBinaryType)}};
  auto missing = Get("/v1/kernels/" + Key(99), bin);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(json::parse(missing->body).contains("error"));
  auto bad = Get("/v1/kernels/NOTAKEY", bin);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_TRUE(json::parse(bad->body).contains("error"));
}

TEST_F(WireBinaryServerTest, ClientGetsTheBinaryFormAndChecksIt) {
  CacheClient client(server_.url(), kToken);
  auto got = client.Get(rec_.task_key);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  ExpectSameRecord(**got, rec_);
}

// A server of an older build: JSON whatever the Accept header says, and
// no next_after in its list pages.
class OldServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 5; ++i) recs_.push_back(MakeRecord(i, 100 + static_cast<size_t>(i)));
    server_.Get(R"(/v1/kernels/([0-9a-f]{64}))", [this](const httplib::Request& req, httplib::Response& res) {
      for (const WinnerRecord& r : recs_) {
        if (r.task_key == req.matches[1]) return res.set_content(WinnerToWireJson(r, true), "application/json");
      }
      res.status = 404;
      res.set_content(R"({"error":"no entry"})", "application/json");
    });
    server_.Get("/v1/kernels", [this](const httplib::Request& req, httplib::Response& res) {
      ++list_requests_;
      if (req.has_param("after")) saw_after_ = true;
      const int page = req.has_param("page") ? std::stoi(req.get_param_value("page")) : 1;
      const int size = 2;  // the old server's own page size, whatever was asked
      std::string entries;
      for (int i = (page - 1) * size; i < page * size && i < static_cast<int>(recs_.size()); ++i) {
        entries += (entries.empty() ? "" : ",") + WinnerToWireJson(recs_[static_cast<size_t>(i)], false);
      }
      res.set_content("{\"entries\":[" + entries + "],\"page\":" + std::to_string(page) +
                          ",\"page_size\":2,\"total\":" + std::to_string(recs_.size()) + "}",
                      "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void TearDown() override {
    server_.stop();
    thread_.join();
  }
  std::vector<WinnerRecord> recs_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  int list_requests_ = 0;
  bool saw_after_ = false;
};

TEST_F(OldServerTest, ClientReadsJsonAnswersAndWalksPagesByNumber) {
  CacheClient client("http://127.0.0.1:" + std::to_string(port_), "");
  auto got = client.Get(recs_[3].task_key);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  ExpectSameRecord(**got, recs_[3]);

  auto all = client.List();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), recs_.size());
  for (size_t i = 0; i < recs_.size(); ++i) EXPECT_EQ((*all)[i].task_key, recs_[i].task_key);
  EXPECT_EQ(list_requests_, 3);
  EXPECT_FALSE(saw_after_);
}

}  // namespace
}  // namespace dice::cache
