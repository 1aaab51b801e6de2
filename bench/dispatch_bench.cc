// Host cost of the cache-hit dispatch path (issue target: <= 3 µs per call
// over a bare launch). Three Google Benchmarks over the same cubin — a
// template relu kernel for f32[1024], small enough that launch overhead is
// all there is:
//   BareCuLaunchKernel      cuLaunchKernel with a prepared argument array
//   LoadedKernelLaunch      dice::runtime::LoadedKernel::Launch (the runtime's launcher)
//   FusionGroupCacheHit     the dice::FusionGroup TorchScript operation itself
//                           (node->getOperation(), no interpreter), serving the
//                           cached winner: key lookup, output allocation, launch
// Host time per call in µs (the stream is synchronised every 256 calls so the
// launch queue never fills). Needs a GPU; without one every benchmark reports
// "no CUDA device". Run on the GPU machine:
//   build/bench/dispatch_bench --benchmark_min_time=0.5s
#include <benchmark/benchmark.h>

#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/csrc/jit/ir/ir.h>
#include <ATen/cuda/CUDAContext.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dice/generator/templates.h"
#include "dice/runtime/compiler.h"
#include "dice/runtime/cuda_driver.h"
#include "dice/runtime/kernel_launcher.h"
#include "dice/core/task.h"
#include "dice/torch_ext/optimize.h"

namespace {

constexpr int64_t kN = 1024;
constexpr int kSyncEvery = 256;

struct Fixture {
  std::string error;
  const dice::runtime::CudaDriver* driver = nullptr;
  std::unique_ptr<dice::runtime::LoadedKernel> kernel;
  dice::runtime::CUfunction_t function = nullptr;
  dice::KernelLaunch launch;
  at::Tensor x, y;
  torch::jit::Module module{"Model"};
  std::optional<torch::jit::Operation> op;
  bool op_ready = false;
};

Fixture& Get() {
  static Fixture* f = [] {
    auto* fx = new Fixture();
    auto drv = dice::runtime::CudaDriver::Get();
    if (!drv.ok() || !torch::cuda::is_available()) {
      fx->error = "no CUDA device: " + drv.status().ToString();
      return fx;
    }
    fx->driver = *drv;
    fx->x = torch::randn({kN}, torch::TensorOptions().device(torch::kCUDA));
    fx->y = torch::empty_like(fx->x);
    // The template candidate for relu f32[1024].
    dice::ir::Graph g;
    g.inputs = {{dice::ir::DType::kFloat32, 1}};
    dice::ir::Op relu;
    relu.kind = dice::ir::OpKind::kRelu;
    relu.args = {0};
    g.ops = {relu};
    g.outputs = {1};
    auto task = dice::Task::Make(g, {dice::ir::TensorSpec::Contiguous(dice::ir::DType::kFloat32, {kN})},
                                 dice::runtime::TargetForDevice(0));
    dice::generator::TemplateGenerator gen;
    auto cands = gen.Generate(*task, 1);
    if (!cands.ok() || cands->empty()) {
      fx->error = "no template candidate: " + cands.status().ToString();
      return fx;
    }
    auto compiled = dice::runtime::CompileCandidate(cands->front(), task->target.arch);
    if (!compiled.ok()) {
      fx->error = compiled.status().ToString();
      return fx;
    }
    auto k = dice::runtime::LoadedKernel::Load(compiled->cubin, cands->front().plan, 1, 1);
    if (!k.ok()) {
      fx->error = k.status().ToString();
      return fx;
    }
    fx->kernel = std::move(*k);
    fx->launch = cands->front().plan.launches.front();
    // The same cubin through the driver alone, for the bare baseline.
    dice::runtime::CUmodule_t mod = nullptr;
    fx->driver->cuModuleLoadData(&mod, compiled->cubin.data());
    fx->driver->cuModuleGetFunction(&fx->function, mod, fx->launch.kernel.c_str());

    // A TorchScript relu module, tuned into a fresh cache, then served from it.
    fx->module.define("def forward(self, x):\n  return torch.relu(x)\n");
    auto options = dice::torch_ext::Options::FromEnv();
    dice::torch_ext::Options o = options.ok() ? *options : dice::torch_ext::Options{};
    o.cache_dir = "/tmp/dice-dispatch-bench-cache";
    o.mode = dice::torch_ext::Mode::kCache;
    o.example_inputs = {c10::IValue(fx->x)};
    o.tune.margin = -1e9;  // store the best verified kernel even if it does not beat PyTorch
    auto report = dice::torch_ext::optimize(fx->module, o);
    if (!report.ok()) {
      fx->error = report.status().ToString();
      return fx;
    }
    auto tuned = dice::torch_ext::TuneGroups(fx->module, {c10::IValue(fx->x)}, o);
    if (!tuned.ok()) {
      fx->error = tuned.status().ToString();
      return fx;
    }
    for (torch::jit::Node* n : fx->module.get_method("forward").graph()->nodes()) {
      if (n->kind() == c10::Symbol::fromQualString("dice::FusionGroup")) {
        fx->op.emplace(n->getOperation());
        fx->op_ready = true;
      }
    }
    if (!fx->op_ready) fx->error = "no dice::FusionGroup node in the optimized graph";
    return fx;
  }();
  return *f;
}

void BareCuLaunchKernel(benchmark::State& state) {
  Fixture& f = Get();
  if (!f.function) return state.SkipWithError(f.error.empty() ? "setup failed" : f.error.c_str());
  void* in = f.x.data_ptr();
  void* out = f.y.data_ptr();
  void* args[] = {&in, &out};
  auto stream = reinterpret_cast<dice::runtime::CUstream_t>(at::cuda::getCurrentCUDAStream().stream());
  int i = 0;
  for (auto _ : state) {
    f.driver->cuLaunchKernel(f.function, f.launch.grid[0], f.launch.grid[1], f.launch.grid[2], f.launch.block[0],
                             f.launch.block[1], f.launch.block[2], f.launch.shared_mem_bytes, stream, args, nullptr);
    if (++i % kSyncEvery == 0) torch::cuda::synchronize();
  }
  torch::cuda::synchronize();
}

void LoadedKernelLaunch(benchmark::State& state) {
  Fixture& f = Get();
  if (!f.kernel) return state.SkipWithError(f.error.empty() ? "setup failed" : f.error.c_str());
  void* ptrs[] = {f.x.data_ptr(), f.y.data_ptr()};
  void* stream = at::cuda::getCurrentCUDAStream().stream();
  int i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f.kernel->Launch(ptrs, nullptr, stream));
    if (++i % kSyncEvery == 0) torch::cuda::synchronize();
  }
  torch::cuda::synchronize();
}

void FusionGroupCacheHit(benchmark::State& state) {
  Fixture& f = Get();
  if (!f.op_ready) return state.SkipWithError(f.error.empty() ? "setup failed" : f.error.c_str());
  dice::torch_ext::ResetGroupStats();
  torch::jit::Stack stack;
  int i = 0;
  for (auto _ : state) {
    stack.clear();
    stack.emplace_back(f.x);
    (*f.op)(stack);
    if (++i % kSyncEvery == 0) torch::cuda::synchronize();
  }
  torch::cuda::synchronize();
  int64_t hits = 0, calls = 0;
  for (const auto& s : dice::torch_ext::GetGroupStats()) {
    hits += s.hits;
    calls += s.calls;
  }
  if (calls == 0 || hits != calls) state.SkipWithError("the fusion group did not serve every call from the cache");
  state.counters["hit_rate"] = calls ? static_cast<double>(hits) / static_cast<double>(calls) : 0.0;
}

BENCHMARK(BareCuLaunchKernel)->Unit(benchmark::kMicrosecond);
BENCHMARK(LoadedKernelLaunch)->Unit(benchmark::kMicrosecond);
BENCHMARK(FusionGroupCacheHit)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
