// The cache server's dashboard (GET /, GET /entry/{key}) loaded in a real
// browser: headless Chromium (Debian's `chromium`) fetches the pages from a
// server on loopback and dumps the DOM it built; the entries must be there
// as table rows with their state (verified, unverified, damaged), filtered
// and sorted as the URL says, with hostile text rendered as text (no
// element injected); the detail page shows source, plan and attempts; an
// empty cache says how to fill it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dice/cache/http_client.h"
#include "dice/cache/http_server.h"
#include "dice/cache/store.h"
#include "dice/core/ir.h"

namespace dice::cache {
namespace {

namespace fs = std::filesystem;

// The first of chromium / chromium-browser / google-chrome on PATH, or "".
std::string FindChromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    const std::string cmd = std::string("command -v ") + name + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return name;
  }
  return "";
}

std::string Capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

WinnerRecord Entry(int n, double speedup, const std::string& origin, ir::OpKind kind) {
  ir::Graph g;
  g.inputs = {{ir::DType::kFloat16, 2}};
  ir::Op op;
  op.kind = kind;
  op.args = {0};
  g.ops = {op};
  g.outputs = {1};
  WinnerRecord r;
  r.task_key = std::string(63, 'e') + std::to_string(n);
  r.graph_canonical = ir::Canonical(g);
  r.input_specs = "f16[8," + std::to_string(4096 * n) + "]";
  r.arch = "sm_90";
  r.gpu_name = "NVIDIA H200";
  r.origin = origin;
  r.candidate_hash = "h" + std::to_string(n);
  r.source = "__global__ void k() {}";
  r.cubin = "ELF" + std::to_string(n);
  r.launch_plan_json = "{}";
  r.baseline_us = 10;
  r.best_us = 10 / speedup;
  r.speedup = speedup;
  r.versions_json = "{}";
  return r;
}

// Runs headless Chromium on `url` and returns the DOM it built ("" when
// it could not run).
std::string DumpDom(const std::string& chromium, const std::string& profile_dir, const std::string& url) {
  const std::string cmd = "timeout 90 " + chromium +
                          " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir=" +
                          profile_dir + " --dump-dom '" + url + "' 2>/dev/null";
  return Capture(cmd);
}

class DashboardBrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = FindChromium();
    if (chromium_.empty()) {
      GTEST_SKIP() << "chromium is not installed (Debian package `chromium`; scripts/setup.sh installs it)";
    }
    std::string tmpl = (fs::temp_directory_path() / "dice-dashboard-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    Status st = server_.Start(dir_ + "/kernels.db", "127.0.0.1", 0, "tok");
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  void TearDown() override {
    server_.Stop();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  std::string Dom(const std::string& path) { return DumpDom(chromium_, dir_ + "/profile", server_.url() + path); }
  std::string chromium_, dir_;
  CacheServer server_;
};

TEST_F(DashboardBrowserTest, HeadlessChromiumShowsEveryEntryAsATableRowWithItsState) {
  CacheClient client(server_.url(), "tok");
  ASSERT_TRUE(*client.Put(Entry(1, 2.25, "template:elementwise/b256/v4", ir::OpKind::kRelu)));
  ASSERT_TRUE(*client.Put(Entry(2, 3.5, "dice:<img src=x onerror=alert(1)>", ir::OpKind::kSigmoid)));
  {
    auto store = Store::Open(dir_ + "/kernels.db");  // beside the server: an unverified and a damaged entry
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    WinnerRecord pulled = Entry(3, 5.0, "template:pulled", ir::OpKind::kRelu);
    pulled.verified = false;
    ASSERT_TRUE(*(*store)->PutWinner(pulled));
    WinnerRecord bad = Entry(4, 1.5, "template:bad-plan", ir::OpKind::kSigmoid);
    bad.launch_plan_json = "not json";
    ASSERT_TRUE(*(*store)->PutWinner(bad));
  }
  const std::string dom = Dom("/");
  ASSERT_NE(dom.find("<table id=\"entries\">"), std::string::npos) << "no table in the DOM:\n" << dom;
  EXPECT_NE(dom.find("<tr class=\"verified\"><td>relu</td><td>f16[8,4096]</td><td>sm_90</td><td>NVIDIA H200</td>"
                     "<td class=\"state\">verified</td><td class=\"n\">0</td><td class=\"n\">10.00</td>"
                     "<td class=\"n\">4.44</td><td class=\"n\">2.25x</td><td><code>h1</code></td>"
                     "<td>template:elementwise/b256/v4</td>"),
            std::string::npos)
      << dom;
  EXPECT_NE(dom.find("<td>sigmoid</td><td>f16[8,8192]</td>"), std::string::npos) << dom;
  EXPECT_NE(dom.find("3.50x"), std::string::npos) << dom;
  EXPECT_NE(dom.find("<tr class=\"unverified\"><td>relu</td><td>f16[8,12288]</td>"), std::string::npos) << dom;
  EXPECT_NE(dom.find("<tr class=\"damaged\"><td>sigmoid</td><td>f16[8,16384]</td>"), std::string::npos) << dom;
  EXPECT_NE(dom.find("damaged: launch plan is not a JSON object"), std::string::npos) << dom;
  // The hostile origin is text in its cell: the browser built no <img>.
  EXPECT_EQ(dom.find("<img"), std::string::npos) << dom;
  EXPECT_NE(dom.find("dice:&lt;img src=x onerror=alert(1)&gt;"), std::string::npos) << dom;
  EXPECT_NE(dom.find("4 entries"), std::string::npos) << dom;

  // Filtered and sorted by the URL: verified sm_90 entries, fastest first.
  const std::string sorted = Dom("/?arch=sm_90&verified=1&sort=speedup");
  const size_t fast = sorted.find("3.50x"), mid = sorted.find("2.25x"), slow = sorted.find("1.50x");
  ASSERT_NE(fast, std::string::npos) << sorted;
  ASSERT_NE(mid, std::string::npos) << sorted;
  ASSERT_NE(slow, std::string::npos) << sorted;
  EXPECT_LT(fast, mid) << sorted;
  EXPECT_LT(mid, slow) << sorted;
  EXPECT_EQ(sorted.find("5.00x"), std::string::npos) << "unverified entry shown:\n" << sorted;
  EXPECT_NE(sorted.find("3 entries"), std::string::npos) << sorted;
}

TEST_F(DashboardBrowserTest, EntryPageShowsSourcePlanAndAttempts) {
  WinnerRecord r = Entry(1, 2.0, "template:x", ir::OpKind::kRelu);
  r.source = "__global__ void k(float* y) { if (n < 4 && y) y[0] = 1; }";
  r.launch_plan_json = R"({"grid":[8,1,1],"block":[256,1,1]})";
  CacheClient client(server_.url(), "tok");
  ASSERT_TRUE(*client.Put(r));
  {
    auto store = Store::Open(dir_ + "/kernels.db");
    ASSERT_TRUE(store.ok());
    AttemptRecord a;
    a.task_key = r.task_key;
    a.candidate_hash = "0123456789abcdef";
    a.origin = "dice:<script>alert(2)</script>";
    a.outcome = "verify_failed";
    a.error = "max abs error 3.1e-2 > 1e-3";
    ASSERT_TRUE((*store)->RecordAttempt(a).ok());
  }
  const std::string dom = Dom("/entry/" + r.task_key);
  ASSERT_NE(dom.find("<pre id=\"source\">"), std::string::npos) << dom;
  EXPECT_NE(dom.find("if (n &lt; 4 &amp;&amp; y) y[0] = 1;"), std::string::npos) << dom;
  EXPECT_NE(dom.find("\"block\": ["), std::string::npos) << dom;
  EXPECT_NE(dom.find("<td>verify_failed</td>"), std::string::npos) << dom;
  EXPECT_NE(dom.find("max abs error 3.1e-2 &gt; 1e-3"), std::string::npos) << dom;
  EXPECT_EQ(dom.find("<script>"), std::string::npos) << dom;
  EXPECT_NE(dom.find("<p id=\"state\" class=\"verified\">verified</p>"), std::string::npos) << dom;
}

TEST_F(DashboardBrowserTest, EmptyCacheSaysHowToFillIt) {
  const std::string dom = Dom("/");
  ASSERT_NE(dom.find("This cache is empty"), std::string::npos) << dom;
  EXPECT_NE(dom.find("dice tune"), std::string::npos) << dom;
  EXPECT_NE(dom.find("dice cache pull"), std::string::npos) << dom;
  EXPECT_NE(dom.find("0 entries"), std::string::npos) << dom;
}

}  // namespace
}  // namespace dice::cache
