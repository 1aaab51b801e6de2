// The SDAR decoder's fusion groups as IR (sdar_groups.h) and their serving
// switch (sdar_served_groups.h, SdarModelOptions::serve_groups), on the CPU:
// the declared IR and specs for a tiny config, the template kernels for it
// built by NVRTC for sm_90 (no GPU needed), the IR run by the reference
// executor equal to the decoder's unfused LibTorch computation, and the
// fallback when serving cannot start (CPU device, fused kernels off).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "dice/generator/tiny_sdar_config.h"
#include "dice/core/task.h"
#include "dice/generator/sdar_groups.h"
#include "dice/generator/sdar_model.h"
#include "dice/generator/sdar_served_groups.h"
#include "dice/generator/templates.h"
#include "dice/reference/reference_executor.h"
#include "dice/runtime/compiler.h"
#include "dice/torch_ext/group_stats.h"
#include "dice/torch_ext/optimize.h"

namespace dice::generator {
namespace {

using ir::DType;

SdarConfig Tiny() { return TinySdarConfig(64, 64, /*tie_word_embeddings=*/false); }

TEST(SdarServedGroups, DeclaresTheDecoderGroupsWithTheirShapesAndDtypes) {
  const SdarConfig c = Tiny();  // hidden 32, intermediate 64
  auto decls = DeclareSdarGroups(c, DType::kBFloat16, 8);
  ASSERT_TRUE(decls.ok()) << decls.status().ToString();
  ASSERT_EQ(decls->size(), 5u);
  const std::vector<std::string> names = {"rmsnorm", "add_rmsnorm", "silu_mul", "qk_norm_rope.q", "qk_norm_rope.k"};
  // qk_norm_rope: 4 query heads, 2 KV heads of head_dim 8; RoPE tables per row.
  const std::vector<std::vector<std::vector<int64_t>>> in_shapes = {
      {{8, 32}, {32}},
      {{8, 32}, {8, 32}, {32}},
      {{8, 2, 64}, {1, 2, 1}, {1, 2, 1}},
      {{8, 4, 8}, {8}, {8, 1, 8}, {8, 1, 8}},
      {{8, 2, 8}, {8}, {8, 1, 8}, {8, 1, 8}}};
  const std::vector<std::vector<std::vector<int64_t>>> out_shapes = {
      {{8, 32}}, {{8, 32}, {8, 32}}, {{8, 64}}, {{8, 4, 8}}, {{8, 2, 8}}};
  for (size_t i = 0; i < decls->size(); ++i) {
    const SdarGroupDecl& d = (*decls)[i];
    SCOPED_TRACE(d.name);
    EXPECT_EQ(d.name, names[i]);
    EXPECT_EQ(static_cast<size_t>(d.group), i);
    ASSERT_TRUE(ir::Validate(d.graph).ok()) << ir::Validate(d.graph).ToString();
    EXPECT_EQ(d.ir_text, ir::Canonical(d.graph));
    auto parsed = ir::Parse(d.ir_text);
    ASSERT_TRUE(parsed.ok());
    EXPECT_TRUE(*parsed == d.graph);
    ASSERT_EQ(d.inputs.size(), in_shapes[i].size());
    for (size_t k = 0; k < d.inputs.size(); ++k) {
      EXPECT_EQ(d.inputs[k].shape, in_shapes[i][k]) << "input " << k;
      EXPECT_EQ(d.inputs[k].dtype, DType::kBFloat16);
      EXPECT_TRUE(d.inputs[k].is_contiguous());
    }
    auto task = Task::Make(d.graph, d.inputs, TargetInfo{});
    ASSERT_TRUE(task.ok()) << task.status().ToString();
    ASSERT_EQ(task->outputs.size(), out_shapes[i].size());
    for (size_t k = 0; k < task->outputs.size(); ++k) {
      EXPECT_EQ(task->outputs[k].shape, out_shapes[i][k]) << "output " << k;
      EXPECT_EQ(task->outputs[k].dtype, DType::kBFloat16) << "output " << k;
    }
  }
  // The statistics are float32 for bf16 (casts in the IR); f32 has none.
  EXPECT_NE((*decls)[0].ir_text.find("cast("), std::string::npos) << (*decls)[0].ir_text;
  auto f32 = DeclareSdarGroups(c, DType::kFloat32, 8);
  ASSERT_TRUE(f32.ok());
  EXPECT_EQ((*f32)[0].ir_text.find("cast("), std::string::npos) << (*f32)[0].ir_text;
  // The row count is not part of the IR (one graph, one group, every shape).
  auto other = DeclareSdarGroups(c, DType::kBFloat16, 512);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)[1].ir_text, (*decls)[1].ir_text);
  // q and k share one qk_norm_rope IR, which rotates with the IR's op.
  EXPECT_EQ((*decls)[3].ir_text, (*decls)[4].ir_text);
  EXPECT_NE((*decls)[3].ir_text.find("rotate_half("), std::string::npos) << (*decls)[3].ir_text;
}

TEST(SdarServedGroups, RefusesEmptyShapes) {
  auto d = DeclareSdarGroups(Tiny(), DType::kFloat32, 0);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("rows 0"), std::string::npos) << d.status().message();
  SdarConfig odd = Tiny();
  odd.head_dim = 7;
  auto o = DeclareSdarGroups(odd, DType::kFloat32, 4);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("head_dim 7 is odd"), std::string::npos) << o.status().message();
}

// The template generator serves every group (row family), and its kernels
// build with NVRTC for sm_90, at the tiny shape and at SDAR-4B's.
TEST(SdarServedGroups, TemplateKernelsCompileForSm90) {
  SdarConfig big = Tiny();
  big.hidden_size = 2560, big.intermediate_size = 9728;  // SDAR-4B
  big.num_attention_heads = 32, big.num_key_value_heads = 8, big.head_dim = 128;
  for (const SdarConfig& c : {Tiny(), big}) {
    for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
      auto decls = DeclareSdarGroups(c, dt, 4);
      ASSERT_TRUE(decls.ok());
      for (const SdarGroupDecl& d : *decls) {
        SCOPED_TRACE(d.name + " " + ir::DTypeName(dt) + " hidden " + std::to_string(c.hidden_size));
        auto task = Task::Make(d.graph, d.inputs, TargetInfo{});
        ASSERT_TRUE(task.ok()) << task.status().ToString();
        TemplateGenerator gen;
        auto cands = gen.Generate(*task, 3);
        ASSERT_TRUE(cands.ok()) << cands.status().ToString();
        ASSERT_FALSE(cands->empty());
        auto built = runtime::CompileAll(*cands, "sm_90", 2);
        ASSERT_EQ(built.size(), cands->size());
        for (size_t i = 0; i < built.size(); ++i) {
          EXPECT_TRUE(built[i].ok()) << (*cands)[i].origin << ": " << built[i].status().ToString();
        }
      }
    }
  }
}

// SdarModel::RmsNorm's computation and the unfused SiLU*up, written here
// as the decoder writes them.
torch::Tensor UnfusedRmsNorm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  auto xf = x.to(torch::kFloat32);
  auto var = xf.pow(2).mean(-1, true);
  return w * (xf * torch::rsqrt(var + eps)).to(x.scalar_type());
}

TEST(SdarServedGroups, IrComputesWhatTheUnfusedDecoderComputes) {
  const SdarConfig c = Tiny();
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const DType dt = dtype == torch::kFloat32 ? DType::kFloat32 : DType::kBFloat16;
    SCOPED_TRACE(ir::DTypeName(dt));
    torch::manual_seed(3);
    auto o = torch::TensorOptions().dtype(dtype);
    auto x = torch::randn({8, 32}, o), d = torch::randn({8, 32}, o), w = torch::randn({32}, o) * 0.1 + 1;
    auto gu = torch::randn({8, 128}, o);
    const double tol = dtype == torch::kFloat32 ? 1e-5 : 2e-2;
    auto norm = reference::Run(SdarGroupGraph(SdarGroup::kRmsNorm, dt, c.rms_norm_eps), {x, w});
    ASSERT_TRUE(norm.ok()) << norm.status().ToString();
    EXPECT_LE(((*norm)[0].to(torch::kFloat32) - UnfusedRmsNorm(x, w, c.rms_norm_eps).to(torch::kFloat32))
                  .abs().max().item<double>(), tol);
    auto add = reference::Run(SdarGroupGraph(SdarGroup::kAddRmsNorm, dt, c.rms_norm_eps), {x, d, w});
    ASSERT_TRUE(add.ok()) << add.status().ToString();
    ASSERT_EQ(add->size(), 2u);
    EXPECT_TRUE(torch::equal((*add)[0], x + d));
    EXPECT_LE(((*add)[1].to(torch::kFloat32) - UnfusedRmsNorm(x + d, w, c.rms_norm_eps).to(torch::kFloat32))
                  .abs().max().item<double>(), tol);
    auto sel_gate = torch::tensor({1.0, 0.0}, o).view({1, 2, 1}), sel_up = torch::tensor({0.0, 1.0}, o).view({1, 2, 1});
    auto silu = reference::Run(SdarGroupGraph(SdarGroup::kSiluMul, dt, c.rms_norm_eps),
                               {gu.view({8, 2, 64}), sel_gate, sel_up});
    ASSERT_TRUE(silu.ok()) << silu.status().ToString();
    auto expect = torch::silu(gu.narrow(-1, 0, 64)) * gu.narrow(-1, 64, 64);
    EXPECT_TRUE(torch::equal((*silu)[0], expect)) << "the one-hot selection is exact";
  }
}

// SdarModel::RunLayers' unfused q/k path for the fused QKV layout, as the
// decoder writes it: the heads of qkv [B, L, (H + 2 KV) * hd] viewed, RMSNorm
// over head_dim, transposed to [B, n, L, hd], then RoPE with the [L, hd]
// tables (SdarModel::RotateHalf).
torch::Tensor UnfusedQkNormRope(const torch::Tensor& part, const torch::Tensor& w, const torch::Tensor& cos,
                                const torch::Tensor& sin, double eps) {
  auto y = UnfusedRmsNorm(part, w, eps).transpose(1, 2);
  const int64_t h = y.size(-1) / 2;
  return y * cos + torch::cat({-y.narrow(-1, h, h), y.narrow(-1, 0, h)}, -1) * sin;
}

TEST(SdarServedGroups, QkNormRopeIrComputesWhatTheUnfusedDecoderComputes) {
  const SdarConfig c = Tiny();  // 4 query heads, 2 KV heads, head_dim 8
  const int64_t B = 2, L = 4, R = B * L, H = c.num_attention_heads, KV = c.num_key_value_heads, hd = c.head_dim;
  auto decls = DeclareSdarGroups(c, DType::kFloat32, R);
  ASSERT_TRUE(decls.ok());
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const DType dt = dtype == torch::kFloat32 ? DType::kFloat32 : DType::kBFloat16;
    SCOPED_TRACE(ir::DTypeName(dt));
    torch::manual_seed(7);
    auto o = torch::TensorOptions().dtype(dtype);
    auto qkv = torch::randn({B, L, (H + 2 * KV) * hd}, o);
    auto qw = torch::randn({hd}, o) * 0.1 + 1, kw = torch::randn({hd}, o) * 0.1 + 1;
    // The RoPE tables as SdarModel::Forward builds them (positions 12..15).
    auto inv_freq = 1.0 / torch::pow(c.rope_theta, torch::arange(0, hd, 2, torch::kFloat64) / hd);
    auto angles = torch::outer(torch::arange(12, 12 + L, torch::kFloat32), inv_freq.to(torch::kFloat32));
    angles = torch::cat({angles, angles}, -1);
    auto cos = angles.cos().to(dtype), sin = angles.sin().to(dtype);
    auto cos_rows = cos.unsqueeze(0).expand({B, L, hd}).reshape({R, 1, hd}).contiguous();
    auto sin_rows = sin.unsqueeze(0).expand({B, L, hd}).reshape({R, 1, hd}).contiguous();
    const ir::Graph g = SdarGroupGraph(SdarGroup::kQNormRope, dt, c.rms_norm_eps);
    EXPECT_TRUE(g == SdarGroupGraph(SdarGroup::kKNormRope, dt, c.rms_norm_eps));
    auto heads = qkv.view({R, H + 2 * KV, hd});
    auto q = reference::Run(g, {heads.narrow(1, 0, H).contiguous(), qw, cos_rows, sin_rows});
    auto k = reference::Run(g, {heads.narrow(1, H, KV).contiguous(), kw, cos_rows, sin_rows});
    ASSERT_TRUE(q.ok() && k.ok()) << q.status().ToString() << k.status().ToString();
    auto want_q = UnfusedQkNormRope(qkv.narrow(-1, 0, H * hd).view({B, L, H, hd}), qw, cos, sin, c.rms_norm_eps);
    auto want_k = UnfusedQkNormRope(qkv.narrow(-1, H * hd, KV * hd).view({B, L, KV, hd}), kw, cos, sin, c.rms_norm_eps);
    auto got_q = (*q)[0].view({B, L, H, hd}).transpose(1, 2), got_k = (*k)[0].view({B, L, KV, hd}).transpose(1, 2);
    ASSERT_EQ(got_q.sizes(), want_q.sizes());
    ASSERT_EQ(got_k.sizes(), want_k.sizes());
    EXPECT_EQ(got_q.scalar_type(), dtype);
    const double eq = (got_q.to(torch::kFloat32) - want_q.to(torch::kFloat32)).abs().max().item<double>();
    const double ek = (got_k.to(torch::kFloat32) - want_k.to(torch::kFloat32)).abs().max().item<double>();
    std::printf("qk_norm_rope %s: max |IR - unfused| q %.3g k %.3g\n", ir::DTypeName(dt), eq, ek);
    EXPECT_TRUE(torch::equal(got_q, want_q)) << "op by op as the decoder, max error " << eq;
    EXPECT_TRUE(torch::equal(got_k, want_k)) << "op by op as the decoder, max error " << ek;
  }
}

// Serving cannot start on a CPU device or without the hand-written kernels
// (its fallback): the model loads without it and computes as before.
TEST(SdarServedGroups, FallsBackWhenServingCannotStart) {
  SdarModelOptions o;
  o.serve_groups = true;
  const HandKernelLaunch hand = [](const SdarTimingInputs&) {};  // the fused kernels loaded
  EXPECT_EQ(ServeSdarGroups(Tiny(), o, hand), nullptr);
  EXPECT_EQ(ServeSdarGroups(Tiny(), o, /*hand=*/nullptr), nullptr);
  o.serve_groups = false;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ServeSdarGroups(Tiny(), o, hand), nullptr);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "") << "off: no message";
  ::setenv("DICE_SDAR_SERVE_GROUPS", "1", 1);  // turns it on without the option
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ServeSdarGroups(Tiny(), o, hand), nullptr);
  const std::string said = ::testing::internal::GetCapturedStderr();
  ::unsetenv("DICE_SDAR_SERVE_GROUPS");
  EXPECT_NE(said.find("served fusion groups off, hand-written kernels used: not a CUDA device (cpu)"),
            std::string::npos) << said;
  auto bad_dtype = SdarServedGroups::Create(Tiny(), torch::kFloat64, torch::Device(torch::kCUDA, 0));
  ASSERT_FALSE(bad_dtype.ok());
  EXPECT_NE(bad_dtype.status().message().find("Double"), std::string::npos) << bad_dtype.status().message();

  SdarModelOptions on;
  on.serve_groups = true;
  auto served = SdarModel::Random(Tiny(), on, 5);
  auto plain = SdarModel::Random(Tiny(), SdarModelOptions{}, 5);
  ASSERT_TRUE(served.ok() && plain.ok());
  EXPECT_EQ(served->served_groups(), nullptr);
  auto ids = torch::arange(0, 12, torch::kLong).view({2, 6});
  auto a = served->Forward(ids), b = plain->Forward(ids);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(torch::equal(*a, *b));
}

// Through the real serving API on the CPU: every group is registered with
// the runtime (its statistics name the IR the decoder declared), run once,
// and reported not served with the runtime's reason; the run methods then
// decline, leaving their outputs alone, so the decoder keeps its own kernel.
TEST(SdarServedGroups, UnservedGroupsAreReportedAndDeclined) {
  torch_ext::Options o = torch_ext::GetRuntimeOptions();
  const torch_ext::Mode saved = o.mode;
  o.mode = torch_ext::Mode::kCache;
  torch_ext::SetRuntimeOptions(o);
  int hand_calls = 0;  // nothing is timed on the CPU (no winner to time)
  auto served = SdarServedGroups::Create(Tiny(), torch::kFloat32, torch::kCPU,
                                         [&hand_calls](const SdarTimingInputs&) { ++hand_calls; });
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE((*served)->Prepare(8).ok());
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE((*served)->Prepare(8).ok());  // idempotent: no second run, no second message
  EXPECT_NE(said.find("dice sdar: add_rmsnorm at 8 rows: not served (no GPU); hand-written kernel used"),
            std::string::npos) << said;
  const auto notes = (*served)->notes();
  ASSERT_EQ(notes.size(), 5u);
  EXPECT_EQ(notes[2], "silu_mul at 8 rows: not served (no GPU); hand-written kernel used");
  EXPECT_EQ(notes[4], "qk_norm_rope.k at 8 rows: not served (no GPU); hand-written kernel used");
  for (int g = 0; g < kNumSdarGroups; ++g) EXPECT_FALSE((*served)->Serves(static_cast<SdarGroup>(g), 8));
  const auto decisions = (*served)->decisions();
  ASSERT_EQ(decisions.size(), 5u);
  for (int g = 0; g < kNumSdarGroups; ++g) {
    const ServedDecision& d = decisions[g];
    EXPECT_EQ(d.group, static_cast<SdarGroup>(g));
    EXPECT_EQ(d.rows, 8);
    EXPECT_FALSE(d.winner || d.served);
    EXPECT_EQ(d.served_us, 0.0);
    EXPECT_EQ(d.hand_us, 0.0);
    EXPECT_EQ(d.why, "not served (no GPU); hand-written kernel used");
  }
  EXPECT_EQ(hand_calls, 0);
  auto decls = DeclareSdarGroups(Tiny(), DType::kFloat32, 8);
  ASSERT_TRUE(decls.ok());
  int registered = 0;
  for (const auto& st : torch_ext::GetGroupStats()) {
    for (const auto& d : *decls) registered += st.canonical == d.ir_text && st.calls >= 1 && st.hits == 0;
  }
  EXPECT_EQ(registered, 5) << "rmsnorm, add_rmsnorm, silu_mul, and qk_norm_rope's one IR for q's and k's decl";
  auto x = torch::randn({2, 4, 32}), w = torch::ones({32});
  torch::Tensor sum, norm, act;
  EXPECT_FALSE((*served)->AddRmsNorm(x, x, w, &sum, &norm));
  EXPECT_FALSE((*served)->SiluMul(torch::randn({2, 4, 128}), &act));
  torch::Tensor q, k;
  auto table = torch::randn({8, 1, 8});
  EXPECT_FALSE((*served)->QkNormRope(torch::randn({2, 4, 64}), torch::ones({8}), torch::ones({8}), table, table, &q, &k));
  EXPECT_FALSE(sum.defined() || norm.defined() || act.defined() || q.defined() || k.defined());
  o.mode = saved;
  torch_ext::SetRuntimeOptions(o);
}

// The rule Prepare applies to a timed winner: served only when its median
// is below the hand-written kernel's; the note carries both times in µs.
TEST(SdarServedGroups, ServesAWinnerOnlyWhenFasterThanTheHandKernel) {
  const ServedDecision slower = DecideByTimes(SdarGroup::kAddRmsNorm, 4, 6.14, 4.2);
  EXPECT_TRUE(slower.winner);
  EXPECT_FALSE(slower.served);
  EXPECT_EQ(slower.rows, 4);
  EXPECT_EQ(slower.why, "hand-written kernel kept (served 6.1 µs vs hand 4.2 µs)");
  const ServedDecision faster = DecideByTimes(SdarGroup::kSiluMul, 8, 3.1, 4.24);
  EXPECT_TRUE(faster.served);
  EXPECT_EQ(faster.served_us, 3.1);
  EXPECT_EQ(faster.hand_us, 4.24);
  EXPECT_EQ(faster.why, "served (served 3.1 µs vs hand 4.2 µs)");
  const ServedDecision tie = DecideByTimes(SdarGroup::kQNormRope, 8, 5.0, 5.0, "q and k with the K/V store");
  EXPECT_FALSE(tie.served) << "a tie keeps the hand-written kernel";
  EXPECT_EQ(tie.why, "hand-written kernel kept (served 5.0 µs vs hand 5.0 µs, q and k with the K/V store)");
}

}  // namespace
}  // namespace dice::generator
