// Tuner progress events (tuner.h TuneProgress): a compile-only Tune reports
// its phases in order, with counts that end equal to the report's.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "relu_graph.h"
#include "dice/core/task.h"
#include "dice/generator/templates.h"
#include "dice/runtime/tuner.h"

namespace dice::runtime {
namespace {

Task ReluTask() {
  auto task = Task::Make(runtime_test::ReluGraph(), {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4099})},
                         TargetInfo{});
  EXPECT_TRUE(task.ok()) << task.status().ToString();
  return *task;
}

TEST(TunerProgress, CompileOnlyReportsItsPhasesInOrderWithGrowingCounts) {
  TuneOptions opt;
  opt.compile_only = true;
  opt.max_candidates = 4;
  Tuner tuner(nullptr, {std::make_shared<generator::TemplateGenerator>()}, opt);
  std::vector<TuneProgress> events;
  std::vector<std::string> descriptions;
  auto report = tuner.Tune(ReluTask(), nullptr, [&](const TuneProgress& p) {
    events.push_back(p);
    descriptions.emplace_back(p.description);
  });
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_GE(events.size(), 5u);
  EXPECT_EQ(events.front().phase, TunePhase::kLookupCache);
  EXPECT_EQ(events[1].phase, TunePhase::kGenerate);
  EXPECT_EQ(events[1].generated, report->tried);
  EXPECT_EQ(events[2].phase, TunePhase::kCompile);
  EXPECT_EQ(events[2].compiled, 0) << "compiling is announced before the first build, which may take 40 s";
  EXPECT_EQ(events[events.size() - 3].phase, TunePhase::kSelectWinner);
  EXPECT_EQ(events[events.size() - 2].phase, TunePhase::kPersist);
  const TuneProgress& done = events.back();
  EXPECT_EQ(done.phase, TunePhase::kDone);
  EXPECT_EQ(done.generated, report->tried);
  EXPECT_EQ(done.compiled, report->compiled);
  EXPECT_GT(done.compiled, 0);
  EXPECT_EQ(done.verified, 0);
  EXPECT_EQ(done.timed, 0);
  EXPECT_EQ(done.best_us, 0.0);
  EXPECT_FALSE(done.from_cache);
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_LE(static_cast<int>(events[i - 1].phase), static_cast<int>(events[i].phase)) << i;
    EXPECT_LE(events[i - 1].elapsed_s, events[i].elapsed_s) << i;
    EXPECT_LE(events[i - 1].compiled, events[i].compiled) << i;
  }
  for (const std::string& d : descriptions) EXPECT_EQ(d, report->description);
}

TEST(TunerProgress, PhaseNamesAreStable) {
  EXPECT_EQ(TunePhaseName(TunePhase::kLookupCache), "lookup");
  EXPECT_EQ(TunePhaseName(TunePhase::kGenerate), "generate");
  EXPECT_EQ(TunePhaseName(TunePhase::kCompile), "compile");
  EXPECT_EQ(TunePhaseName(TunePhase::kMeasure), "measure");
  EXPECT_EQ(TunePhaseName(TunePhase::kSelectWinner), "select");
  EXPECT_EQ(TunePhaseName(TunePhase::kPersist), "persist");
  EXPECT_EQ(TunePhaseName(TunePhase::kDone), "done");
}

}  // namespace
}  // namespace dice::runtime
