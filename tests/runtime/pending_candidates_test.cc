// Tuner::PendingExtensionCandidates (tuner.h), the prebuild's source of
// work (prebuild.h; issue 17, first-call time): a linear + relu group's
// nvcc candidates are the gemm family's, as Tune would generate them; a
// verified winner for the key leaves nothing to build; an elementwise group
// (NVRTC only) has none. CPU only: nothing is compiled.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "dice/cache/store.h"
#include "dice/core/ir.h"
#include "dice/core/task.h"
#include "dice/generator/templates.h"
#include "dice/runtime/tuner.h"

namespace dice::runtime {
namespace {

std::unique_ptr<cache::Store> OpenStore() {
  std::string tmpl = ::testing::TempDir() + "dice-pending-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  auto store = cache::Store::Open(cache::DatabasePath(tmpl));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

Task MakeTask(const std::string& ir_text, std::vector<ir::TensorSpec> specs) {
  auto g = ir::Parse(ir_text);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  auto t = Task::Make(*g, std::move(specs), TargetInfo{});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return *t;
}

Task LinearReluTask() {
  return MakeTask("dice-ir v1\ninput %0 f32 rank=2\ninput %1 f32 rank=2\n%2 = linear(%0, %1)\n%3 = relu(%2)\noutput %3\n",
                  {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {64, 128}),
                   ir::TensorSpec::Contiguous(ir::DType::kFloat32, {256, 128})});
}

TEST(PendingExtensionCandidates, LinearGroupGivesBothGemmFamiliesNvccCandidates) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  Tuner tuner(store.get(), {std::make_shared<generator::TemplateGenerator>()}, TuneOptions{});
  auto pending = tuner.PendingExtensionCandidates(LinearReluTask());
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  ASSERT_FALSE(pending->empty());
  bool cutlass = false, cublaslt = false;  // linear + relu: both nvcc-built families offer candidates
  for (const Candidate& c : *pending) {
    EXPECT_EQ(c.form, CandidateForm::kExtension) << c.origin;
    EXPECT_EQ(c.origin.rfind("template:gemm", 0), 0u) << c.origin;
    cutlass = cutlass || c.origin.rfind("template:gemm/", 0) == 0;
    cublaslt = cublaslt || c.origin.rfind("template:gemm_lt/", 0) == 0;
  }
  EXPECT_TRUE(cutlass);
  EXPECT_TRUE(cublaslt);
}

TEST(PendingExtensionCandidates, VerifiedWinnerLeavesNothingToBuild) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  const Task task = LinearReluTask();
  cache::WinnerRecord w;
  w.task_key = task.Key();
  w.graph_canonical = ir::Canonical(task.graph);
  w.input_specs = task.inputs[0].ToString();
  w.arch = task.target.arch;
  w.origin = "template:gemm/test";
  w.candidate_hash = "h";
  w.source = "// built before";
  w.cubin = "ELF";
  w.best_us = 5;
  w.speedup = 2;
  w.verified = true;
  ASSERT_TRUE(store->PutWinner(w).ok());
  Tuner tuner(store.get(), {std::make_shared<generator::TemplateGenerator>()}, TuneOptions{});
  auto pending = tuner.PendingExtensionCandidates(task);
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  EXPECT_TRUE(pending->empty());
}

TEST(PendingExtensionCandidates, ElementwiseGroupHasNone) {
  Tuner tuner(nullptr, {std::make_shared<generator::TemplateGenerator>()}, TuneOptions{});
  auto pending = tuner.PendingExtensionCandidates(
      MakeTask("dice-ir v1\ninput %0 f32 rank=1\n%1 = relu(%0)\noutput %1\n",
               {ir::TensorSpec::Contiguous(ir::DType::kFloat32, {4099})}));
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  EXPECT_TRUE(pending->empty());
}

}  // namespace
}  // namespace dice::runtime
