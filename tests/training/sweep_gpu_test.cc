// Template sweep -> CuKe device examples -> device-form judge, on the GPU
// (issue 4, CuKe source (b)): the sweep stores verified winners with their
// measured speedup, the dataset builder turns them into device examples
// (whole kernels, and device_infill spans of their body lines),
// and each example's own answer earns reward 1 from the device-form judge
// while a broken copy earns 0. Skipped without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dice/runtime/cuda_driver.h"
#include "dice/training/dataset.h"
#include "dice/training/examples.h"
#include "dice/training/reward.h"
#include "dice/training/sweep.h"

namespace dice::training {
namespace {

TEST(TrainingSweepGpu, SweepWinnersBecomeDeviceExamplesTheJudgeAccepts) {
  if (!runtime::QueryDevice(0).ok()) GTEST_SKIP() << "no GPU: " << runtime::QueryDevice(0).status().ToString();
  char tmpl[] = "/tmp/dice_sweepgpu_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  SweepOptions o;
  o.catalog_path = std::string(DICE_SOURCE_DIR) + "/training/sweeps/templates.json";
  o.cache_db = dir + "/cache.db";
  o.only = "softmax_last,layer_norm,rmsnorm_chain";
  o.budget_s = 60;
  o.max_candidates = 8;
  auto r = RunSweep(o, [](const std::string& l) { std::printf("%s\n", l.c_str()); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->compile_only);
  // One task per shape set of the three families in the catalog (it grows:
  // a hard-coded count went stale when 18 shape sets were added).
  std::ifstream catalog_file(o.catalog_path);
  const auto catalog = nlohmann::json::parse(catalog_file);
  int64_t shape_sets = 0;
  for (const auto& entry : catalog) {
    const std::string name = entry.at("name").get<std::string>();
    if (name == "softmax_last" || name == "layer_norm" || name == "rmsnorm_chain") shape_sets += entry.at("shapes").size();
  }
  ASSERT_GT(shape_sets, 0) << "no softmax_last/layer_norm/rmsnorm_chain entry in " << o.catalog_path;
  EXPECT_EQ(r->tasks, shape_sets);
  ASSERT_GE(r->winners, 1) << "no template beat PyTorch on softmax, layer_norm or rmsnorm";
  for (const auto& row : r->rows) EXPECT_GT(row.baseline_us, 0) << row.name << " " << row.shapes;

  DatasetOptions d;
  d.cache_dbs = {o.cache_db};
  d.out_path = dir + "/cuke.jsonl";
  d.min_speedup = 0;
  d.heldout_percent = 0;
  auto ds = BuildDataset(d, nullptr);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->device, r->winners);
  EXPECT_GE(ds->device_infill, r->winners);  // each template kernel has body lines to fill in
  auto examples = ReadExamples(d.out_path, nullptr);
  ASSERT_TRUE(examples.ok()) << examples.status().ToString();

  DeviceFormJudge judge("cuda", 20);
  RewardOptions ro;
  ro.judge = true;
  ro.device_judge = &judge;
  for (const auto& e : *examples) {
    SCOPED_TRACE(e.id);
    ASSERT_TRUE(e.kind == "device" || e.kind == "device_infill") << e.kind;
    ASSERT_TRUE(e.speedup.has_value());
    // A whole kernel with a bad statement; for device_infill, a bad middle.
    std::string broken = e.kind == "device_infill" ? std::string("  this_does_not_compile;\n") : e.middle;
    if (e.kind == "device") broken.insert(broken.rfind('}'), "\n  this_does_not_compile;\n");
    auto scored = RewardAnswers(e, {"```cuda\n" + e.middle + "```", "```cuda\n" + broken + "```"}, ro);
    ASSERT_TRUE(scored.ok()) << scored.status().ToString();
    EXPECT_DOUBLE_EQ((*scored)[0].reward, 1.0) << (*scored)[0].why;
    EXPECT_GT((*scored)[0].speedup, 0.0);
    EXPECT_DOUBLE_EQ((*scored)[1].reward, 0.0);
    EXPECT_FALSE((*scored)[1].compiled) << (*scored)[1].why;
  }
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace dice::training
