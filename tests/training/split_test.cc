// The train / validation / held-out split by op-chain (CPU, torch-free):
// the op-chain key, the hash split, the committed sweep catalog's split
// sizes, and a dataset built from a winner for every catalog task keeping
// every op-chain in one split with at least 60 held-out device_infill and 40
// held-out device tasks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "dice/cache/store.h"
#include "dice/core/task.h"
#include "dice/generator/templates.h"
#include "dice/training/dataset.h"
#include "dice/training/examples.h"
#include "dice/training/split.h"
#include "dice/training/sweep.h"

namespace dice::training {
namespace {

const std::string kCatalog = std::string(DICE_SOURCE_DIR) + "/training/sweeps/templates.json";

ir::Graph ParseOrDie(const std::string& text) {
  auto g = ir::Parse(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : ir::Graph{};
}

TEST(TrainingSplit, OpChainKeyIsTheSortedOpMultisetWithoutConstants) {
  const ir::Graph a = ParseOrDie(
      "dice-ir v1\ninput %0 f32 rank=2\ninput %1 f32 rank=1\n%2 = add(%0, %1)\n%3 = gelu(%2)\n"
      "%4 = const(0.5)\n%5 = mul(%3, %4)\noutput %5\n");
  EXPECT_EQ(OpChainKey(a), "add+gelu+mul");
  // The same ops in another order, another dtype and GELU approximation: the same op-chain.
  const ir::Graph b = ParseOrDie(
      "dice-ir v1\ninput %0 bf16 rank=2\ninput %1 bf16 rank=2\n%2 = gelu(%0) i=1\n%3 = mul(%2, %1)\n"
      "%4 = add(%3, %1)\noutput %4\n");
  EXPECT_EQ(OpChainKey(b), "add+gelu+mul");
  EXPECT_EQ(OpChainKey(ParseOrDie("dice-ir v1\ninput %0 f32 rank=2\n%1 = relu(%0)\noutput %1\n")), "relu");
}

TEST(TrainingSplit, TheHashSplitFollowsThePercentagesAndIsDeterministic) {
  SplitOptions all_heldout{100, 0}, all_train{0, 0}, half{30, 20};
  std::map<std::string, int> counts;
  for (int i = 0; i < 4000; ++i) {
    const std::string key = "chain" + std::to_string(i);
    EXPECT_STREQ(SplitOfKey(key, all_heldout), "heldout");
    EXPECT_STREQ(SplitOfKey(key, all_train), "train");
    EXPECT_STREQ(SplitOfKey(key, half), SplitOfKey(key, half));
    ++counts[SplitOfKey(key, half)];
  }
  // 4,000 keys: each share within 3 points of its percentage (about 4 sd).
  EXPECT_NEAR(counts["heldout"] / 40.0, 30.0, 3.0);
  EXPECT_NEAR(counts["validation"] / 40.0, 20.0, 3.0);
  EXPECT_NEAR(counts["train"] / 40.0, 50.0, 3.0);
  EXPECT_TRUE(InSplit("", "train"));  // datasets from before the split field
  EXPECT_FALSE(InSplit("validation", "train"));
  EXPECT_TRUE(InSplit("heldout", "all"));
  EXPECT_EQ(CheckSplitOptions({60, 50}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckSplitOptions({-1, 0}).code(), StatusCode::kInvalidArgument);
}

// The committed catalog at the default split: no op-chain in two splits,
// single ops and chains on every side, and twice the 40 held-out device
// tasks issue 21 asks for (about half of a sweep's tasks clear the 2.0x
// filter on the H200: 26 of 53 in docs/PERF.md session 8).
TEST(TrainingSplit, TheCommittedCatalogKeepsOpChainsApartWithPower) {
  auto catalog = ReadSweepCatalog(kCatalog);
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  const CatalogSplit split = SplitCatalog(*catalog, SplitOptions{});
  std::map<std::string, std::string> chain_split;
  for (const auto& [name, part] : split.parts) {
    for (const auto& chain : part.op_chains) {
      EXPECT_TRUE(chain_split.emplace(chain, name).second) << chain << " in " << chain_split[chain] << " and " << name;
    }
  }
  const auto& heldout = split.parts.at("heldout");
  const auto& validation = split.parts.at("validation");
  const auto& train = split.parts.at("train");
  EXPECT_GE(heldout.tasks, 80) << DescribeCatalogSplit(split);
  EXPECT_GE(validation.tasks, 40) << DescribeCatalogSplit(split);
  EXPECT_GE(heldout.op_chains.size(), 20u) << DescribeCatalogSplit(split);
  EXPECT_GT(train.tasks, heldout.tasks);
  for (const auto* part : {&heldout, &validation, &train}) {
    EXPECT_GT(part->level1_tasks, 0) << DescribeCatalogSplit(split);
    EXPECT_GT(part->tasks - part->level1_tasks, part->level1_tasks) << DescribeCatalogSplit(split);
  }
}

// Every catalog task "wins" (its first template candidate, speedup 3x, as
// if tuned on a GPU) into a cache; the dataset built from it keeps each
// op-chain in one split (device and device_infill examples alike) and holds
// out >= 40 device and >= 60 device_infill tasks, with a validation split
// apart from both.
TEST(TrainingSplit, ADatasetOfTheCatalogsWinnersKeepsOpChainsApartWithPower) {
  auto catalog = ReadSweepCatalog(kCatalog);
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  char tmpl[] = "/tmp/dice_split_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  int64_t winners = 0;
  {
    auto store = cache::Store::Open(dir + "/cache.db");
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    generator::TemplateGenerator templates;
    for (const auto& e : *catalog) {
      for (const auto& specs : e.shapes) {
        auto task = Task::Make(e.graph, specs, TargetInfo{});
        ASSERT_TRUE(task.ok()) << e.name << ": " << task.status().ToString();
        auto cands = templates.Generate(*task, 1);
        ASSERT_TRUE(cands.ok() && !cands->empty()) << e.name << ": no template candidate";
        cache::WinnerRecord w;
        w.task_key = task->Key();
        w.graph_canonical = ir::Canonical(e.graph);
        for (size_t k = 0; k < specs.size(); ++k) w.input_specs += (k ? ";" : "") + specs[k].ToString();
        w.arch = "sm_90";
        w.gpu_name = "NVIDIA H200";
        w.origin = (*cands)[0].origin;
        w.candidate_hash = (*cands)[0].Hash();
        w.source = (*cands)[0].source;
        w.cubin = "not-a-cubin";
        w.launch_plan_json = (*cands)[0].plan.ToJson();
        w.baseline_us = 30;
        w.best_us = 10;
        w.speedup = 3;
        w.versions_json = "{}";
        ASSERT_TRUE((*store)->PutWinner(w).ok());
        ++winners;
      }
    }
  }
  DatasetOptions o;
  o.cache_dbs = {dir + "/cache.db"};
  o.out_path = dir + "/cuke.jsonl";
  auto r = BuildDataset(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->read, winners);
  auto examples = ReadExamples(o.out_path, nullptr);
  ASSERT_TRUE(examples.ok()) << examples.status().ToString();
  std::map<std::string, std::set<std::string>> splits_of_chain;
  std::map<std::string, int64_t> count;  // "split/kind"
  for (const auto& e : *examples) {
    const std::string chain = OpChainKey(ParseOrDie(e.graph));
    EXPECT_EQ(e.op_chain, chain) << e.id;
    splits_of_chain[chain].insert(e.split);
    ++count[e.split + "/" + e.kind];
  }
  for (const auto& [chain, splits] : splits_of_chain) EXPECT_EQ(splits.size(), 1u) << chain << " is in several splits";
  std::printf("every catalog task a winner: %lld examples; heldout device %lld device_infill %lld, validation device %lld "
              "device_infill %lld, train device %lld device_infill %lld\n",
              static_cast<long long>(examples->size()), static_cast<long long>(count["heldout/device"]),
              static_cast<long long>(count["heldout/device_infill"]), static_cast<long long>(count["validation/device"]),
              static_cast<long long>(count["validation/device_infill"]), static_cast<long long>(count["train/device"]),
              static_cast<long long>(count["train/device_infill"]));
  EXPECT_GE(count["heldout/device"], 40);
  EXPECT_GE(count["heldout/device_infill"], 60);
  EXPECT_GE(count["validation/device"], 20);
  EXPECT_EQ(r->heldout, count["heldout/device"] + count["heldout/device_infill"]);
  EXPECT_EQ(r->validation, count["validation/device"] + count["validation/device_infill"]);
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace dice::training
