// Template sweeps as a CuKe source (CPU): the committed catalog parses and
// validates, bad catalogs are rejected naming the entry, and a sweep on a
// GPU-less machine compiles every template candidate with NVRTC and stores
// nothing. The GPU run (winners -> dataset -> device-form judge) is in
// sweep_gpu_test.cc.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "dice/cache/store.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/generator/templates.h"
#include "dice/core/task.h"
#include "dice/training/examples.h"
#include "dice/training/sweep.h"

namespace dice::training {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/dice_sweep_XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl), nullptr);
  return tmpl;
}

TEST(TrainingSweep, TheCommittedCatalogParsesAndValidates) {
  auto catalog = ReadSweepCatalog(std::string(DICE_SOURCE_DIR) + "/training/sweeps/templates.json");
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  EXPECT_GE(catalog->size(), 20u);
  size_t tasks = 0;
  for (const auto& e : *catalog) tasks += e.shapes.size();
  EXPECT_GE(tasks, 35u);
}

TEST(TrainingSweep, BadCatalogsNameTheEntry) {
  const std::string dir = TempDir();
  auto check = [&](const std::string& text, const std::string& needle) {
    std::ofstream(dir + "/c.json") << text;
    auto r = ReadSweepCatalog(dir + "/c.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().ToString();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  const std::string relu = R"("dice-ir v1\ninput %0 f32 rank=2\n%1 = relu(%0)\noutput %1\n")";
  check("{}", "not a JSON array");
  check(R"([{"name": "a"}])", "entry 0");
  check(R"([{"name": "r", "ir": )" + relu + R"(, "shapes": [["8x8:f32", "8:f32"]]}])", "entry 0 (r)");
  check(R"([{"name": "r", "ir": )" + relu + R"(, "shapes": [["8:f32"]]}])", "does not match input %0");
  check(R"([{"name": "bad", "ir": "dice-ir v1\ninput %0 f32 rank=2\n%1 = frobnicate(%0)\noutput %1\n", "shapes": [["8x8:f32"]]}])",
        "entry 0 (bad)");
  check(R"([{"name": "r", "ir": )" + relu + R"(, "shapes": []}])", "no shape set");
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

// A cache file that cannot be opened (its folder is a regular file) stops
// the sweep before any tuning, naming the flag and the path.
TEST(TrainingSweep, AnUnopenableCacheIsBadInputNamingThePath) {
  const std::string dir = TempDir();
  std::ofstream(dir + "/not-a-folder") << "x";
  SweepOptions o;
  o.catalog_path = std::string(DICE_SOURCE_DIR) + "/training/sweeps/templates.json";
  o.cache_db = dir + "/not-a-folder/cache.db";
  o.only = "relu";
  auto r = RunSweep(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--cache-db " + o.cache_db), std::string::npos) << r.status().ToString();
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(TrainingSweep, WithoutAGpuEveryCandidateIsCompiledAndNothingStored) {
  if (runtime::QueryDevice(0).ok()) GTEST_SKIP() << "a GPU is present: sweep_gpu_test.cc covers the tuned sweep";
  const std::string dir = TempDir();
  SweepOptions o;
  o.catalog_path = std::string(DICE_SOURCE_DIR) + "/training/sweeps/templates.json";
  o.cache_db = dir + "/cache.db";
  o.only = "relu,softmax_last";
  std::vector<std::string> lines;
  auto r = RunSweep(o, [&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->compile_only);
  EXPECT_EQ(r->tasks, 5);  // relu at 2 shapes, softmax_last at 3
  ASSERT_EQ(r->rows.size(), 5u);
  for (const auto& row : r->rows) {
    EXPECT_GT(row.tried, 0) << row.name << " " << row.shapes;
    EXPECT_EQ(row.compiled, row.tried) << row.name << " " << row.shapes;
    EXPECT_EQ(row.speedup, 0.0);
  }
  EXPECT_EQ(r->winners, 0);
  auto store = cache::Store::Open(o.cache_db);
  ASSERT_TRUE(store.ok());
  auto winners = (*store)->ListWinners();
  ASSERT_TRUE(winners.ok());
  EXPECT_TRUE(winners->empty());
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.front().find("compile-only"), std::string::npos) << lines.front();
  EXPECT_NE(lines[1].find("not verified or timed"), std::string::npos) << lines[1];
  EXPECT_EQ(lines.back().find("next:"), std::string::npos) << lines.back();  // nothing to import

  o.only = "relu,no_such_group";
  auto bad = RunSweep(o, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("no_such_group"), std::string::npos);
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}


// Every template kernel the sweep can make a winner of has kernel-body
// lines to fill in (dataset device_infill examples), within the default
// 384 bytes, and the pieces rebuild the kernel.
TEST(TrainingSweep, EveryCatalogTemplateKernelHasInfillSpans) {
  auto catalog = ReadSweepCatalog(std::string(DICE_SOURCE_DIR) + "/training/sweeps/templates.json");
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  generator::TemplateGenerator templates;
  size_t kernels = 0;
  for (const auto& e : *catalog) {
    auto task = Task::Make(e.graph, e.shapes.front(), runtime::TargetForDevice(0));
    ASSERT_TRUE(task.ok()) << e.name << ": " << task.status().ToString();
    auto candidates = templates.Generate(*task, 2);
    ASSERT_TRUE(candidates.ok()) << e.name << ": " << candidates.status().ToString();
    for (const auto& c : *candidates) {
      SCOPED_TRACE(e.name + " " + c.origin);
      const auto spans = SplitKernelForInfill(c.source, 2, 384);
      ASSERT_FALSE(spans.empty()) << c.source;
      for (const auto& sp : spans) {
        EXPECT_EQ(sp.preamble + sp.prefix + sp.middle + sp.suffix, c.source);
        EXPECT_LE(sp.middle.size(), 384u);
        // What the prompt shows (the __global__ functions) fits a byte-level model's 8192 positions.
        EXPECT_LT(sp.prefix.size() + sp.suffix.size(), 6000u);
      }
      ++kernels;
    }
  }
  EXPECT_GE(kernels, catalog->size());
}

}  // namespace
}  // namespace dice::training
