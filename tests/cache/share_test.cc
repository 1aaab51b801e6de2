// Cache sharing and management (issue 5): schema v2 (verified / pulled_from /
// hits / last_used_at) and its migration from v1 files, the verified-wins
// rule, stats, gc, portable bundles, the batch-get endpoint, the dashboard
// page, and the runtime's remote lookup with timeout and back-off.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache_test_support.h"
#include "dice/cache/bundle.h"
#include "dice/cache/http_client.h"
#include "dice/cache/http_server.h"
#include "dice/cache/remote_cache.h"
#include "dice/cache/store.h"
#include "dice/core/ir.h"

namespace dice::cache {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kToken[] = "share-token";

std::string Key(int n) {
  std::string k(64, '0');
  const std::string tail = std::to_string(n);
  k.replace(64 - tail.size(), tail.size(), tail);
  k[0] = 'b';
  return k;
}

// canonical IR of relu(x) * x: Summary() gives "relu+mul".
std::string ReluMulCanonical() {
  ir::Graph g;
  g.inputs = {{ir::DType::kFloat32, 2}};
  ir::Op relu;
  relu.kind = ir::OpKind::kRelu;
  relu.args = {0};
  ir::Op mul;
  mul.kind = ir::OpKind::kMul;
  mul.args = {1, 0};
  g.ops = {relu, mul};
  g.outputs = {2};
  return ir::Canonical(g);
}

WinnerRecord MakeRecord(int n, double speedup, const std::string& arch = "sm_90", bool verified = true) {
  WinnerRecord r;
  r.task_key = Key(n);
  r.graph_canonical = ReluMulCanonical();
  r.input_specs = "f32[64," + std::to_string(n + 1) + "]";
  r.arch = arch;
  r.gpu_name = "NVIDIA H200";
  r.origin = "template:elementwise/b256/v" + std::to_string(n);
  r.candidate_hash = "cand" + std::to_string(n);
  r.source = "extern \"C\" __global__ void k" + std::to_string(n) + "(float* y) {}";
  r.cubin = std::string("\x7f" "ELF\0\x01\x02", 7) + std::string(static_cast<size_t>(100 + n), static_cast<char>(n));
  r.launch_plan_json = R"({"grid":[1,1,1],"block":[64,1,1]})";
  r.baseline_us = 100.0;
  r.best_us = 100.0 / speedup;
  r.speedup = speedup;
  r.versions_json = R"({"dice":"test"})";
  r.created_at = 1700000000 + n;
  r.verified = verified;
  return r;
}

class ShareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dice-share-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::unique_ptr<Store> Open(const std::string& name) {
    auto s = Store::Open((fs::path(dir_) / name).string());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  std::string dir_;
};

// ---------------------------------------------------------------- schema v2

TEST_F(ShareTest, Version1FileIsMigratedAndItsRowsStayReadableAndVerified) {
  // A cache as schema v1 wrote it (the v1 DDL verbatim), with one row.
  const std::string path = Path("v1.db");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  WinnerRecord r = MakeRecord(1, 3.0);
  r.content_hash = ContentHash(r);
  const std::string ddl =
      std::string(testing::kSchemaV1Tables) +
      "INSERT INTO meta VALUES ('created_by','dice'),('schema_version','1');"
      "PRAGMA user_version = 1;";
  ASSERT_EQ(sqlite3_exec(db, ddl.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_stmt* ins = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "INSERT INTO winners VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,0,?14,?15,?16)",
                               -1, &ins, nullptr),
            SQLITE_OK);
  const std::vector<std::string> text = {r.task_key, r.graph_canonical, r.input_specs, r.arch, r.gpu_name,
                                         r.origin, r.candidate_hash, r.source};
  for (int i = 0; i < 8; ++i) sqlite3_bind_text(ins, i + 1, text[i].c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_blob(ins, 9, r.cubin.data(), static_cast<int>(r.cubin.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(ins, 10, r.launch_plan_json.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(ins, 11, r.baseline_us);
  sqlite3_bind_double(ins, 12, r.best_us);
  sqlite3_bind_double(ins, 13, r.speedup);
  sqlite3_bind_text(ins, 14, r.versions_json.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(ins, 15, r.created_at);
  sqlite3_bind_text(ins, 16, r.content_hash.c_str(), -1, SQLITE_TRANSIENT);
  ASSERT_EQ(sqlite3_step(ins), SQLITE_DONE) << sqlite3_errmsg(db);
  sqlite3_finalize(ins);
  sqlite3_close(db);

  auto store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto got = (*store)->GetWinner(r.task_key);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((**got).cubin, r.cubin);
  EXPECT_TRUE((**got).verified);  // v1 rows were tuned here
  EXPECT_EQ((**got).pulled_from, "");
  EXPECT_EQ((**got).hits, 0);
  EXPECT_EQ((**got).last_used_at, 0);
  auto version = (*store)->GetMeta("schema_version");
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(version->value_or(""), std::to_string(kSchemaVersion));
  EXPECT_TRUE((*store)->CheckIntegrity().ok());
}

TEST_F(ShareTest, VerifiedEntryIsNeverReplacedByAFasterUnverifiedOne) {
  auto store = Open("k.db");
  ASSERT_TRUE(store);
  ASSERT_TRUE(*store->PutWinner(MakeRecord(1, 2.0)));
  WinnerRecord pulled = MakeRecord(1, 9.0, "sm_90", /*verified=*/false);
  pulled.pulled_from = "http://elsewhere";
  auto stored = store->PutWinner(pulled);
  ASSERT_TRUE(stored.ok());
  EXPECT_FALSE(*stored);
  auto got = store->GetWinner(Key(1));
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_DOUBLE_EQ((**got).speedup, 2.0);
  EXPECT_TRUE((**got).verified);
}

TEST_F(ShareTest, UnverifiedEntryGivesWayToASlowerVerifiedOne) {
  auto store = Open("k.db");
  ASSERT_TRUE(store);
  WinnerRecord pulled = MakeRecord(1, 9.0, "sm_90", /*verified=*/false);
  pulled.pulled_from = "http://elsewhere";
  ASSERT_TRUE(*store->PutWinner(pulled));
  ASSERT_TRUE(*store->PutWinner(MakeRecord(1, 1.5)));
  auto got = store->GetWinner(Key(1));
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_DOUBLE_EQ((**got).speedup, 1.5);
  EXPECT_TRUE((**got).verified);
  EXPECT_EQ((**got).pulled_from, "");
}

TEST_F(ShareTest, HitsAreCountedAndSurviveAReplacement) {
  auto store = Open("k.db");
  ASSERT_TRUE(store);
  ASSERT_TRUE(*store->PutWinner(MakeRecord(1, 2.0)));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(*store->RecordHit(Key(1)));
  EXPECT_FALSE(*store->RecordHit(Key(2)));  // absent key
  ASSERT_TRUE(*store->PutWinner(MakeRecord(1, 4.0)));  // a better kernel for the same key
  auto got = store->GetWinner(Key(1));
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((**got).hits, 3);
  EXPECT_GT((**got).last_used_at, 1700000000);
  EXPECT_DOUBLE_EQ((**got).speedup, 4.0);
}

TEST_F(ShareTest, MarkVerifiedAndRemoveUnverifiedTouchOnlyWhatTheySay) {
  auto store = Open("k.db");
  ASSERT_TRUE(store);
  ASSERT_TRUE(*store->PutWinner(MakeRecord(1, 2.0, "sm_90", false)));
  ASSERT_TRUE(*store->PutWinner(MakeRecord(2, 2.0, "sm_90", false)));
  ASSERT_TRUE(*store->PutWinner(MakeRecord(3, 2.0)));
  ASSERT_TRUE(*store->MarkVerified(Key(1), 50.0, 10.0));
  EXPECT_FALSE(store->MarkVerified(Key(1), 50.0, 0.0).ok());
  EXPECT_FALSE(*store->RemoveUnverifiedWinner(Key(3)));  // verified: stays
  EXPECT_TRUE(*store->RemoveUnverifiedWinner(Key(2)));
  auto one = store->GetWinner(Key(1));
  ASSERT_TRUE(one.ok() && one->has_value());
  EXPECT_TRUE((**one).verified);
  EXPECT_DOUBLE_EQ((**one).speedup, 5.0);
  EXPECT_FALSE(store->GetWinner(Key(2))->has_value());
  EXPECT_TRUE(store->GetWinner(Key(3))->has_value());
}

TEST_F(ShareTest, StatsCountArchsUnverifiedHitsAndSpeedups) {
  auto store = Open("k.db");
  ASSERT_TRUE(store);
  ASSERT_TRUE(*store->PutWinner(MakeRecord(1, 2.0, "sm_90")));
  ASSERT_TRUE(*store->PutWinner(MakeRecord(2, 8.0, "sm_80")));
  WinnerRecord pulled = MakeRecord(3, 4.0, "sm_90", false);
  pulled.pulled_from = "http://x";
  ASSERT_TRUE(*store->PutWinner(pulled));
  ASSERT_TRUE(*store->RecordHit(Key(1)));
  ASSERT_TRUE(*store->RecordHit(Key(1)));
  auto st = store->Stats();
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->entries, 3);
  EXPECT_EQ(st->unverified, 1);
  EXPECT_EQ(st->pulled, 1);
  EXPECT_EQ(st->hits, 2);
  EXPECT_NEAR(st->geomean_speedup, 4.0, 1e-9);  // (2*8*4)^(1/3)
  EXPECT_NEAR(st->total_speedup, 300.0 / (50.0 + 12.5 + 25.0), 1e-9);
  ASSERT_EQ(st->archs.size(), 2u);
  EXPECT_EQ(st->archs[0], std::make_pair(std::string("sm_80"), int64_t{1}));
  EXPECT_EQ(st->archs[1], std::make_pair(std::string("sm_90"), int64_t{2}));
  EXPECT_GT(st->payload_bytes, 0);
  EXPECT_GT(st->file_bytes, 0);
}

TEST_F(ShareTest, GcDropsOldEntriesThenLeastRecentlyUsedToFitTheSize) {
  auto store = Open("k.db");
  ASSERT_TRUE(store);
  for (int n = 1; n <= 4; ++n) ASSERT_TRUE(*store->PutWinner(MakeRecord(n, 2.0)));  // created 1700000001..4
  ASSERT_TRUE(*store->RecordHit(Key(1)));  // used now: the most recent of all
  const int64_t now = 1700000000 + 10 * 86400;
  GcOptions old;
  old.older_than_s = 10 * 86400 - 4;  // cut-off 1700000004: 2 and 3 are older; 1 was used just now
  old.now = now;
  auto r = store->CollectGarbage(old);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->removed, 2);  // Key(2) and Key(3); Key(4) is just inside the window
  EXPECT_FALSE(store->GetWinner(Key(2))->has_value());
  EXPECT_FALSE(store->GetWinner(Key(3))->has_value());
  ASSERT_TRUE(store->GetWinner(Key(4))->has_value());

  auto before = store->Stats();
  ASSERT_TRUE(before.ok());
  GcOptions size;
  size.max_payload_bytes = before->payload_bytes - 1;  // one entry must go: the least recently used (4)
  r = store->CollectGarbage(size);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->removed, 1);
  EXPECT_FALSE(store->GetWinner(Key(4))->has_value());
  EXPECT_TRUE(store->GetWinner(Key(1))->has_value());
  EXPECT_LE(r->remaining_bytes, size.max_payload_bytes);
  EXPECT_TRUE(store->CheckIntegrity().ok());

  GcOptions bad;
  bad.max_payload_bytes = -1;
  EXPECT_EQ(store->CollectGarbage(bad).status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------- bundles

TEST_F(ShareTest, BundleRoundTripIsByteExactFiltersArchAndArrivesUnverified) {
  auto src = Open("src.db");
  ASSERT_TRUE(src);
  ASSERT_TRUE(*src->PutWinner(MakeRecord(1, 2.0, "sm_90")));
  ASSERT_TRUE(*src->PutWinner(MakeRecord(2, 3.0, "sm_80")));
  ASSERT_TRUE(*src->PutWinner(MakeRecord(3, 4.0, "sm_90", /*verified=*/false)));
  const std::string bundle = Path("b.json");
  auto ex = ExportBundle(*src, bundle, "sm_90");
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  EXPECT_EQ(ex->entries, 1);
  EXPECT_EQ(ex->skipped_unverified, 1);
  EXPECT_FALSE(fs::exists(bundle + ".tmp"));

  auto dst = Open("dst.db");
  ASSERT_TRUE(dst);
  auto im = ImportBundle(*dst, bundle, "", /*trust=*/false);
  ASSERT_TRUE(im.ok()) << im.status().ToString();
  EXPECT_EQ(im->entries, 1);
  EXPECT_EQ(im->stored, 1);
  auto got = dst->GetWinner(Key(1));
  ASSERT_TRUE(got.ok() && got->has_value());
  auto original = src->GetWinner(Key(1));
  ASSERT_TRUE(original.ok() && original->has_value());
  const WinnerRecord want = **original;
  EXPECT_EQ((**got).cubin, want.cubin);
  EXPECT_EQ((**got).source, want.source);
  EXPECT_EQ((**got).content_hash, want.content_hash);
  EXPECT_EQ((**got).graph_canonical, want.graph_canonical);
  EXPECT_FALSE((**got).verified);
  EXPECT_EQ((**got).pulled_from, "bundle:" + bundle);
  EXPECT_FALSE(dst->GetWinner(Key(2))->has_value());  // sm_80 was filtered out on export

  auto trusted = Open("trusted.db");
  ASSERT_TRUE(trusted);
  ASSERT_TRUE(ImportBundle(*trusted, bundle, "", /*trust=*/true).ok());
  EXPECT_TRUE((*trusted->GetWinner(Key(1)))->verified);
}

TEST_F(ShareTest, BadBundlesAreRefusedWithTheCauseAndWriteNothing) {
  auto src = Open("src.db");
  ASSERT_TRUE(src);
  ASSERT_TRUE(*src->PutWinner(MakeRecord(1, 2.0)));
  ASSERT_TRUE(*src->PutWinner(MakeRecord(2, 2.0)));
  const std::string good = Path("good.json");
  ASSERT_TRUE(ExportBundle(*src, good, "").ok());
  std::ifstream in(good);
  std::stringstream ss;
  ss << in.rdbuf();
  const json original = json::parse(ss.str());

  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(Path(name)) << text;
    return Path(name);
  };
  json newer_format = original;
  newer_format["format_version"] = kBundleFormatVersion + 1;
  json newer_schema = original;
  newer_schema["schema_version"] = kSchemaVersion + 1;
  json tampered = original;  // second entry's cubin changed, hash kept: refused, and the first is not written either
  tampered["entries"][1]["cubin_base64"] = Base64Encode("not the cubin");
  json foreign = original;
  foreign["format"] = "tensorrt-timing-cache";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {write("truncated.json", ss.str().substr(0, ss.str().size() / 2)), "not a JSON object"},
      {write("format.json", newer_format.dump()), "format_version"},
      {write("schema.json", newer_schema.dump()), "schema_version"},
      {write("tampered.json", tampered.dump()), "content hash"},
      {write("foreign.json", foreign.dump()), "not a DICE kernel bundle"},
  };
  auto dst = Open("dst.db");
  ASSERT_TRUE(dst);
  for (const auto& [path, cause] : cases) {
    auto r = ImportBundle(*dst, path, "", false);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << path;
    EXPECT_NE(r.status().message().find(cause), std::string::npos) << r.status().ToString();
    EXPECT_EQ(dst->ListWinners()->size(), 0u) << path;
  }
  EXPECT_EQ(ImportBundle(*dst, Path("absent.json"), "", false).status().code(), StatusCode::kNotFound);
}

// ---------------------------------------------------------------- server additions

class ShareServerTest : public ShareTest {
 protected:
  void SetUp() override {
    ShareTest::SetUp();
    Status st = server_.Start(Path("server.db"), "127.0.0.1", 0, kToken);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  void TearDown() override {
    server_.Stop();
    ShareTest::TearDown();
  }
  CacheServer server_;
};

TEST_F(ShareServerTest, BatchGetReturnsEntriesAndNamesTheMissingKeys) {
  CacheClient client(server_.url(), kToken);
  ASSERT_TRUE(*client.Put(MakeRecord(1, 2.0)));
  ASSERT_TRUE(*client.Put(MakeRecord(2, 3.0)));
  httplib::Client raw("127.0.0.1", server_.port());
  auto res = raw.Post("/v1/kernels/batch", json{{"keys", {Key(1), Key(2), Key(7)}}}.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  ASSERT_EQ(j["entries"].size(), 2u);
  EXPECT_EQ(j["missing"], json::array({Key(7)}));
  auto many = client.GetMany({Key(1), Key(2), Key(7)});
  ASSERT_TRUE(many.ok()) << many.status().ToString();
  ASSERT_EQ(many->size(), 2u);
  for (const WinnerRecord& r : *many) {
    const WinnerRecord want = MakeRecord(r.task_key == Key(1) ? 1 : 2, r.task_key == Key(1) ? 2.0 : 3.0);
    EXPECT_EQ(r.cubin, want.cubin);
  }
  // Bad bodies are 400 and the server keeps serving.
  for (const std::string& body : {std::string("{"), json{{"keys", "x"}}.dump(), json{{"keys", json::array()}}.dump(),
                                  json{{"keys", {"../../etc/passwd"}}}.dump()}) {
    auto bad = raw.Post("/v1/kernels/batch", body, "application/json");
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400) << body;
  }
  json too_many{{"keys", json::array()}};
  for (int i = 0; i <= kMaxBatchKeys; ++i) too_many["keys"].push_back(Key(1000 + i));
  auto big = raw.Post("/v1/kernels/batch", too_many.dump(), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 400);
  EXPECT_TRUE(client.Health().ok());
}

TEST_F(ShareServerTest, DashboardListsEntriesWithEveryFieldEscaped) {
  CacheClient client(server_.url(), kToken);
  WinnerRecord r = MakeRecord(1, 2.5);
  r.origin = "dice:<script>alert('x')</script>&co";
  ASSERT_TRUE(*client.Put(r));
  httplib::Client raw("127.0.0.1", server_.port());
  for (const char* path : {"/", "/dashboard"}) {
    auto res = raw.Get(path);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_NE(res->get_header_value("Content-Type").find("text/html"), std::string::npos);
    const std::string& html = res->body;
    EXPECT_NE(html.find("<td>relu+mul</td>"), std::string::npos) << html;
    EXPECT_NE(html.find("f32[64,2]"), std::string::npos);
    EXPECT_NE(html.find("2.50x"), std::string::npos);
    EXPECT_NE(html.find(Key(1).substr(0, 16)), std::string::npos);
    EXPECT_EQ(html.find("<script>"), std::string::npos) << "unescaped origin";
    EXPECT_NE(html.find("dice:&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;co"), std::string::npos) << html;
  }
}

TEST(HtmlEscapeTest, EscapesTheFiveSpecialCharacters) {
  EXPECT_EQ(HtmlEscape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  EXPECT_EQ(HtmlEscape("plain f32[1,2]"), "plain f32[1,2]");
}

TEST(RenderDashboardTest, SaysWhichRowsOfHowManyAreShownAndLinksThePages) {
  WinnerPage page;
  page.total = 120;
  WinnerSummary e;
  e.record = MakeRecord(1, 2.0);
  page.entries = {e};
  DashboardQuery q;
  q.arch = "sm_90";
  q.page = 2;
  const std::string html = RenderDashboard(page, q, 1700000000 + 1 + 3 * 86400);
  EXPECT_NE(html.find("120 entries (51&ndash;51 shown, newest first)"), std::string::npos) << html;
  EXPECT_NE(html.find(">3d<"), std::string::npos) << html;
  EXPECT_NE(html.find("page 2 of 3"), std::string::npos) << html;
  EXPECT_NE(html.find(R"(href="/?arch=sm_90&amp;sort=newest&amp;page=1">previous)"), std::string::npos) << html;
  EXPECT_NE(html.find(R"(href="/?arch=sm_90&amp;sort=newest&amp;page=3">next)"), std::string::npos) << html;
}

// ---------------------------------------------------------------- remote lookup

TEST_F(ShareServerTest, RemoteLookupStoresThePulledEntryUnverifiedWithItsOrigin) {
  CacheClient client(server_.url(), kToken);
  ASSERT_TRUE(*client.Put(MakeRecord(1, 2.0)));
  auto local = Open("local.db");
  ASSERT_TRUE(local);
  RemoteCacheOptions o;
  o.url = server_.url();
  RemoteCache remote(o);
  std::string why;
  auto got = remote.Lookup(Key(1), local.get(), &why);
  ASSERT_TRUE(got.has_value()) << why;
  EXPECT_FALSE(got->verified);
  EXPECT_EQ(got->pulled_from, server_.url());
  auto stored = local->GetWinner(Key(1));
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_FALSE((**stored).verified);
  EXPECT_EQ((**stored).cubin, MakeRecord(1, 2.0).cubin);
  // A miss (404) is not a failure: the next lookup asks the server again.
  EXPECT_FALSE(remote.Lookup(Key(2), local.get(), &why).has_value());
  EXPECT_FALSE(remote.Lookup(Key(3), local.get(), &why).has_value());
  const RemoteCacheCounters c = remote.counters();
  EXPECT_EQ(c.requests, 3);
  EXPECT_EQ(c.hits, 1);
  EXPECT_EQ(c.misses, 2);
  EXPECT_EQ(c.skipped, 0);

  // A kernel that already failed here (its attempt is recorded) is not pulled again.
  auto failed_here = Open("failed.db");
  ASSERT_TRUE(failed_here);
  AttemptRecord attempt;
  attempt.task_key = Key(1);
  attempt.candidate_hash = MakeRecord(1, 2.0).candidate_hash;
  attempt.origin = "pulled";
  attempt.outcome = "verify_failed";
  ASSERT_TRUE(failed_here->RecordAttempt(attempt).ok());
  EXPECT_FALSE(remote.Lookup(Key(1), failed_here.get(), &why).has_value());
  EXPECT_NE(why.find("already tried"), std::string::npos) << why;
  EXPECT_FALSE(failed_here->GetWinner(Key(1))->has_value());

  o.trust = true;
  RemoteCache trusting(o);
  auto other = Open("trusting.db");
  ASSERT_TRUE(other);
  auto t = trusting.Lookup(Key(1), other.get(), &why);
  ASSERT_TRUE(t.has_value()) << why;
  EXPECT_TRUE((*other->GetWinner(Key(1)))->verified);
}

// A port that accepts connections (the kernel's backlog) but never answers:
// the worst dead server, one that makes every request wait for its timeout.
TEST_F(ShareTest, DeadServerCostsOneTimeoutThenNothingWhileBackingOff) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  auto local = Open("local.db");
  ASSERT_TRUE(local);
  RemoteCacheOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(port);
  o.timeout = std::chrono::milliseconds(200);
  o.backoff_initial = std::chrono::milliseconds(60000);
  RemoteCache remote(o);
  std::string why;
  auto t0 = Clock::now();
  EXPECT_FALSE(remote.Lookup(Key(1), local.get(), &why).has_value());
  const double first_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_LT(first_ms, 2000) << "the first lookup must be bounded by the timeout: " << why;
  EXPECT_NE(why.find("paused"), std::string::npos) << why;

  constexpr int kLookups = 1000;
  t0 = Clock::now();
  for (int i = 0; i < kLookups; ++i) EXPECT_FALSE(remote.Lookup(Key(i), local.get()).has_value());
  const double per_lookup_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / kLookups;
  EXPECT_LT(per_lookup_ms, 0.5) << "a lookup during back-off must not touch the network";
  const RemoteCacheCounters c = remote.counters();
  EXPECT_EQ(c.requests, 1);
  EXPECT_EQ(c.failures, 1);
  EXPECT_EQ(c.skipped, kLookups);
  ::close(fd);
  std::printf("dead server: first lookup %.1f ms, then %.4f ms per lookup\n", first_ms, per_lookup_ms);
}

TEST_F(ShareTest, BackOffDoublesAndASuccessResetsIt) {
  // Nothing listens on this port once the socket is closed: refused at once.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  RemoteCacheOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(port);
  o.backoff_initial = std::chrono::milliseconds(50);
  o.backoff_max = std::chrono::milliseconds(100);
  RemoteCache remote(o);
  std::string why;
  EXPECT_FALSE(remote.Lookup(Key(1), nullptr, &why).has_value());
  EXPECT_NE(why.find("paused for 50 ms"), std::string::npos) << why;
  EXPECT_FALSE(remote.Lookup(Key(1), nullptr, &why).has_value());  // inside the 50 ms: skipped
  EXPECT_EQ(remote.counters().skipped, 1);
  usleep(60 * 1000);
  EXPECT_FALSE(remote.Lookup(Key(1), nullptr, &why).has_value());
  EXPECT_NE(why.find("paused for 100 ms"), std::string::npos) << why;
  usleep(110 * 1000);
  EXPECT_FALSE(remote.Lookup(Key(1), nullptr, &why).has_value());
  EXPECT_NE(why.find("paused for 100 ms"), std::string::npos) << "capped at backoff_max: " << why;
  EXPECT_EQ(remote.counters().requests, 3);
}

TEST(RemoteCacheOptionsTest, ReadsTheEnvironmentAndRejectsABadUrl) {
  ::setenv("DICE_REMOTE_CACHE", "http://cache.example:8470", 1);
  ::setenv("DICE_REMOTE_TOKEN", "tok", 1);
  ::setenv("DICE_TRUST_REMOTE", "1", 1);
  ::setenv("DICE_REMOTE_TIMEOUT_MS", "150", 1);
  auto o = RemoteCacheOptions::FromEnv();
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->url, "http://cache.example:8470");
  EXPECT_EQ(o->token, "tok");
  EXPECT_TRUE(o->trust);
  EXPECT_EQ(o->timeout.count(), 150);
  ::setenv("DICE_REMOTE_CACHE", "cache.example:8470", 1);
  auto bad = RemoteCacheOptions::FromEnv();
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("cache.example:8470"), std::string::npos);
  ::setenv("DICE_REMOTE_CACHE", "http://ok", 1);
  ::setenv("DICE_REMOTE_TIMEOUT_MS", "fast", 1);  // junk: the default, with a warning (dice/core/env.h)
  auto junk = RemoteCacheOptions::FromEnv();
  ASSERT_TRUE(junk.ok()) << junk.status().ToString();
  EXPECT_EQ(junk->timeout.count(), 300);
  for (const char* v : {"DICE_REMOTE_CACHE", "DICE_REMOTE_TOKEN", "DICE_TRUST_REMOTE", "DICE_REMOTE_TIMEOUT_MS"}) {
    ::unsetenv(v);
  }
}

}  // namespace
}  // namespace dice::cache
