// DiceGenerator (dice/generator/dice_generator.h) on the CPU with a tiny
// random checkpoint that has the real SDAR tokenizer (tests/generator/
// sdar_reference.py, "tok"): a runtime Task goes through skeleton -> prompt
// -> tokenize -> block-diffusion decode -> parse. Random weights write no
// code, so every sample must come back as a candidate or as a failure with
// its origin and reason — never lost, never a crash.
#include "dice/generator/dice_generator.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "../runtime/relu_graph.h"
#include "sdar_reference_fixture.h"

namespace dice::generator {
namespace {

Task ReluTask() {
  auto task = Task::Make(runtime_test::ReluGraph(), {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4099})},
                         TargetInfo{});
  EXPECT_TRUE(task.ok()) << task.status().ToString();
  return *task;
}

DiceGeneratorOptions TinyOptions() {
  DiceGeneratorOptions o;
  o.model_dir = dice::testing::SdarReferenceDir() + "/tok";
  o.num_samples = 3;
  o.decode.max_new_tokens = 16;
  o.decode.remasking = Remasking::kStatic;
  o.decode.temperature = 1.0;
  o.decode.seed = 7;
  return o;
}

TEST(DiceGeneratorTest, EverySampleIsACandidateOrAFailureWithAReason) {
  ASSERT_FALSE(dice::testing::SdarReferenceDir().empty()) << "python3 with torch + safetensors is needed";
  auto gen = DiceGenerator::Load(TinyOptions());
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();
  EXPECT_EQ((*gen)->name(), "dice");
  auto candidates = (*gen)->Generate(ReluTask(), /*max_candidates=*/2);
  ASSERT_TRUE(candidates.ok()) << candidates.status().ToString();
  // The skeleton is the runtime's: the suffix declares dice_forward for the one input.
  EXPECT_NE((*gen)->last_prompt().find("torch::Tensor dice_forward(torch::Tensor in0)"), std::string::npos)
      << (*gen)->last_prompt();
  EXPECT_NE((*gen)->last_prompt().find("relu"), std::string::npos);
  const auto failures = (*gen)->TakeFailures();
  EXPECT_EQ(candidates->size() + failures.size(), 2u) << "min(num_samples 3, max_candidates 2) samples";
  std::set<std::string> origins;
  for (const auto& c : *candidates) {
    EXPECT_EQ(c.form, CandidateForm::kExtension);
    EXPECT_NE(c.source.find("dice_forward"), std::string::npos);
    origins.insert(c.origin);
  }
  for (const auto& f : failures) {
    EXPECT_FALSE(f.reason.empty()) << f.origin;
    origins.insert(f.origin);
  }
  EXPECT_EQ(origins, (std::set<std::string>{"dice:sample0", "dice:sample1"}));
  EXPECT_TRUE((*gen)->TakeFailures().empty()) << "TakeFailures hands the failures over once";
}

TEST(DiceGeneratorTest, MissingCheckpointIsAClearError) {
  DiceGeneratorOptions o = TinyOptions();
  o.model_dir = "/nonexistent/dice-checkpoint";
  auto gen = DiceGenerator::Load(o);
  ASSERT_FALSE(gen.ok());
  EXPECT_NE(gen.status().message().find("/nonexistent/dice-checkpoint"), std::string::npos)
      << gen.status().ToString();
}

TEST(DiceGeneratorTest, ZeroSamplesIsRejected) {
  DiceGeneratorOptions o = TinyOptions();
  o.num_samples = 0;
  auto gen = DiceGenerator::Load(o);
  ASSERT_FALSE(gen.ok());
  EXPECT_EQ(gen.status().code(), StatusCode::kInvalidArgument);
}

TEST(DiceGeneratorTest, PromptLongerThanTheContextIsAnErrorNotACrash) {
  ASSERT_FALSE(dice::testing::SdarReferenceDir().empty());
  DiceGeneratorOptions o = TinyOptions();
  o.decode.max_new_tokens = 1 << 16;  // the tiny model's context is 2048
  auto gen = DiceGenerator::Load(o);
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();
  auto candidates = (*gen)->Generate(ReluTask(), 1);
  ASSERT_FALSE(candidates.ok());
  EXPECT_EQ(candidates.status().code(), StatusCode::kInvalidArgument) << candidates.status().ToString();
}

}  // namespace
}  // namespace dice::generator
