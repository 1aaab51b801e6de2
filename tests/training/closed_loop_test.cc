// The dataset half of the closed loop (CPU, torch-free): a winner the DICE
// generator earned inside `dice tune` (origin "dice:...") is a cache entry
// like a template winner, and `dice train dataset --cache-db` turns it into
// a device example exactly once, even when the same winner comes from two
// caches (a local one and a pulled copy) or the same cache is named twice.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "dice/cache/store.h"
#include "dice/training/dataset.h"
#include "dice/training/examples.h"

namespace dice::training {
namespace {

cache::WinnerRecord DiceWinner() {
  cache::WinnerRecord w;
  w.task_key = std::string(64, 'd');
  w.graph_canonical = "dice-ir v1\ninput %0 f32 rank=1\n%1 = relu(%0)\n%2 = const(2)\n%3 = mul(%1, %2)\noutput %3\n";
  w.input_specs = "f32[4099]";
  w.arch = "sm_90";
  w.gpu_name = "NVIDIA H200";
  w.origin = "dice:sample3";
  w.candidate_hash = std::string(64, 'e');
  w.source = "extern \"C\" __global__ void k(const float* x, float* y) {\n"
             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  if (i < 4099) y[i] = 2.f * fmaxf(x[i], 0.f);\n}\n";
  w.cubin = "not-a-cubin";
  w.launch_plan_json = R"({"launches":[{"kernel":"k","grid":[17,1,1],"block":[256,1,1],"smem":0}],"workspace":0})";
  w.baseline_us = 9.0;
  w.best_us = 3.0;
  w.speedup = 3.0;
  w.versions_json = "{}";
  return w;
}

TEST(TrainingClosedLoop, ADiceWinnerEntersTheDatasetExactlyOnce) {
  char tmpl[] = "/tmp/dice_loop_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  for (const char* db : {"/local.db", "/pulled.db"}) {
    auto store = cache::Store::Open(dir + db);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->PutWinner(DiceWinner()).ok());
  }
  DatasetOptions o;
  o.cache_dbs = {dir + "/local.db", dir + "/pulled.db", dir + "/local.db"};
  o.out_path = dir + "/cuke.jsonl";
  o.device_infill_spans = 1;
  auto r = BuildDataset(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->read, 3);
  EXPECT_EQ(r->device, 1);
  EXPECT_EQ(r->device_infill, 1);
  EXPECT_EQ(r->duplicates, 4);  // the second and third copies, each a device and a device_infill example
  auto examples = ReadExamples(o.out_path, nullptr);
  ASSERT_TRUE(examples.ok()) << examples.status().ToString();
  int device = 0;
  for (const auto& e : *examples) {
    EXPECT_EQ(e.op_chain, "mul+relu");
    device += e.kind == "device";
    if (e.kind == "device") {
      EXPECT_EQ(e.middle, DiceWinner().source);
    }
  }
  EXPECT_EQ(device, 1);
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace dice::training
