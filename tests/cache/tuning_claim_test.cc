// Tests for the tuning claim (dice/cache/tuning_claim.h, Store::ClaimTuning):
// of N processes sharing one cache, one tunes a key and the others wait.
#include "dice/cache/tuning_claim.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cache_test_support.h"
#include "dice/cache/store.h"

namespace dice::cache {
namespace {

using testing::RawSql;

ClaimOwner Owner(int64_t pid, const std::string& token) {
  ClaimOwner o;
  o.pid = pid;
  o.host = "node-a/pid:[1]";
  o.token = token;
  return o;
}

WinnerRecord Winner(const std::string& key, const std::string& origin) {
  WinnerRecord r;
  r.task_key = key;
  r.graph_canonical = "dice-ir v1\ninput %0 f32 rank=1\n%1 = relu(%0)\noutput %1\n";
  r.input_specs = "f32[1024]";
  r.arch = "sm_90";
  r.gpu_name = "NVIDIA H200";
  r.origin = origin;
  r.candidate_hash = "h-" + key;
  r.source = "extern \"C\" __global__ void k() {}";
  r.cubin = std::string("\x7f" "ELF", 4) + key;
  r.launch_plan_json = R"({"launches":[{"kernel":"k","grid":[1,1,1],"block":[32,1,1],"smem":0}],"workspace":0})";
  r.baseline_us = 10;
  r.best_us = 5;
  r.speedup = 2;
  return r;
}

class TuningClaimTest : public testing::StoreInTempDirTest {
 protected:
  TuningClaimTest() : StoreInTempDirTest("claim-test") {}
};

TEST_F(TuningClaimTest, OfTwoClaimersOnlyTheFirstGetsTheKey) {
  auto a = store_->ClaimTuning("key-1", Owner(100, "a"), 60, 1000);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->claimed);
  EXPECT_FALSE(a->took_over);
  EXPECT_EQ(a->holder.expires_at, 1060);

  auto b = store_->ClaimTuning("key-1", Owner(200, "b"), 60, 1001);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_FALSE(b->claimed);
  EXPECT_EQ(b->holder.owner, Owner(100, "a"));
  EXPECT_EQ(b->holder.expires_at, 1060);

  // Another key is free; the same owner renews its own claim.
  EXPECT_TRUE(store_->ClaimTuning("key-2", Owner(200, "b"), 60, 1001)->claimed);
  auto renewed = store_->ClaimTuning("key-1", Owner(100, "a"), 60, 1030);
  ASSERT_TRUE(renewed.ok());
  EXPECT_TRUE(renewed->claimed);
  EXPECT_FALSE(renewed->took_over);
  EXPECT_EQ(store_->GetTuningClaim("key-1")->value().expires_at, 1090);
}

TEST_F(TuningClaimTest, TwoTunersOfOneProcessAreTwoOwners) {
  EXPECT_TRUE(store_->ClaimTuning("key-1", Owner(100, "device 0"), 60, 1000)->claimed);
  EXPECT_FALSE(store_->ClaimTuning("key-1", Owner(100, "device 1"), 60, 1000)->claimed);
}

TEST_F(TuningClaimTest, ExpiredClaimIsTakenOver) {
  ASSERT_TRUE(store_->ClaimTuning("key-1", Owner(100, "a"), 30, 1000)->claimed);
  EXPECT_FALSE(store_->ClaimTuning("key-1", Owner(200, "b"), 30, 1029)->claimed);
  auto b = store_->ClaimTuning("key-1", Owner(200, "b"), 30, 1030);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(b->claimed);
  EXPECT_TRUE(b->took_over);
  EXPECT_EQ(b->holder.owner, Owner(200, "b"));
  // The old owner's late release does not drop the new owner's claim.
  EXPECT_FALSE(*store_->ReleaseTuningClaim("key-1", Owner(100, "a")));
  EXPECT_EQ(store_->GetTuningClaim("key-1")->value().owner, Owner(200, "b"));
  EXPECT_TRUE(*store_->ReleaseTuningClaim("key-1", Owner(200, "b")));
}

TEST_F(TuningClaimTest, ReleaseLetsTheNextClaimerInWithoutTakeOver) {
  ASSERT_TRUE(store_->ClaimTuning("key-1", Owner(100, "a"), 600, 1000)->claimed);
  auto released = store_->ReleaseTuningClaim("key-1", Owner(100, "a"));
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_TRUE(*released);
  EXPECT_FALSE(store_->GetTuningClaim("key-1")->has_value());
  EXPECT_FALSE(*store_->ReleaseTuningClaim("key-1", Owner(100, "a")));  // idempotent: nothing left
  auto b = store_->ClaimTuning("key-1", Owner(200, "b"), 600, 1001);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->claimed);
  EXPECT_FALSE(b->took_over);
}

TEST_F(TuningClaimTest, ClaimOfAProcessGoneOnThisHostIsTakenOverBeforeItExpires) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // reaped: the pid names no process now
  ClaimOwner gone = ThisProcessOwner("dead rank");
  gone.pid = child;
  EXPECT_TRUE(OwnerIsGone(gone));
  ASSERT_TRUE(store_->ClaimTuning("key-1", gone, 600)->claimed);
  auto me = store_->ClaimTuning("key-1", ThisProcessOwner("me"), 600);
  ASSERT_TRUE(me.ok()) << me.status().ToString();
  EXPECT_TRUE(me->claimed);
  EXPECT_TRUE(me->took_over);

  // A live process, and a pid of another host, are never judged gone.
  EXPECT_FALSE(OwnerIsGone(ThisProcessOwner("me")));
  ClaimOwner elsewhere = gone;
  elsewhere.host = "another-node/pid:[1]";
  EXPECT_FALSE(OwnerIsGone(elsewhere));
  ASSERT_TRUE(store_->ClaimTuning("key-2", elsewhere, 600)->claimed);
  EXPECT_FALSE(store_->ClaimTuning("key-2", ThisProcessOwner("me"), 600)->claimed);
}

TEST_F(TuningClaimTest, RejectsEmptyKeyAndNonPositiveTtl) {
  EXPECT_EQ(store_->ClaimTuning("", Owner(1, ""), 60).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->ClaimTuning("k", Owner(1, ""), 0).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(TuningClaimTest, Version3CacheMigratesToClaimsTableKeepingWinners) {
  // A v3 cache: v4's tables less tuning_claims, with one winner.
  store_.reset();
  std::filesystem::remove(db_path_);
  testing::CreateVersion4Cache(db_path_);
  WinnerRecord kept = Winner("kept", "template:x");
  kept.created_at = 1700000000;
  kept.content_hash = ContentHash(kept);
  testing::InsertWinnerRow(db_path_, kept);
  RawSql(db_path_, "DROP TABLE tuning_claims");
  RawSql(db_path_, "PRAGMA user_version = 3");
  RawSql(db_path_, "UPDATE meta SET value = '3' WHERE key = 'schema_version'");
  auto s = Store::Open(db_path_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(RawSql(db_path_, "PRAGMA user_version"), std::to_string(kSchemaVersion));
  EXPECT_EQ((*s)->GetMeta("schema_version")->value_or(""), std::to_string(kSchemaVersion));
  EXPECT_TRUE((*s)->GetWinner("kept")->has_value());
  EXPECT_TRUE((*s)->ClaimTuning("kept", Owner(1, ""), 60)->claimed);
}

// The torchrun case: 4 processes ("one per GPU", each with its own cache
// connection and owner) meet the same 6 untuned keys at once. Each follows
// the tuner's protocol: winner? serve : claim ? (winner now? release : tune,
// store, release) : run the fallback and look again. Every key must be tuned
// exactly once (one attempt row), every process must end up serving every
// key, and no claim may be left behind.
TEST_F(TuningClaimTest, ProcessesSharingTheCacheTuneEachKeyOnceAndAllServeIt) {
  constexpr int kRanks = 4;
  constexpr int kKeys = 6;
  store_.reset();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kRanks; ++rank) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto s = Store::Open(db_path_);
      if (!s.ok()) ::_exit(2);
      Store& store = **s;
      const ClaimOwner me = ThisProcessOwner("device " + std::to_string(rank));
      for (int k = 0; k < kKeys; ++k) {
        const std::string key = "shared-" + std::to_string(k);
        for (int tries = 0;; ++tries) {
          if (tries > 5000) ::_exit(3);  // 10 s without a winner
          auto w = store.GetWinner(key);
          if (!w.ok()) ::_exit(4);
          if (w->has_value()) break;  // served
          auto c = store.ClaimTuning(key, me, 60);
          if (!c.ok()) ::_exit(5);
          if (!c->claimed) {  // another rank tunes it: fallback, look again later
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            continue;
          }
          auto again = store.GetWinner(key);  // stored between our look and our claim?
          if (!again.ok()) ::_exit(6);
          if (!again->has_value()) {
            if (!store.RecordAttempt({key, "tuned-by-" + std::to_string(rank), "o", "winner", "", 5, 0}).ok())
              ::_exit(7);
            std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the tune
            if (!store.PutWinner(Winner(key, "rank " + std::to_string(rank))).ok()) ::_exit(8);
          }
          if (!store.ReleaseTuningClaim(key, me).ok()) ::_exit(9);
        }
      }
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  auto s = Store::Open(db_path_);
  ASSERT_TRUE(s.ok());
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = "shared-" + std::to_string(k);
    EXPECT_TRUE((*s)->GetWinner(key)->has_value()) << key;
    auto attempts = (*s)->ListAttempts(key);
    ASSERT_TRUE(attempts.ok());
    EXPECT_EQ(attempts->size(), 1u) << key << " was tuned by more than one process";
    EXPECT_FALSE((*s)->GetTuningClaim(key)->has_value()) << key;
  }
  EXPECT_EQ(RawSql(db_path_, "SELECT count(*) FROM tuning_claims"), "0");
}

}  // namespace
}  // namespace dice::cache
