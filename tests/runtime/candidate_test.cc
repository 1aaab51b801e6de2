// Launch-plan JSON and candidate identity.
#include <gtest/gtest.h>

#include "dice/core/candidate.h"
#include "dice/core/ir.h"

namespace dice {
namespace {

LaunchPlan TwoKernelPlan() {
  LaunchPlan p;
  p.launches.push_back({"partial", {132, 1, 1}, {256, 1, 1}, 1024});
  p.launches.push_back({"finish", {16, 1, 1}, {1024, 1, 1}, 0});
  p.workspace_bytes = 4096;
  return p;
}

TEST(LaunchPlanTest, JsonRoundTrips) {
  auto back = LaunchPlan::FromJson(TwoKernelPlan().ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, TwoKernelPlan());
}

TEST(LaunchPlanTest, ANonPortableClusterRoundTripsAndAPortablePlanKeepsItsJson) {
  LaunchPlan p = TwoKernelPlan();
  const std::string portable = p.ToJson();
  EXPECT_EQ(portable.find("cluster"), std::string::npos);  // cached plans hash as before
  p.launches[0].cluster_ctas = 16;
  auto back = LaunchPlan::FromJson(p.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->launches[0].cluster_ctas, 16u);
  EXPECT_EQ(*back, p);
  EXPECT_FALSE(*back == TwoKernelPlan());
  auto old = LaunchPlan::FromJson(portable);
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->launches[0].cluster_ctas, 0u);
}

TEST(LaunchPlanTest, RejectsCorruptPlans) {
  for (const char* bad : {"", "[]", "{\"launches\":[]}", "{\"launches\":[{\"kernel\":\"k\"}]}",
                          "{\"launches\":[{\"kernel\":\"k\",\"grid\":[0,1,1],\"block\":[1,1,1]}]}",
                          "{\"launches\":[{\"kernel\":\"k\",\"grid\":[1,1,1],\"block\":[2048,1,1]}]}",
                          "{\"launches\":[{\"kernel\":\"k\",\"grid\":[1,1],\"block\":[1,1,1]}]}",
                          "{\"launches\":[{\"kernel\":7,\"grid\":[1,1,1],\"block\":[1,1,1]}]}",
                          "{\"launches\":[{\"kernel\":\"k\",\"grid\":[1,1,1],\"block\":[1,1,1],\"cluster\":32}]}"}) {
    auto r = LaunchPlan::FromJson(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << bad;
    }
  }
}

TEST(CandidateTest, HashIgnoresOriginButNotSourceOrPlan) {
  Candidate a;
  a.origin = "template:x";
  a.source = "extern \"C\" __global__ void partial() {}";
  a.plan = TwoKernelPlan();
  Candidate b = a;
  b.origin = "dice:sample0";
  EXPECT_EQ(a.Hash(), b.Hash());
  Candidate c = a;
  c.source += " ";
  EXPECT_NE(a.Hash(), c.Hash());
  Candidate d = a;
  d.plan.launches[0].block[0] = 128;
  EXPECT_NE(a.Hash(), d.Hash());
  Candidate e = a;
  e.extra_flags = {"-DVEC=4"};
  EXPECT_NE(a.Hash(), e.Hash());
}

TEST(CandidateTest, FormNamesRoundTripAndUnknownNamesAreCorrupt) {
  for (CandidateForm f : {CandidateForm::kDevice, CandidateForm::kExtension, CandidateForm::kLibrary}) {
    auto back = ParseCandidateForm(CandidateFormName(f));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, f);
  }
  auto bad = ParseCandidateForm("cubin");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(bad.status().message().find("'cubin'"), std::string::npos);
}

TEST(CandidateTest, HashOfDeviceAndExtensionFormsIsUnchangedAndLibraryIsItsOwn) {
  // The hashed text of the device and extension forms is what it was before
  // the library form existed (cached attempts are keyed by it).
  Candidate c;
  c.source = "k";
  c.plan = TwoKernelPlan();
  const std::string tail = "1\nk\n" + c.plan.ToJson() + "\nrp0";
  EXPECT_EQ(c.Hash(), ir::Sha256Hex("device\n" + tail));
  c.form = CandidateForm::kExtension;
  EXPECT_EQ(c.Hash(), ir::Sha256Hex("extension\n" + tail));
  const std::string extension_hash = c.Hash();
  c.form = CandidateForm::kLibrary;
  EXPECT_NE(c.Hash(), extension_hash);
}

}  // namespace
}  // namespace dice
