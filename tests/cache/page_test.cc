// Store::ListWinnerPage (dice/cache/store.h): one page of winner summaries
// picked in SQL, with filters, orders and counts; schema v3's indexes, also
// on a cache migrated from v2.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cache_test_support.h"
#include "dice/cache/store.h"
#include "dice/core/ir.h"

namespace dice::cache {
namespace {

namespace fs = std::filesystem;
using testing::RawSql;

std::string Key(int n) {
  std::string k(64, '0');
  const std::string tail = std::to_string(n);
  k.replace(64 - tail.size(), tail.size(), tail);
  k[0] = 'c';
  return k;
}

std::string OneOpCanonical(ir::OpKind kind) {
  ir::Graph g;
  g.inputs = {{ir::DType::kFloat32, 2}};
  ir::Op op;
  op.kind = kind;
  op.args = {0};
  g.ops = {op};
  g.outputs = {1};
  return ir::Canonical(g);
}

// Entry n: created at 1700000000 + n, speedup and hits as given.
WinnerRecord MakeRecord(int n, double speedup, int64_t hits, const std::string& arch, bool verified,
                        ir::OpKind kind = ir::OpKind::kRelu) {
  WinnerRecord r;
  r.task_key = Key(n);
  r.graph_canonical = OneOpCanonical(kind);
  r.input_specs = "f32[8," + std::to_string(n + 1) + "]";
  r.arch = arch;
  r.gpu_name = "NVIDIA H200";
  r.origin = "template:t" + std::to_string(n);
  r.candidate_hash = "cand" + std::to_string(n);
  r.source = "extern \"C\" __global__ void k" + std::to_string(n) + "() {}";
  r.cubin = std::string("\x7f" "ELF\0", 5) + std::string(static_cast<size_t>(1000 + n), 'x');
  r.launch_plan_json = R"({"grid":[1,1,1]})";
  r.baseline_us = 10.0;
  r.best_us = 10.0 / speedup;
  r.speedup = speedup;
  r.versions_json = "{}";
  r.created_at = 1700000000 + n;
  r.verified = verified;
  r.hits = hits;
  return r;
}

std::vector<std::string> Keys(const WinnerPage& page) {
  std::vector<std::string> keys;
  for (const WinnerSummary& e : page.entries) keys.push_back(e.record.task_key);
  return keys;
}

class PageTest : public testing::StoreInTempDirTest {
 protected:
  PageTest() : StoreInTempDirTest("page-test") {}
  // Six entries: 0..5 (5 newest); 1 and 4 on sm_80; 2 unverified; 3 a sigmoid.
  void PutSix() {
    ASSERT_TRUE(*store_->PutWinner(MakeRecord(0, 1.5, 4, "sm_90", true)));
    ASSERT_TRUE(*store_->PutWinner(MakeRecord(1, 4.0, 0, "sm_80", true)));
    ASSERT_TRUE(*store_->PutWinner(MakeRecord(2, 9.0, 1, "sm_90", false)));
    ASSERT_TRUE(*store_->PutWinner(MakeRecord(3, 2.0, 7, "sm_90", true, ir::OpKind::kSigmoid)));
    ASSERT_TRUE(*store_->PutWinner(MakeRecord(4, 3.0, 2, "sm_80", true)));
    ASSERT_TRUE(*store_->PutWinner(MakeRecord(5, 1.1, 3, "sm_90", true)));
  }
  WinnerPage Page(const WinnerQuery& q) {
    auto page = store_->ListWinnerPage(q);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    return page.ok() ? *page : WinnerPage{};
  }
};

TEST_F(PageTest, PagesNewestFirstWithTheTotalAndWithoutPayload) {
  PutSix();
  WinnerQuery q;
  q.limit = 4;
  WinnerPage first = Page(q);
  EXPECT_EQ(first.total, 6);
  EXPECT_EQ(Keys(first), (std::vector<std::string>{Key(5), Key(4), Key(3), Key(2)}));
  q.offset = 4;
  WinnerPage second = Page(q);
  EXPECT_EQ(second.total, 6);
  EXPECT_EQ(Keys(second), (std::vector<std::string>{Key(1), Key(0)}));
  const WinnerSummary& e = second.entries[0];
  const WinnerRecord want = MakeRecord(1, 4.0, 0, "sm_80", true);
  EXPECT_TRUE(e.record.cubin.empty());
  EXPECT_TRUE(e.record.source.empty());
  EXPECT_EQ(e.cubin_bytes, static_cast<int64_t>(want.cubin.size()));
  EXPECT_EQ(e.record.graph_canonical, want.graph_canonical);
  EXPECT_EQ(e.record.launch_plan_json, want.launch_plan_json);
  EXPECT_EQ(e.record.arch, "sm_80");
  EXPECT_DOUBLE_EQ(e.record.speedup, 4.0);
  EXPECT_EQ(e.record.created_at, want.created_at);
  EXPECT_EQ(e.record.content_hash, ContentHash(want));
  EXPECT_FALSE(e.content_checked);
  q.offset = 6;
  EXPECT_TRUE(Page(q).entries.empty());
  EXPECT_EQ(Page(q).total, 6);
}

TEST_F(PageTest, FiltersByArchVerifiedOpAndKey) {
  PutSix();
  WinnerQuery q;
  q.arch = "sm_80";
  EXPECT_EQ(Keys(Page(q)), (std::vector<std::string>{Key(4), Key(1)}));
  EXPECT_EQ(Page(q).total, 2);
  q = WinnerQuery{};
  q.verified = 0;
  EXPECT_EQ(Keys(Page(q)), (std::vector<std::string>{Key(2)}));
  q.verified = 1;
  q.arch = "sm_90";
  EXPECT_EQ(Keys(Page(q)), (std::vector<std::string>{Key(5), Key(3), Key(0)}));
  q = WinnerQuery{};
  q.op = "sigmoid";
  EXPECT_EQ(Keys(Page(q)), (std::vector<std::string>{Key(3)}));
  q.op = "sigm";  // a whole op name, not a prefix
  EXPECT_EQ(Page(q).total, 0);
  q = WinnerQuery{};
  q.task_key = Key(2);
  q.with_source = true;
  WinnerPage one = Page(q);
  ASSERT_EQ(one.entries.size(), 1u);
  EXPECT_EQ(one.entries[0].record.source, MakeRecord(2, 9.0, 1, "sm_90", false).source);
  EXPECT_FALSE(one.entries[0].record.verified);
  EXPECT_TRUE(one.entries[0].record.cubin.empty());
  q.task_key = Key(99);
  EXPECT_EQ(Page(q).total, 0);
}

TEST_F(PageTest, OrdersBySpeedupAndByHitsWithFilters) {
  PutSix();
  WinnerQuery q;
  q.order = WinnerOrder::kSpeedup;
  EXPECT_EQ(Keys(Page(q)), (std::vector<std::string>{Key(2), Key(1), Key(4), Key(3), Key(0), Key(5)}));
  q.verified = 1;
  q.limit = 2;
  EXPECT_EQ(Keys(Page(q)), (std::vector<std::string>{Key(1), Key(4)}));
  q = WinnerQuery{};
  q.order = WinnerOrder::kHits;
  q.arch = "sm_90";
  EXPECT_EQ(Keys(Page(q)), (std::vector<std::string>{Key(3), Key(0), Key(5), Key(2)}));
  // Hits counted by clients move the entry up.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(*store_->RecordHit(Key(5)));
  EXPECT_EQ(Keys(Page(q)).front(), Key(5));
  EXPECT_EQ(Page(q).entries.front().record.hits, 13);
}

TEST_F(PageTest, CheckContentMarksATamperedRowAndNothingElse) {
  PutSix();
  RawSql(db_path_, "UPDATE winners SET cubin = X'00' WHERE task_key = '" + Key(3) + "'");
  WinnerQuery q;
  q.check_content = true;
  WinnerPage page = Page(q);
  ASSERT_EQ(page.entries.size(), 6u);
  for (const WinnerSummary& e : page.entries) {
    EXPECT_TRUE(e.content_checked);
    EXPECT_EQ(e.content_ok, e.record.task_key != Key(3)) << e.record.task_key;
    EXPECT_TRUE(e.record.cubin.empty());
    EXPECT_TRUE(e.record.source.empty());
  }
  EXPECT_EQ(store_->GetWinner(Key(3)).status().code(), StatusCode::kCorrupt);
}

TEST_F(PageTest, CountOnlyAndBadQueries) {
  PutSix();
  WinnerQuery q;
  q.limit = 0;
  WinnerPage count = Page(q);
  EXPECT_EQ(count.total, 6);
  EXPECT_TRUE(count.entries.empty());
  WinnerQuery bad;
  bad.offset = -1;
  EXPECT_EQ(store_->ListWinnerPage(bad).status().code(), StatusCode::kInvalidArgument);
  bad = WinnerQuery{};
  bad.limit = kMaxWinnerPageLimit + 1;
  EXPECT_EQ(store_->ListWinnerPage(bad).status().code(), StatusCode::kInvalidArgument);
  for (const char* op : {"Relu", "re lu", "relu(", "x'--"}) {
    bad = WinnerQuery{};
    bad.op = op;
    EXPECT_EQ(store_->ListWinnerPage(bad).status().code(), StatusCode::kInvalidArgument) << op;
  }
  bad = WinnerQuery{};
  bad.verified = 2;
  EXPECT_EQ(store_->ListWinnerPage(bad).status().code(), StatusCode::kInvalidArgument);
}

// The list's totals come from winner_counts (schema v5, kept by triggers)
// when only arch and verified filter; after every kind of write each
// filter's total must equal a count of the table.
TEST_F(PageTest, TotalsFollowEveryWriteForEveryFilter) {
  auto check = [this](const std::string& after) {
    for (const char* arch : {"", "sm_80", "sm_90", "sm_70"}) {
      for (int verified : {-1, 0, 1}) {
        std::string where = " WHERE 1";
        if (arch[0] != '\0') where += std::string(" AND arch = '") + arch + "'";
        if (verified >= 0) where += " AND verified = " + std::to_string(verified);
        WinnerQuery q;
        q.arch = arch;
        q.verified = verified;
        q.limit = 0;
        EXPECT_EQ(std::to_string(Page(q).total), RawSql(db_path_, "SELECT count(*) FROM winners" + where))
            << "after " << after << ": arch '" << arch << "' verified " << verified;
      }
    }
    EXPECT_TRUE(store_->CheckIntegrity().ok()) << after << ": " << store_->CheckIntegrity().ToString();
  };
  check("nothing");
  PutSix();
  check("six puts");
  // Replaced by a better one on another arch (INSERT OR REPLACE).
  ASSERT_TRUE(*store_->PutWinner(MakeRecord(0, 8.0, 0, "sm_80", true)));
  check("a replace that moves arch");
  // An unverified row gives way to a verified one; a verified one is kept.
  ASSERT_TRUE(*store_->PutWinner(MakeRecord(2, 1.0, 0, "sm_90", true)));
  check("verified replaces unverified");
  ASSERT_FALSE(*store_->PutWinner(MakeRecord(1, 9.0, 0, "sm_80", false)));
  check("unverified kept out");
  ASSERT_TRUE(*store_->PutWinner(MakeRecord(9, 2.0, 0, "sm_70", false)));
  check("a new unverified arch");
  ASSERT_TRUE(*store_->MarkVerified(Key(9), 10.0, 4.0));
  check("mark verified");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(*store_->RecordHit(Key(5)));
  check("hits");
  ASSERT_TRUE(*store_->PutWinner(MakeRecord(10, 2.0, 0, "sm_90", false)));
  ASSERT_TRUE(*store_->RemoveUnverifiedWinner(Key(10)));
  check("remove unverified");
  ASSERT_TRUE(*store_->RemoveWinner(Key(4)));
  check("remove");
  // Writes by another connection (the sqlite3 shell) fire the triggers too.
  RawSql(db_path_, "UPDATE winners SET verified = 0 WHERE task_key = '" + Key(3) + "'");
  check("flag cleared by hand");
  RawSql(db_path_, "UPDATE winners SET arch = 'sm_80', verified = 1 WHERE task_key = '" + Key(3) + "'");
  check("arch and flag changed by hand");
  RawSql(db_path_, "DELETE FROM winners WHERE arch = 'sm_80'");
  check("delete by hand");
  GcOptions gc;
  gc.max_payload_bytes = 1;
  ASSERT_TRUE(store_->CollectGarbage(gc).ok());
  check("gc removed everything");
  EXPECT_EQ(RawSql(db_path_, "SELECT coalesce(sum(n), 0) FROM winner_counts"), "0");
}

// A write the triggers do not follow (INSERT OR IGNORE over an existing
// key by hand) shows in CheckIntegrity, naming the count that is off.
TEST_F(PageTest, IntegrityCheckFindsACountThatIsOff) {
  PutSix();
  RawSql(db_path_, "UPDATE winner_counts SET n = n + 1 WHERE arch = 'sm_80' AND verified = 1");
  Status st = store_->CheckIntegrity();
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("winner_counts says 3 rows for arch 'sm_80', verified 1; the table has 2"),
            std::string::npos)
      << st.ToString();
}

TEST_F(PageTest, NewCacheHasThePageIndexes) {
  EXPECT_EQ(RawSql(db_path_, "PRAGMA user_version"), std::to_string(kSchemaVersion));
  EXPECT_EQ(RawSql(db_path_, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN"
                          " ('winners_newest', 'winners_arch_newest', 'winners_speedup', 'winners_hits')"),
            "4");
}

TEST(PageMigrationTest, Version2FileGainsTheIndexesAndKeepsItsRows) {
  std::string tmpl = (fs::temp_directory_path() / "dice-page-v2-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl, path = dir + "/kernels.db";
  // A cache as schema v2 left it: the v1 tables, the v2 columns, one row.
  const std::string ddl =
      std::string(testing::kSchemaV1Tables) + testing::kSchemaV2Columns +
      "INSERT INTO meta VALUES ('created_by','dice'),('schema_version','2');"
      "INSERT INTO winners VALUES ('" + Key(7) + "', 'x', 'f32[1]', 'sm_90', 'GPU', 'o', 'c', 's', X'00', '{}',"
      " 2.0, 1.0, 2.0, 0, '{}', 1700000007, 'h', 0, 'http://peer', 5, 0);"
      "PRAGMA user_version = 2;";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, ddl.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_close(db);
  {
    auto store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ(RawSql(path, "PRAGMA user_version"), std::to_string(kSchemaVersion));
    EXPECT_EQ((**(*store)->GetMeta("schema_version")), std::to_string(kSchemaVersion));
    EXPECT_EQ(RawSql(path, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name LIKE 'winners_%'"), "4");
    WinnerQuery q;
    q.verified = 0;
    q.order = WinnerOrder::kHits;
    auto page = (*store)->ListWinnerPage(q);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    ASSERT_EQ(page->entries.size(), 1u);
    EXPECT_EQ(page->entries[0].record.pulled_from, "http://peer");
    EXPECT_EQ(page->entries[0].record.hits, 5);
    EXPECT_TRUE((*store)->CheckIntegrity().ok());
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace dice::cache
