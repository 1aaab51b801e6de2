// Tests for the Tuner's tuning claim (tuner.h TuneOptions::claim_ttl_s,
// dice/cache/tuning_claim.h): a key another process is tuning is left
// alone; a claim the Tuner took is released however the Tune ends. The claim
// comes before the worker starts, so these run without a GPU.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "dice/cache/store.h"
#include "dice/core/task.h"
#include "dice/generator/templates.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/tuner.h"
#include "relu_graph.h"

namespace dice::runtime {
namespace {

namespace fs = std::filesystem;

Task ReluTask() {
  auto t = Task::Make(runtime_test::ReluGraph(), {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4096})},
                      TargetInfo{});
  EXPECT_TRUE(t.ok());
  return std::move(t).value();
}

class TunerClaimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dice-tuner-claim-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    auto s = cache::Store::Open(cache::DatabasePath(dir_));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
  std::unique_ptr<cache::Store> store_;
};

TEST_F(TunerClaimTest, KeyClaimedByAnotherProcessIsNotTunedAndSaysWho) {
  const Task task = ReluTask();
  cache::ClaimOwner other;
  other.pid = 4242;
  other.host = "rank1-node/pid:[7]";
  other.token = "tuner 1, device 1";
  ASSERT_TRUE(store_->ClaimTuning(task.Key(), other, 600)->claimed);
  TuneOptions opt;
  opt.claim_ttl_s = 600;
  Tuner tuner(store_.get(), {std::make_shared<generator::TemplateGenerator>()}, opt);
  auto rep = tuner.Tune(task);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_NE(rep->claimed_by.find("pid 4242 on host rank1-node/pid:[7]"), std::string::npos) << rep->claimed_by;
  EXPECT_EQ(rep->tried, 0);
  EXPECT_TRUE(rep->winner_origin.empty());
  EXPECT_TRUE(store_->ListAttempts(task.Key())->empty()) << "nothing may be tuned under another's claim";
  EXPECT_EQ(store_->GetTuningClaim(task.Key())->value().owner, other) << "the other's claim stays";
}

TEST_F(TunerClaimTest, ClaimIsReleasedWhenTheTuneFailsAndNotTakenWhenClaimsAreOff) {
  if (CudaDriver::Get().ok()) GTEST_SKIP() << "a GPU is present: the tune would succeed";
  const Task task = ReluTask();
  TuneOptions opt;
  opt.claim_ttl_s = 600;
  Tuner tuner(store_.get(), {std::make_shared<generator::TemplateGenerator>()}, opt);
  auto rep = tuner.Tune(task);  // claims, then finds no GPU
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.status().code(), StatusCode::kNoDevice);
  EXPECT_FALSE(store_->GetTuningClaim(task.Key())->has_value()) << "a failed tune must release its claim";

  TuneOptions off;  // claim_ttl_s = 0
  Tuner plain(store_.get(), {std::make_shared<generator::TemplateGenerator>()}, off);
  cache::ClaimOwner other;
  other.pid = 1;
  other.host = "elsewhere";
  ASSERT_TRUE(store_->ClaimTuning(task.Key(), other, 600)->claimed);
  auto ignored = plain.Tune(task);
  ASSERT_FALSE(ignored.ok());
  EXPECT_EQ(ignored.status().code(), StatusCode::kNoDevice) << "without claims the Tuner goes on to tune";
}

}  // namespace
}  // namespace dice::runtime
