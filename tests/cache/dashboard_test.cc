// The cache server's dashboard page (GET /) loaded in a real browser:
// headless Chromium (Debian's `chromium`) fetches it from a server on
// loopback and dumps the DOM it built; the entries must be there as table
// rows, with hostile text rendered as text (no element injected).
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

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

TEST(DashboardBrowserTest, HeadlessChromiumShowsEveryEntryAsATableRow) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "chromium is not installed (Debian package `chromium`; scripts/setup.sh installs it)";
  }
  std::string tmpl = (fs::temp_directory_path() / "dice-dashboard-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  {
    CacheServer server;
    Status st = server.Start(dir + "/kernels.db", "127.0.0.1", 0, "tok");
    ASSERT_TRUE(st.ok()) << st.ToString();
    CacheClient client(server.url(), "tok");
    ASSERT_TRUE(*client.Put(Entry(1, 2.25, "template:elementwise/b256/v4", ir::OpKind::kRelu)));
    ASSERT_TRUE(*client.Put(Entry(2, 3.5, "dice:<img src=x onerror=alert(1)>", ir::OpKind::kSigmoid)));

    const std::string cmd = "timeout 90 " + chromium +
                            " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir=" + dir +
                            "/profile --dump-dom " + server.url() + "/ 2>/dev/null";
    const std::string dom = Capture(cmd);
    ASSERT_NE(dom.find("<table id=\"entries\">"), std::string::npos) << "no table in the DOM:\n" << dom;
    EXPECT_NE(dom.find("<td>relu</td><td>f16[8,4096]</td><td>sm_90</td><td class=\"n\">2.25x</td>"
                       "<td>template:elementwise/b256/v4</td>"),
              std::string::npos)
        << dom;
    EXPECT_NE(dom.find("<td>sigmoid</td><td>f16[8,8192]</td>"), std::string::npos) << dom;
    EXPECT_NE(dom.find("3.50x"), std::string::npos) << dom;
    // The hostile origin is text in its cell: the browser built no <img>.
    EXPECT_EQ(dom.find("<img"), std::string::npos) << dom;
    EXPECT_NE(dom.find("dice:&lt;img src=x onerror=alert(1)&gt;"), std::string::npos) << dom;
    EXPECT_NE(dom.find("2 entries"), std::string::npos) << dom;
    server.Stop();
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace dice::cache
