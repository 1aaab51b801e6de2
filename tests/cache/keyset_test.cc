// Keyset pages: Store::ListWinnerPage with WinnerQuery::after, and the list
// route's after= / next_after (http_server.h). A walk by after= visits the
// rows in exactly the order of the offset pages, ties in created_at
// included; bad after= values are 400s that leave the server serving.
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache_test_support.h"
#include "dice/cache/http_client.h"
#include "dice/cache/http_server.h"
#include "dice/cache/store.h"

namespace dice::cache {
namespace {

using json = nlohmann::json;

std::string Key(int n) {
  std::string k(64, '0');
  const std::string tail = std::to_string(n);
  k.replace(64 - tail.size(), tail.size(), tail);
  k[0] = 'e';
  return k;
}

// Entry n: created_at 1700000000 + n / 3, so runs of three share a
// created_at; arch and verified vary inside a run (the order's tie-breaks).
WinnerRecord MakeRecord(int n) {
  WinnerRecord r;
  r.task_key = Key(n);
  r.graph_canonical = "dice-ir v1\ninput %0 f32 rank=2\n%1 = relu(%0)\noutput %1\n";
  r.input_specs = "f32[8," + std::to_string(n + 1) + "]";
  r.arch = n % 2 == 0 ? "sm_90" : "sm_80";
  r.gpu_name = "NVIDIA H200";
  r.origin = "template:t";
  r.candidate_hash = "cand" + std::to_string(n);
  r.source = "k" + std::to_string(n);
  r.cubin = std::string(static_cast<size_t>(100 + n), 'x');
  r.launch_plan_json = "{}";
  r.baseline_us = 10;
  r.best_us = 5;
  r.speedup = 2;
  r.versions_json = "{}";
  r.created_at = 1700000000 + n / 3;
  r.verified = n % 5 != 0;
  return r;
}

constexpr int kEntries = 23;

class KeysetTest : public testing::StoreInTempDirTest {
 protected:
  KeysetTest() : StoreInTempDirTest("keyset-test") {}
  void SetUp() override {
    StoreInTempDirTest::SetUp();
    // Inserted out of order, so rowid order is not the list's order.
    for (int i = 0; i < kEntries; ++i) ASSERT_TRUE(*store_->PutWinner(MakeRecord((i * 7) % kEntries)));
  }
  // Every key in the query's order, by one offset page.
  std::vector<std::string> ByOffset(WinnerQuery q) {
    q.limit = kEntries + 5;
    auto page = store_->ListWinnerPage(q);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    std::vector<std::string> keys;
    if (page.ok()) {
      for (const auto& e : page->entries) keys.push_back(e.record.task_key);
    }
    return keys;
  }
  // Every key in the query's order, by keyset pages of `size`.
  std::vector<std::string> ByAfter(WinnerQuery q, int size) {
    q.limit = size;
    std::vector<std::string> keys;
    for (int guard = 0; guard < 100; ++guard) {
      auto page = store_->ListWinnerPage(q);
      EXPECT_TRUE(page.ok()) << page.status().ToString();
      if (!page.ok() || page->entries.empty()) break;
      for (const auto& e : page->entries) keys.push_back(e.record.task_key);
      q.after = page->entries.back().record.task_key;
    }
    return keys;
  }
};

TEST_F(KeysetTest, WalkVisitsTheOffsetOrderForEveryFilterAndPageSize) {
  WinnerQuery all, sm80, verified, both;
  sm80.arch = "sm_80";
  verified.verified = 1;
  both.arch = "sm_90";
  both.verified = 0;
  for (const WinnerQuery& q : {all, sm80, verified, both}) {
    const std::vector<std::string> expected = ByOffset(q);
    ASSERT_FALSE(expected.empty());
    for (int size : {1, 2, 3, 7, 50}) EXPECT_EQ(ByAfter(q, size), expected) << q.arch << q.verified << " " << size;
  }
  EXPECT_EQ(ByOffset(all).size(), static_cast<size_t>(kEntries));
}

TEST_F(KeysetTest, TotalIsTheFiltersTotalAndAnAnchorOutsideTheFilterStillPlaces) {
  WinnerQuery q;
  q.arch = "sm_80";
  const std::vector<std::string> sm80 = ByOffset(q);
  ASSERT_EQ(sm80.size(), 11u);
  q.after = Key(22);  // an sm_90 row among the newest: the page is a tail of the sm_80 order
  q.limit = 100;
  auto page = store_->ListWinnerPage(q);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->total, 11);
  ASSERT_GE(page->entries.size(), 10u);
  for (size_t i = 0; i < page->entries.size(); ++i) {
    EXPECT_EQ(page->entries[i].record.task_key, sm80[sm80.size() - page->entries.size() + i]);
  }
  q.after = sm80.back();  // the last sm_80 row: nothing follows
  page = store_->ListWinnerPage(q);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->entries.empty());
}

TEST_F(KeysetTest, BadAfterQueriesAreRefused) {
  auto code = [this](const WinnerQuery& q) {
    auto page = store_->ListWinnerPage(q);
    return page.ok() ? StatusCode::kOk : page.status().code();
  };
  WinnerQuery q;
  for (const std::string& bad : {std::string("x"), Key(1).substr(1), Key(1) + "0", std::string(64, 'G'),
                                 std::string(64, 'A'), "../" + Key(1).substr(3), std::string(64, '\0')}) {
    q.after = bad;
    EXPECT_EQ(code(q), StatusCode::kInvalidArgument) << bad;
  }
  q.after = Key(1);
  q.offset = 10;
  EXPECT_EQ(code(q), StatusCode::kInvalidArgument);
  q.offset = 0;
  q.order = WinnerOrder::kSpeedup;
  EXPECT_EQ(code(q), StatusCode::kInvalidArgument);
  q.order = WinnerOrder::kNewest;
  q.task_key = Key(2);
  EXPECT_EQ(code(q), StatusCode::kInvalidArgument);
  q.task_key.clear();
  q.after = Key(999);  // well formed, not in the cache
  EXPECT_EQ(code(q), StatusCode::kNotFound);
}

class KeysetServerTest : public KeysetTest {
 protected:
  void SetUp() override {
    KeysetTest::SetUp();
    ASSERT_TRUE(server_.Start(db_path_, "127.0.0.1", 0, "").ok());
  }
  void TearDown() override {
    server_.Stop();
    KeysetTest::TearDown();
  }
  httplib::Result Get(const std::string& path) {
    httplib::Client cli("127.0.0.1", server_.port());
    cli.set_read_timeout(std::chrono::seconds(5));
    return cli.Get(path);
  }
  CacheServer server_;
};

TEST_F(KeysetServerTest, AfterPagesFollowNextAfterToTheEnd) {
  const std::vector<std::string> expected = ByOffset(WinnerQuery{});
  std::vector<std::string> walked;
  std::string path = "/v1/kernels?page_size=5";
  for (int guard = 0; guard < 20; ++guard) {
    auto res = Get(path);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    json j = json::parse(res->body);
    EXPECT_EQ(j["total"], kEntries);
    for (const json& e : j["entries"]) walked.push_back(e["task_key"]);
    if (j["next_after"].is_null()) break;
    path = "/v1/kernels?page_size=5&after=" + j["next_after"].get<std::string>();
    EXPECT_EQ(j["next_after"], walked.back());
  }
  EXPECT_EQ(walked, expected);

  // The client walks the same pages (after the first, by next_after).
  CacheClient client(server_.url(), "");
  auto all = client.List();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ((*all)[i].task_key, expected[i]);
  auto sm80 = client.List("sm_80");
  ASSERT_TRUE(sm80.ok());
  EXPECT_EQ(sm80->size(), 11u);
}

TEST_F(KeysetServerTest, BadAfterValuesAre400AndTheServerKeepsServing) {
  const std::string key = Key(3);
  for (const std::string& query :
       {std::string("after="), "after=" + key.substr(1), "after=" + key + "0", "after=" + std::string(64, 'F'),
        "after=" + key + "&page=2", "page=1&after=" + key, "after=%2e%2e%2f" + key.substr(9),
        "after=" + key.substr(0, 63) + "%00", "after=" + Key(999), "after=" + std::string(5000, 'a')}) {
    auto res = Get("/v1/kernels?" + query);
    ASSERT_TRUE(res) << query.substr(0, 80);
    EXPECT_EQ(res->status, 400) << query.substr(0, 80) << ": " << res->body;
    EXPECT_TRUE(json::parse(res->body).contains("error"));
  }
  auto ok = Get("/v1/kernels?after=" + key + "&page_size=2");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(json::parse(ok->body)["after"], key);
}

}  // namespace
}  // namespace dice::cache
