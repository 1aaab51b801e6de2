// pass@k intervals (CPU, torch-free): the percentile bootstrap over tasks on
// hand-computed cases, the paired bootstrap of a stage against another, the
// eval report's intervals and the comparison of two eval JSON files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "dice/training/eval_report.h"
#include "dice/training/stats.h"

namespace dice::training {
namespace {

BootstrapOptions Seeded(uint64_t seed = 7, double confidence = 0.95) {
  BootstrapOptions o;
  o.seed = seed;
  o.confidence = confidence;
  return o;
}

TEST(TrainingBootstrap, AllPassGivesOneToOneAndAllFailZeroToZero) {
  auto all = BootstrapMean(std::vector<double>(60, 1.0), Seeded());
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->estimate, 1.0);
  EXPECT_EQ(all->lo, 1.0);
  EXPECT_EQ(all->hi, 1.0);
  auto none = BootstrapMean(std::vector<double>(60, 0.0), Seeded());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->lo, 0.0);
  EXPECT_EQ(none->hi, 0.0);
}

// Tasks {0, 0, 0, 1}: a resample's mean is K/4 with K ~ Binomial(4, 1/4).
// By hand, P(K <= 0) = 81/256 = 0.316, P(K <= 2) = 243/256 = 0.949 and
// P(K <= 3) = 255/256 = 0.996, so the 2.5% quantile is 0 and the 97.5%
// quantile is 3/4 (0.949 < 0.975 <= 0.996). The margins (0.29, 0.026,
// 0.021) are far above the sampling error of 10,000 draws (about 0.002).
TEST(TrainingBootstrap, SmallCaseMatchesTheHandComputedBinomialQuantiles) {
  const std::vector<double> tasks = {0, 0, 0, 1};
  auto ci95 = BootstrapMean(tasks, Seeded(7, 0.95));
  ASSERT_TRUE(ci95.ok());
  EXPECT_DOUBLE_EQ(ci95->estimate, 0.25);
  EXPECT_EQ(ci95->lo, 0.0);
  EXPECT_EQ(ci95->hi, 0.75);
}

// Tasks {0, 0, 1}: P(K <= 2) = 26/27 = 0.963 >= 0.95, so the 90% interval
// is [0, 2/3] while the 95% one reaches 1 (0.963 < 0.975).
TEST(TrainingBootstrap, ThreeTasksNinetyAndNinetyFivePercentDiffer) {
  auto ci90 = BootstrapMean({0, 0, 1}, Seeded(3, 0.90));
  ASSERT_TRUE(ci90.ok());
  EXPECT_EQ(ci90->lo, 0.0);
  EXPECT_DOUBLE_EQ(ci90->hi, 2.0 / 3.0);
  auto ci95 = BootstrapMean({0, 0, 1}, Seeded(3, 0.95));
  ASSERT_TRUE(ci95.ok());
  EXPECT_EQ(ci95->hi, 1.0);
}

TEST(TrainingBootstrap, TheSameSeedGivesTheSameIntervalAndBadInputIsAnError) {
  std::vector<double> tasks;
  for (int i = 0; i < 50; ++i) tasks.push_back((i * 37 % 11) / 10.0);
  auto a = BootstrapMean(tasks, Seeded(11)), b = BootstrapMean(tasks, Seeded(11));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->lo, b->lo);
  EXPECT_EQ(a->hi, b->hi);
  EXPECT_LT(a->lo, a->estimate);
  EXPECT_GT(a->hi, a->estimate);
  EXPECT_EQ(BootstrapMean({}, Seeded()).status().code(), StatusCode::kInvalidArgument);
  BootstrapOptions bad = Seeded();
  bad.confidence = 1.0;
  EXPECT_EQ(BootstrapMean(tasks, bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PairedBootstrapDifference({1, 0}, {1}, Seeded()).status().code(), StatusCode::kInvalidArgument);
}

TEST(TrainingBootstrap, PairedIdenticalStagesGiveAnIntervalContainingZero) {
  std::vector<double> stage;
  for (int i = 0; i < 60; ++i) stage.push_back(i % 3 == 0 ? 1.0 : i % 3 == 1 ? 0.25 : 0.0);
  auto d = PairedBootstrapDifference(stage, stage, Seeded());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->estimate, 0.0);
  EXPECT_LE(d->lo, 0.0);
  EXPECT_GE(d->hi, 0.0);
}

// The new stage passes more on every other task and as much on the rest:
// a resample of ties only (probability 2^-60) is the only way to a
// non-positive mean difference, so the interval is above 0. Unpaired, the two stages'
// intervals overlap: pairing is what shows it.
TEST(TrainingBootstrap, PairedDominatingStageGivesAnIntervalAboveZero) {
  std::vector<double> base, next;
  for (int i = 0; i < 60; ++i) {
    base.push_back((i % 10) / 10.0);
    next.push_back((i % 10) / 10.0 + (i % 2 ? 0.1 : 0.0));
  }
  auto d = PairedBootstrapDifference(base, next, Seeded());
  ASSERT_TRUE(d.ok());
  EXPECT_GT(d->lo, 0.0);
  EXPECT_NEAR(d->estimate, 0.05, 1e-12);
  auto a = BootstrapMean(base, Seeded()), b = BootstrapMean(next, Seeded());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LT(b->lo, a->hi);  // the unpaired intervals overlap
}

EvalReport Report(const std::vector<std::pair<std::string, std::vector<double>>>& tasks, std::vector<int64_t> ks) {
  EvalReport r;
  r.ks = std::move(ks);
  for (const auto& [id, p] : tasks) {
    EvalTaskResult t;
    t.id = id;
    t.pass_at_k = p;
    r.tasks.push_back(t);
  }
  return r;
}

TEST(TrainingEvalReport, EveryPassAtKCarriesItsInterval) {
  EvalReport r = Report({{"a", {1, 1}}, {"b", {0, 1}}, {"c", {0, 0}}, {"d", {0, 1}}}, {1, 8});
  auto ci = PassAtKIntervals(r, Seeded());
  ASSERT_TRUE(ci.ok()) << ci.status().ToString();
  ASSERT_EQ(ci->size(), 2u);
  EXPECT_DOUBLE_EQ((*ci)[0].estimate, 0.25);
  EXPECT_DOUBLE_EQ((*ci)[1].estimate, 0.75);
  r.pass_at_k_ci = *ci;
  const std::string line = FormatPassAtK(r);
  EXPECT_NE(line.find("pass@1 0.2500 ["), std::string::npos) << line;
  EXPECT_NE(line.find("pass@8 0.7500 ["), std::string::npos) << line;
}

// Two eval JSON files (the --json of dice train eval) are paired by task
// id: a task in one only is left out and counted, the difference is new -
// base on the common tasks.
TEST(TrainingEvalReport, CompareEvalFilesPairsTasksById) {
  char tmpl[] = "/tmp/dice_cmp_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::ofstream(dir + "/base.json") << R"({"k": [1], "tasks": [
      {"id": "t1", "pass_at_k": [0.0]}, {"id": "t2", "pass_at_k": [0.5]},
      {"id": "t3", "pass_at_k": [0.0]}, {"id": "only_base", "pass_at_k": [1.0]}]})";
  std::ofstream(dir + "/new.json") << R"({"k": [1, 8], "tasks": [
      {"id": "t3", "pass_at_k": [0.5, 1.0]}, {"id": "t1", "pass_at_k": [0.25, 1.0]},
      {"id": "t2", "pass_at_k": [0.75, 1.0]}]})";
  auto c = CompareEvalFiles(dir + "/base.json", dir + "/new.json", Seeded());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->tasks, 3);
  EXPECT_EQ(c->base_only, 1);
  EXPECT_EQ(c->new_only, 0);
  ASSERT_EQ(c->rows.size(), 1u);  // k = 8 is in one report only
  EXPECT_DOUBLE_EQ(c->rows[0].difference.estimate, (0.25 + 0.25 + 0.5) / 3);
  EXPECT_GT(c->rows[0].difference.lo, 0.0);
  const auto lines = FormatComparison(*c);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("(above 0)"), std::string::npos) << lines[0];
  std::ofstream(dir + "/bad.json") << R"({"tasks": []})";
  auto bad = CompareEvalFiles(dir + "/base.json", dir + "/bad.json", Seeded());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(bad.status().message().find("bad.json"), std::string::npos);
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

// `dice train compare` prints each k's pair of intervals and the paired
// difference with its verdict; a file that is not an eval report is bad
// input (exit 2) naming it.
TEST(TrainingEvalReport, TrainCompareCommandPrintsThePairedDifference) {
  char tmpl[] = "/tmp/dice_cmpcli_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::string base = R"({"k": [1], "tasks": [)", next = base;
  for (int i = 0; i < 40; ++i) {
    const std::string id = R"({"id": "t)" + std::to_string(i) + R"(", "pass_at_k": [)";
    base += (i ? "," : "") + id + (i % 4 == 0 ? "0.5" : "0.0") + "]}";
    next += (i ? "," : "") + id + (i % 4 == 0 ? "0.5" : "0.0") + "]}";
  }
  std::ofstream(dir + "/base.json") << base << "]}";
  std::ofstream(dir + "/new.json") << next << "]}";
  const std::string cmd = std::string(DICE_CLI_PATH) + " train compare --base " + dir + "/base.json --new " + dir +
                          "/new.json 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  EXPECT_EQ(::pclose(p), 0) << out;
  EXPECT_NE(out.find("compare: 40 tasks in both"), std::string::npos) << out;
  EXPECT_NE(out.find("pass@1: base 0.1250 ["), std::string::npos) << out;
  EXPECT_NE(out.find("difference +0.0000 [+0.0000, +0.0000] (contains 0)"), std::string::npos) << out;
  std::ofstream(dir + "/bad.json") << "[]";
  const int rc = std::system((std::string(DICE_CLI_PATH) + " train compare --base " + dir + "/bad.json --new " + dir +
                              "/new.json > /dev/null 2>&1").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace dice::training
