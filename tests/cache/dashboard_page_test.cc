// The cache server's HTML pages over HTTP, without a browser (the browser
// test is dashboard_test.cc): filters, sorting and pages of GET /, the
// marks of unverified and damaged entries, the detail page GET /entry/{key}
// and what an empty cache says.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "dice/cache/http_server.h"
#include "dice/cache/store.h"
#include "dice/core/ir.h"

namespace dice::cache {
namespace {

namespace fs = std::filesystem;

std::string Key(int n) {
  std::string k(64, '0');
  const std::string tail = std::to_string(n);
  k.replace(64 - tail.size(), tail.size(), tail);
  k[0] = 'f';
  return k;
}

WinnerRecord MakeRecord(int n, double speedup, const std::string& arch, ir::OpKind kind = ir::OpKind::kRelu) {
  ir::Graph g;
  g.inputs = {{ir::DType::kFloat32, 2}};
  ir::Op op;
  op.kind = kind;
  op.args = {0};
  g.ops = {op};
  g.outputs = {1};
  WinnerRecord r;
  r.task_key = Key(n);
  r.graph_canonical = ir::Canonical(g);
  r.input_specs = "f32[4," + std::to_string(n) + "]";
  r.arch = arch;
  r.gpu_name = "GPU-" + arch;
  r.origin = "template:o" + std::to_string(n);
  r.candidate_hash = "cafe" + std::to_string(n) + "0123456789";
  r.source = "__global__ void k" + std::to_string(n) + "() { if (a < b && c > d) {} }";
  r.cubin = "ELF" + std::string(static_cast<size_t>(n), 'z');
  r.launch_plan_json = R"({"grid":[1,1,1]})";
  r.baseline_us = 20;
  r.best_us = 20 / speedup;
  r.speedup = speedup;
  r.versions_json = "{}";
  r.created_at = 1700000000 + n;
  return r;
}

class DashboardPageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dice-dash-page-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    db_ = dir_ + "/kernels.db";
    ASSERT_TRUE(server_.Start(db_, "127.0.0.1", 0, "tok").ok());
    auto s = Store::Open(db_);  // a second connection beside the server's
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  void TearDown() override {
    server_.Stop();
    store_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Page(const std::string& path, int want_status = 200) {
    httplib::Client raw("127.0.0.1", server_.port());
    auto res = raw.Get(path.c_str());
    EXPECT_TRUE(res) << path;
    if (!res) return "";
    EXPECT_EQ(res->status, want_status) << path << "\n" << res->body;
    return res->body;
  }
  // Entries 1..4: 1 sm_80, 2 unverified, 3 a sigmoid with a plan that is not
  // JSON, 4 with a cubin changed behind the store's back.
  void PutFour() {
    ASSERT_TRUE(*store_->PutWinner(MakeRecord(1, 3.0, "sm_80")));
    WinnerRecord unverified = MakeRecord(2, 5.0, "sm_90");
    unverified.verified = false;
    unverified.pulled_from = "http://peer:8470";
    ASSERT_TRUE(*store_->PutWinner(unverified));
    WinnerRecord bad_plan = MakeRecord(3, 2.0, "sm_90", ir::OpKind::kSigmoid);
    bad_plan.launch_plan_json = "grid=1 <b>";
    ASSERT_TRUE(*store_->PutWinner(bad_plan));
    ASSERT_TRUE(*store_->PutWinner(MakeRecord(4, 4.0, "sm_90")));
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    const std::string sql = "UPDATE winners SET cubin = X'01' WHERE task_key = '" + Key(4) + "'";
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  std::string dir_, db_;
  CacheServer server_;
  std::unique_ptr<Store> store_;
};

TEST_F(DashboardPageTest, EmptyCacheSaysHowToFillIt) {
  const std::string html = Page("/");
  EXPECT_NE(html.find("This cache is empty"), std::string::npos) << html;
  EXPECT_NE(html.find("dice tune"), std::string::npos) << html;
  EXPECT_NE(html.find("dice cache pull"), std::string::npos) << html;
  EXPECT_EQ(html.find("<table id=\"entries\">"), std::string::npos) << html;
}

TEST_F(DashboardPageTest, MarksUnverifiedAndDamagedEntriesWithTheirCause) {
  PutFour();
  const std::string html = Page("/");
  EXPECT_NE(html.find("4 entries"), std::string::npos) << html;
  EXPECT_NE(html.find("<tr class=\"verified\"><td>relu</td><td>f32[4,1]</td><td>sm_80</td><td>GPU-sm_80</td>"
                      "<td class=\"state\">verified</td><td class=\"n\">0</td><td class=\"n\">20.00</td>"
                      "<td class=\"n\">6.67</td><td class=\"n\">3.00x</td><td><code>cafe10123456</code></td>"
                      "<td>template:o1</td>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<tr class=\"unverified\"><td>relu</td><td>f32[4,2]</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<tr class=\"damaged\"><td>sigmoid</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("damaged: launch plan is not a JSON object"), std::string::npos) << html;
  EXPECT_NE(html.find("damaged: content hash mismatch"), std::string::npos) << html;
  EXPECT_NE(html.find("<a href=\"/entry/" + Key(4) + "\">"), std::string::npos) << html;
}

TEST_F(DashboardPageTest, FiltersAndSortsByQueryParameters) {
  PutFour();
  auto rows = [](const std::string& html) {
    std::string keys;
    for (size_t at = html.find("/entry/"); at != std::string::npos; at = html.find("/entry/", at + 1)) {
      keys += html.substr(at + 7 + 63, 1);  // the last hex digit is n
    }
    return keys;
  };
  EXPECT_EQ(rows(Page("/")), "4321");
  EXPECT_EQ(rows(Page("/?sort=speedup")), "2413");
  EXPECT_EQ(rows(Page("/?arch=sm_90&verified=1&sort=speedup")), "43");
  EXPECT_EQ(rows(Page("/?verified=0")), "2");
  EXPECT_EQ(rows(Page("/?op=sigmoid")), "3");
  EXPECT_EQ(rows(Page("/?arch=&op=&verified=&sort=newest&page=1")), "4321");  // an HTML form's empty fields
  const std::string none = Page("/?arch=sm_70");
  EXPECT_NE(none.find("No entry matches these filters"), std::string::npos) << none;
  const std::string past = Page("/?page=9");
  EXPECT_NE(past.find("past the last one"), std::string::npos) << past;
  for (const char* bad : {"/?sort=ops", "/?verified=yes", "/?page=0", "/?page=x", "/?op=%3Cb%3E", "/?arch=a%27b"}) {
    Page(bad, 400);
  }
}

TEST_F(DashboardPageTest, EntryPageShowsSourcePlanAndAttemptsEscaped) {
  PutFour();
  AttemptRecord failed;
  failed.task_key = Key(1);
  failed.candidate_hash = "deadbeef00112233";
  failed.origin = "dice:sample<3>";
  failed.outcome = "compile_error";
  failed.error = "error: expected ';' before '}' <token>";
  ASSERT_TRUE(store_->RecordAttempt(failed).ok());
  const std::string html = Page("/entry/" + Key(1));
  EXPECT_NE(html.find("<p id=\"state\" class=\"verified\">verified</p>"), std::string::npos) << html;
  EXPECT_NE(html.find("if (a &lt; b &amp;&amp; c &gt; d)"), std::string::npos) << html;
  EXPECT_NE(html.find("&quot;grid&quot;"), std::string::npos) << html;
  EXPECT_NE(html.find("%1 = relu(%0)"), std::string::npos) << html;
  EXPECT_NE(html.find("<td>dice:sample&lt;3&gt;</td><td>compile_error</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("expected &#39;;&#39; before &#39;}&#39; &lt;token&gt;"), std::string::npos) << html;
  EXPECT_EQ(html.find("<token>"), std::string::npos) << html;

  const std::string damaged = Page("/entry/" + Key(3));
  EXPECT_NE(damaged.find("damaged: launch plan is not a JSON object"), std::string::npos) << damaged;
  EXPECT_NE(damaged.find("grid=1 &lt;b&gt;"), std::string::npos) << damaged;
  EXPECT_NE(Page("/entry/" + Key(4)).find("damaged: content hash mismatch"), std::string::npos);
  const std::string pulled = Page("/entry/" + Key(2));
  EXPECT_NE(pulled.find("http://peer:8470"), std::string::npos) << pulled;
  EXPECT_NE(pulled.find("class=\"unverified\""), std::string::npos) << pulled;

  // A key with attempts only: no winner, its attempts listed.
  failed.task_key = Key(9);
  ASSERT_TRUE(store_->RecordAttempt(failed).ok());
  const std::string tried = Page("/entry/" + Key(9));
  EXPECT_NE(tried.find("No winner"), std::string::npos) << tried;
  EXPECT_NE(tried.find("compile_error"), std::string::npos) << tried;
  const std::string unknown = Page("/entry/" + Key(8), 404);
  EXPECT_NE(unknown.find("<h1>Error 404</h1>"), std::string::npos) << "a page, not JSON: " << unknown;
  EXPECT_NE(unknown.find("no entry and no attempts"), std::string::npos) << unknown;
  const std::string bad = Page("/entry/NOT-A-KEY", 400);
  EXPECT_NE(bad.find("64 lowercase hex digits, not "), std::string::npos) << bad;
  EXPECT_NE(bad.find("NOT-A-KEY"), std::string::npos) << bad;
}

TEST(ParseDashboardQueryTest, ReadsEveryParameterAndRejectsMalformedOnes) {
  auto q = ParseDashboardQuery({{"arch", "sm_90"}, {"op", "layer_norm"}, {"verified", "0"}, {"sort", "hits"},
                                {"page", "12"}});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->arch, "sm_90");
  EXPECT_EQ(q->op, "layer_norm");
  EXPECT_EQ(q->verified, 0);
  EXPECT_EQ(q->order, WinnerOrder::kHits);
  EXPECT_EQ(q->page, 12);
  const WinnerQuery w = ToWinnerQuery(*q);
  EXPECT_EQ(w.offset, 11 * kDashboardPageSize);
  EXPECT_EQ(w.limit, kDashboardPageSize);
  EXPECT_TRUE(w.check_content);
  auto defaults = ParseDashboardQuery({});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->verified, -1);
  EXPECT_EQ(defaults->order, WinnerOrder::kNewest);
  EXPECT_EQ(defaults->page, 1);
  for (const auto& [name, value] : std::map<std::string, std::string>{
           {"arch", "sm 90"}, {"op", "Relu"}, {"verified", "true"}, {"sort", "age"}, {"page", "-1"}}) {
    auto bad = ParseDashboardQuery({{name, value}});
    ASSERT_FALSE(bad.ok()) << name << "=" << value;
    EXPECT_NE(bad.status().message().find(name), std::string::npos) << bad.status().ToString();
  }
  EXPECT_FALSE(ParseDashboardQuery({{"page", "123456789"}}).ok());
}

}  // namespace
}  // namespace dice::cache
