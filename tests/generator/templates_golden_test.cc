// templates_golden_test.cc — the template generator's output for the default
// target (TargetInfo{}: compile-only sm_90, 132 SMs) is pinned: every
// candidate's origin, source, launch plan and flags for a set of groups that
// reach each schedule family (elementwise, column, tile, warp, block, split,
// cluster, cluster/smem, starved rows, wide indices) hashes to the value the
// generator produced before the device facts moved into TargetInfo. Also pins
// the task key of the default target: the device facts never enter it.
// A deliberate change to a template updates these values in the same commit.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "dice/generator/templates.h"
#include "template_test_util.h"

namespace dice::generator {
namespace {

using ir::DType;
using ir::OpKind;
using tmpl_test::GraphBuilder;
using tmpl_test::MakeTask;
using tmpl_test::Spec;

struct GoldenCase {
  std::string name;
  std::function<Task()> make;
  std::string digest;  // sha256 of every candidate (see Digest)
};

Task Unary(OpKind k, DType dt, std::vector<int64_t> shape, std::vector<int64_t> dims = {}) {
  GraphBuilder b;
  const int x = b.Input(dt, static_cast<int>(shape.size()));
  b.Output(b.Op(k, {x}, std::move(dims)));
  return MakeTask(b.g, {Spec(dt, std::move(shape))});
}

Task Reduce(OpKind k, std::vector<int64_t> shape, std::vector<int64_t> dims, std::vector<double> scalars = {}) {
  GraphBuilder b;
  const int x = b.Input(DType::kFloat32, static_cast<int>(shape.size()));
  b.Output(b.Op(k, {x}, std::move(dims), true, 0, std::move(scalars)));
  return MakeTask(b.g, {Spec(DType::kFloat32, std::move(shape))});
}

Task BiasGelu() {
  GraphBuilder b;
  const int x = b.Input(DType::kFloat16, 2), bias = b.Input(DType::kFloat16, 1);
  b.Output(b.Op(OpKind::kGelu, {b.Op(OpKind::kAdd, {x, bias})}));
  return MakeTask(b.g, {Spec(DType::kFloat16, {2048, 8192}), Spec(DType::kFloat16, {8192})});
}

Task LayerNorm(std::vector<int64_t> shape) {
  GraphBuilder b;
  const int x = b.Input(DType::kFloat32, static_cast<int>(shape.size()));
  b.Output(b.Op(OpKind::kLayerNorm, {x}, {}, false, 1, {1e-5}));
  return MakeTask(b.g, {Spec(DType::kFloat32, std::move(shape))});
}

Task WholeTensorNormalize(std::vector<int64_t> shape) {
  GraphBuilder b;
  const int x = b.Input(DType::kFloat32, static_cast<int>(shape.size()));
  std::vector<int64_t> all;
  for (size_t a = 0; a < shape.size(); ++a) all.push_back(static_cast<int64_t>(a));
  const int n = b.Op(OpKind::kNorm, {x}, all, true, 0, {2.0});
  b.Output(b.Op(OpKind::kDiv, {x, n}));
  return MakeTask(b.g, {Spec(DType::kFloat32, std::move(shape))});
}

// Every field of every candidate, in order.
std::string Digest(const std::vector<Candidate>& cands) {
  std::string text;
  for (const auto& c : cands) {
    text += "origin " + c.origin + "\nform " + std::to_string(static_cast<int>(c.form)) + "\nplan " +
            c.plan.ToJson() + "\nflags";
    for (const auto& f : c.extra_flags) text += " " + f;
    text += "\nreduced " + std::to_string(c.reduced_precision) + "\nsource\n" + c.source + "\n";
  }
  return ir::Sha256Hex(text);
}

std::vector<GoldenCase> Cases() {
  return {
      {"relu f32[1000]", [] { return Unary(OpKind::kRelu, DType::kFloat32, {1000}); }, "f4acc10f495aec7b84103e0bd3bb2ed450bf952a7c6b8cc3a3c8017af8acfea1"},
      {"relu f32[16777216]", [] { return Unary(OpKind::kRelu, DType::kFloat32, {1 << 24}); }, "7d126067a9a6729094520cd2adf1ab8248ff1d1628f001ca1de463a594f668d3"},
      {"relu f16[65536,32768]", [] { return Unary(OpKind::kRelu, DType::kFloat16, {65536, 32768}); }, "ab6351c2be7d57ea28dd375218f0b6b9f238bcb5371fd0d1ea65614a8a39596d"},
      {"bias+gelu f16[2048,8192]", BiasGelu, "443d2ef34b92be6c75428b8491425980b0737aeffae345ba138e13cb2b62c674"},
      {"sum f32[16,256,64] dim1", [] { return Reduce(OpKind::kSum, {16, 256, 64}, {1}); }, "bd1e8cace1bbd0cc03d877786bee440603c40c3ff3a34848c702728353255370"},
      {"sum f32[65536,16] dim1", [] { return Reduce(OpKind::kSum, {65536, 16}, {1}); }, "441ce48253f760d1a8734b005b8ec40bebac59ef987040f7561a9f86e1383faf"},
      {"amax f32[8192,1024] dim1", [] { return Reduce(OpKind::kAmax, {8192, 1024}, {1}); }, "56601624d4f54730ba3b86f30a60da23e95e52e23359e55205c38099fef11ef8"},
      {"softmax f32[8192,3000]", [] { return Unary(OpKind::kSoftmax, DType::kFloat32, {8192, 3000}, {1}); }, "044aecffc73c1089264b72fa1704d0f9dd763e095108eb9631643d4869c9e1a6"},
      {"softmax f32[64,393216]", [] { return Unary(OpKind::kSoftmax, DType::kFloat32, {64, 393216}, {1}); }, "721797007d7e0c26323125aa71f20593727e4571f778b0d17ad3a93648390541"},
      {"softmax f32[4096,393216]", [] { return Unary(OpKind::kSoftmax, DType::kFloat32, {4096, 393216}, {1}); },
       "9fc98c9697de4ef2e57871a7f9e72fad5788ff36a1f1c217e6e6544a519dfc97"},
      {"softmax f32[1024,65536]", [] { return Unary(OpKind::kSoftmax, DType::kFloat32, {1024, 65536}, {1}); }, "553d72dba63391eddd015964c0482cd28e25929df74c72c77a0150bd30e79b69"},
      {"layer_norm f32[16,4194304]", [] { return LayerNorm({16, 4 * 1024 * 1024}); }, "94d90adcaa622a362223966c3e142b44b6d226c1a7bfdefbeedb2ccd3b97d7ac"},
      {"layer_norm f32[4096,4096]", [] { return LayerNorm({4096, 4096}); }, "2867c310420d935568ffe44fbe9a45645dc71d3199c3ec51ef55e93958eed401"},
      {"mean f32[8,4194304] dim1", [] { return Reduce(OpKind::kMean, {8, 4 * 1024 * 1024}, {1}); }, "aadce137b637b805f90f6b64bc7b7da98810ecf46290d701517edd309d402238"},
      {"x/norm(x) f32[112,64,512,512]", [] { return WholeTensorNormalize({112, 64, 512, 512}); }, "b03a387c6b918c6ed9e9ead86bc884e7246c2683ec0ab9b555c216681048e326"},
      {"x/norm(x) f32[1024]", [] { return WholeTensorNormalize({1024}); }, "c7b779e19ad1505ac8d36c0496637cae78d00b8d123434a6dd2732a718965af4"},
      // At the edges of the sm_count-derived bounds: capped warp and column
      // grids, 2 x SMs rows in flight, few long rows (<= 2 x SMs), starved
      // rows (< SMs / 4), the shared-memory budget of a cluster's CTA.
      {"amax f32[1048576,64] dim1", [] { return Reduce(OpKind::kAmax, {1048576, 64}, {1}); }, "f73e3a99063f6720fd4e82d084276ed14f2f41e155c97f0ba43c07357da29c6e"},
      {"sum f32[4194304,8] dim1", [] { return Reduce(OpKind::kSum, {4194304, 8}, {1}); }, "60510af4ae9f6de9b96c62556a1d60b99d51013f3d5f93c7470ebae1e665c394"},
      {"softmax f32[4096,8192]", [] { return Unary(OpKind::kSoftmax, DType::kFloat32, {4096, 8192}, {1}); }, "b68ec5b9a816cbe0108c8428d8e87988e25fe51a27d8aeb7d849fa93bdbc7f8b"},
      {"softmax f32[264,16384]", [] { return Unary(OpKind::kSoftmax, DType::kFloat32, {264, 16384}, {1}); }, "1357238e3d63ee1fc8f4428db1693cfa07f4d760953884cd5954c819c220ecad"},
      {"softmax f32[265,16384]", [] { return Unary(OpKind::kSoftmax, DType::kFloat32, {265, 16384}, {1}); }, "d2393bd2d1dce26eb675397efa30f4ddbe1ccb995f7ee9d0b32610b392a2afeb"},
      {"mean f32[32,2097152] dim1", [] { return Reduce(OpKind::kMean, {32, 2097152}, {1}); }, "ff73a28d9fc604e0cc5dff41711c8a11412614d6ad59065d72c161df031ebd09"},
      {"mean f32[33,2097152] dim1", [] { return Reduce(OpKind::kMean, {33, 2097152}, {1}); }, "27919a0612c2d7ff47292858719de06264f0d98d5954de8cfd2a96278a05224a"},
      {"softmax f32[256,409600]", [] { return Unary(OpKind::kSoftmax, DType::kFloat32, {256, 409600}, {1}); }, "e8e42fbaaec2038a3ffbc0dc23bcacb6c10b6f452074cc6eaeea657c4181af47"},
      {"softmax f32[256,409608]", [] { return Unary(OpKind::kSoftmax, DType::kFloat32, {256, 409608}, {1}); }, "7e9f91844380bd9eb1c557f687752602729ec0884a4b06a001c3a19b7fefc696"},  // session 33: a cluster-of-16 smem schedule (sm_90 non-portable size)
  };
}

TEST(TemplateGolden, DefaultTargetEmitsTheSameCandidatesAsBefore) {
  TemplateGenerator gen;
  for (const auto& gc : Cases()) {
    SCOPED_TRACE(gc.name);
    auto cands = gen.Generate(gc.make(), 64);
    ASSERT_TRUE(cands.ok()) << cands.status().ToString();
    EXPECT_FALSE(cands->empty());
    EXPECT_EQ(Digest(*cands), gc.digest);
  }
}

TEST(TemplateGolden, SmallerArchKeepsItsCandidates) {
  // sm_80 (no clusters): the same long-row softmax without cluster variants.
  GraphBuilder b;
  const int x = b.Input(DType::kFloat32, 2);
  b.Output(b.Op(OpKind::kSoftmax, {x}, {1}));
  TargetInfo ampere;
  ampere.arch = "sm_80";
  auto cands = TemplateGenerator().Generate(MakeTask(b.g, {Spec(DType::kFloat32, {4096, 393216})}, ampere), 64);
  ASSERT_TRUE(cands.ok()) << cands.status().ToString();
  EXPECT_EQ(Digest(*cands), "3914dd5e45718f4663ffcd4cf6e20abb5e1d66757d629019e525ba18c8dd75c6");
}

TEST(TemplateGolden, DefaultTargetTaskKeyIsUnchanged) {
  // The key of a task on TargetInfo{} (a cache key: changing it orphans every
  // cache entry). Device facts (SM count, L2, shared memory) never enter it.
  EXPECT_EQ(BiasGelu().Key(), "c37b637210c0347e33c3c04fc3e256571acf0c17ab957d48e7ba7dcb67e7fd29");
}

}  // namespace
}  // namespace dice::generator
