// mlp_block — a transformer MLP block (Linear -> GELU -> Linear, residual add,
// LayerNorm) built as a TorchScript module in C++, optimized with
// dice::torch_ext::optimize. Prints the fusion groups, the nodes left with
// PyTorch, whether the optimized module's output matches the original's, and
// the per-group profile.
//
// Usage: mlp_block [tokens=512] [hidden=1024]
// Env: DICE_MODE (default observe), DICE_CACHE_DIR. Runs on CUDA when a GPU is
// present, else on the CPU (every group then falls back with "no GPU").
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <torch/script.h>
#include <torch/torch.h>

#include "dice/core/log.h"
#include "dice/runtime/outcome.h"
#include "dice/torch_ext/optimize.h"

namespace {

torch::jit::Module BuildMlpBlock(int64_t hidden, const torch::Device& device) {
  torch::jit::Module m("MlpBlock");
  auto opts = torch::TensorOptions().device(device);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hidden));
  m.register_parameter("w1", torch::randn({4 * hidden, hidden}, opts) * scale, false);
  m.register_parameter("b1", torch::zeros({4 * hidden}, opts), false);
  m.register_parameter("w2", torch::randn({hidden, 4 * hidden}, opts) * (scale / 2), false);
  m.register_parameter("b2", torch::zeros({hidden}, opts), false);
  m.register_parameter("ln_w", torch::ones({hidden}, opts), false);
  m.register_parameter("ln_b", torch::zeros({hidden}, opts), false);
  m.define(R"(
def forward(self, x):
    h = torch.linear(x, self.w1, self.b1)
    h = torch.gelu(h, approximate="tanh")
    h = torch.linear(h, self.w2, self.b2)
    y = h + x
    return torch.layer_norm(y, [self.ln_w.size(0)], self.ln_w, self.ln_b, 1e-5)
)");
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // piped (tee, a log): each line as it is printed, not at exit
  dice::torch_ext::EnsureRegistered();
  const int64_t tokens = argc > 1 ? std::atoll(argv[1]) : 512;
  const int64_t hidden = argc > 2 ? std::atoll(argv[2]) : 1024;
  const bool cuda = torch::cuda::is_available();
  const torch::Device device = cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;

  torch::jit::Module original = BuildMlpBlock(hidden, device);
  original.eval();
  torch::jit::Module module = original.clone();
  torch::Tensor x = torch::randn({tokens, hidden}, torch::TensorOptions().device(device));

  auto env = dice::torch_ext::Options::FromEnv();
  if (!env.ok()) {
    std::fprintf(stderr, "mlp_block: %s\n", env.status().ToString().c_str());
    return 2;
  }
  dice::torch_ext::Options options = *env;
  if (!std::getenv("DICE_MODE")) options.mode = dice::torch_ext::Mode::kObserve;
  options.example_inputs = {x};
  auto report = dice::torch_ext::optimize(module, options);
  if (!report.ok()) {
    std::fprintf(stderr, "mlp_block: optimize failed: %s\n", report.status().ToString().c_str());
    return 1;
  }
  std::printf("device: %s, mode: %s, x: [%lld, %lld]\n", cuda ? "cuda" : "cpu",
              dice::torch_ext::ModeName(options.mode), static_cast<long long>(tokens),
              static_cast<long long>(hidden));
  std::printf("fusion groups: %zu\n", report->groups.size());
  for (const auto& g : report->groups) {
    std::printf("  group %d: %s\n", g.id, g.group.summary.c_str());
    std::printf("%s", g.group.canonical.c_str());
  }
  std::printf("left with PyTorch:%s\n", report->left_out.empty() ? " nothing" : "");
  for (const auto& n : report->left_out) std::printf("  %-24s %s\n", n.kind.c_str(), n.reason.c_str());

  dice::torch_ext::ResetGroupStats();
  torch::Tensor want = original.forward({x}).toTensor();
  torch::Tensor got;
  for (int i = 0; i < 3; ++i) got = module.forward({x}).toTensor();
  const double max_abs = (got - want).abs().max().item<double>();
  const bool match = got.sizes() == want.sizes() && torch::allclose(got, want, 1e-4, 1e-4);
  std::printf("outputs match un-optimized module: %s (max abs diff %.3g)\n", match ? "yes" : "NO", max_abs);
  std::printf("%s", dice::torch_ext::FormatProfile(dice::torch_ext::GetGroupStats()).c_str());
  if (!match) return 1;

  // Tune every group (compile-only without a GPU), then serve the winners.
  options.tune.compile_only = !cuda;
  options.tune.budget_s = 60;  // one CUTLASS build (30-90 s) per linear group fits (tuner.h kMinUncachedNvccBudgetS)
  // One line per tuning phase of each group: a linear's CUTLASS candidates
  // build with nvcc for tens of seconds, and the phases show where it is.
  // Before that wait (compile-only: the compile phase; on a GPU: the worker's
  // measure phase) a linear group says so once, at DICE_LOG_LEVEL info or
  // lower (dice/core/log.h: LibTorch code cannot log through spdlog).
  int announced = 0;  // the last group whose nvcc builds were announced
  auto on_progress = [&announced](const dice::torch_ext::GroupTuneProgress& g) {
    const auto phase = g.tune.phase;
    using dice::runtime::TunePhase;
    if ((phase == TunePhase::kCompile || phase == TunePhase::kMeasure) && g.group > announced &&
        g.tune.description.find("linear") != std::string_view::npos && dice::LogEnabled(dice::LogLevel::kInfo)) {
      announced = g.group;
      std::printf("tuning group %d/%d: building its CUTLASS GEMM candidate with nvcc (~50 s; once: kept in the "
                  "build cache)\n", g.group, g.groups);
    }
    if (phase != TunePhase::kGenerate && phase != TunePhase::kCompile && phase != TunePhase::kDone) return;
    std::printf("tuning group %d/%d %s (%.1f s): %d candidate(s), %d compiled\n", g.group, g.groups,
                std::string(dice::runtime::TunePhaseName(phase)).c_str(), g.tune.elapsed_s, g.tune.generated,
                g.tune.compiled);
  };
  auto tuned = dice::torch_ext::TuneGroups(module, {x}, options, on_progress);
  if (!tuned.ok()) {
    std::fprintf(stderr, "mlp_block: tuning failed: %s\n", tuned.status().ToString().c_str());
    return 1;
  }
  auto us = [](double v) { return v > 0 ? std::to_string(v).substr(0, std::to_string(v).find('.') + 2) : std::string("-"); };
  for (const auto& r : *tuned) {
    std::printf("tuned %s: baseline %s us, best %s us, speedup %s, tried/compiled/verified %d/%d/%d, winner %s\n",
                r.description.c_str(), us(r.baseline_us).c_str(), us(r.best_us).c_str(),
                r.speedup > 0 ? (us(r.speedup) + "x").c_str() : "-", r.tried, r.compiled, r.verified,
                r.winner_origin.empty() ? "-" : r.winner_origin.c_str());
    for (const auto& o : r.outcomes) {  // why a candidate did not compile or was not tried
      if (o.outcome != dice::runtime::Outcome::kCompiled && !dice::runtime::IsVerified(o.outcome)) {
        std::printf("  %s: %s %s\n", o.origin.c_str(), std::string(dice::runtime::OutcomeName(o.outcome)).c_str(),
                    o.error.substr(0, 160).c_str());
      }
    }
  }
  if (!cuda) {
    std::printf("no CUDA device: candidates were compiled for sm_90 only; nothing was cached as a winner\n");
    return 0;
  }
  dice::torch_ext::Options serve = options;
  serve.mode = dice::torch_ext::Mode::kCache;
  dice::torch_ext::SetRuntimeOptions(serve);
  dice::torch_ext::ResetGroupStats();
  for (int i = 0; i < 3; ++i) got = module.forward({x}).toTensor();
  const bool match_tuned = torch::allclose(got, want, 1e-4, 1e-4);
  std::printf("tuned outputs match: %s (max abs diff %.3g)\n", match_tuned ? "yes" : "NO",
              (got - want).abs().max().item<double>());
  for (const auto& s : dice::torch_ext::GetGroupStats()) {
    std::printf("  group %d %-20s calls %lld hits %lld fallbacks %lld\n", s.id, s.summary.c_str(),
                static_cast<long long>(s.calls), static_cast<long long>(s.hits), static_cast<long long>(s.fallbacks));
  }
  return match_tuned ? 0 : 1;
}
