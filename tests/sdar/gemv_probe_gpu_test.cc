// GPU probe (issue 19 item 2): the skinny GEMMs of SDAR-4B's decode step
// (bf16; K x N: QKV 2560 x 6144, o_proj 4096 x 2560, gate/up 2560 x 2*9728
// with silu(gate) * up, down 9728 x 2560) at 4 and 8 rows, across launch
// geometries of the gemv family's stream form (templates/gemv.h: x staged in
// shared memory, or read through L1 in the direct form; columns a warp,
// warps a block, loads in flight, a grid cap with grid-stride blocks). Each
// variant is checked against at::linear, then timed as the decoder runs it:
// 8 launches over 8 distinct weight copies (so every launch streams its
// weight from HBM, not L2), captured in one CUDA graph and replayed 10
// times; cuBLAS (at::linear) is timed the same way. One line per variant:
// µs per launch and the weight stream in TB/s (the H100's HBM3 gives about
// 3.35, the H200's about 4.8). Asserts the numerics only: which geometry is
// fastest is what the printout is for.
#include <gtest/gtest.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "dice/core/candidate.h"
#include "dice/runtime/compiler.h"
#include "dice/runtime/cuda_driver.h"
#include "../../generator/src/templates/gemv.h"

namespace dice::generator {
namespace {

constexpr int kCopies = 8;   // weight copies a graph cycles through (> L2 for every shape)
constexpr int kReplays = 10;

struct Proj {
  const char* name;
  int64_t k, n;  // weight [n, k]; silu: [2 n, k]
  bool silu;
};

struct Geometry {
  bool direct;
  int cols, warps, unroll;
  int grid_per_sm;  // direct form: grid cap = this x SMs (0: none)
};

// Mean µs of one `launch(i)` (i = weight copy) over kReplays replays of a
// CUDA graph holding launch(0..kCopies-1).
double GraphUs(const std::function<void(int)>& launch) {
  auto stream = at::cuda::getStreamFromPool();
  c10::cuda::CUDAStreamGuard guard(stream);
  for (int i = 0; i < kCopies; ++i) launch(i);  // warm-up, outside the capture
  stream.synchronize();
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  for (int i = 0; i < kCopies; ++i) launch(i);
  graph.capture_end();
  graph.replay();
  at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
  start.record(stream);
  for (int r = 0; r < kReplays; ++r) graph.replay();
  end.record(stream);
  end.synchronize();
  return start.elapsed_time(end) * 1000.0 / (kReplays * kCopies);
}

TEST(GemvProbeGpu, StreamFormGeometriesAgainstCublasAtTheDecodeShapes) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  auto drv = runtime::CudaDriver::Get();
  ASSERT_TRUE(drv.ok()) << drv.status().ToString();
  const runtime::CudaDriver* d = *drv;
  const auto* prop = at::cuda::getCurrentDeviceProperties();
  const int sms = prop->multiProcessorCount;
  const std::string arch = "sm_" + std::to_string(prop->major) + std::to_string(prop->minor);
  const std::vector<Proj> projs = {{"qkv", 2560, 6144, false},
                                   {"o_proj", 4096, 2560, false},
                                   {"gate/up+silu", 2560, 9728, true},
                                   {"down", 9728, 2560, false}};
  const std::vector<Geometry> geoms = {{false, 0, 0, 0, 0}, {true, 1, 4, 8, 0}, {true, 1, 4, 4, 0},
                                       {true, 1, 4, 16, 0}, {true, 2, 4, 4, 0}, {true, 2, 4, 8, 0},
                                       {true, 1, 2, 8, 0},  {true, 1, 8, 8, 0}, {true, 1, 4, 8, 4},
                                       {true, 1, 4, 8, 8},  {true, 2, 2, 8, 8}};
  auto opts = torch::TensorOptions().device(torch::kCUDA, 0).dtype(torch::kBFloat16);
  torch::manual_seed(19);
  std::printf("[gemv-probe] %s, %d SMs, %d launches a graph over %d weight copies\n", prop->name, sms, kCopies,
              kCopies);
  for (const Proj& p : projs) {
    const int64_t w_rows = p.silu ? 2 * p.n : p.n;
    std::vector<torch::Tensor> ws;
    for (int i = 0; i < kCopies; ++i) ws.push_back(torch::randn({w_rows, p.k}, opts) * 0.02);
    const double bytes = static_cast<double>(w_rows * p.k * 2);
    for (const int64_t m : {4, 8}) {
      SCOPED_TRACE(std::string(p.name) + " rows " + std::to_string(m));
      auto x = torch::randn({m, p.k}, opts);
      auto out = torch::empty({m, p.n}, opts);
      auto ref = at::linear(x, ws[0]);
      if (p.silu) ref = at::silu(ref.narrow(-1, 0, p.n)) * ref.narrow(-1, p.n, p.n);
      const double scale = ref.to(torch::kFloat32).abs().max().item<double>();
      const double cublas_us = GraphUs([&](int i) { (void)at::linear(x, ws[static_cast<size_t>(i)]); });
      std::printf("[gemv-probe] %-13s rows %lld  %-44s %7.2f us %5.2f TB/s%s\n", p.name, static_cast<long long>(m),
                  "cuBLAS at::linear", cublas_us, bytes / cublas_us * 1e-6, p.silu ? " (no silu*up)" : "");
      for (const Geometry& g : geoms) {
        tmpl::StreamGemvSpec s;
        s.m = m, s.n = p.n, s.k = p.k, s.dtype = ir::DType::kBFloat16, s.silu_mul = p.silu;
        s.x_direct = g.direct, s.cols_per_warp = g.cols, s.warps = g.warps, s.unroll = g.unroll;
        s.grid_blocks = g.grid_per_sm * sms;
        ASSERT_TRUE(tmpl::CheckStreamGemv(s).ok()) << tmpl::CheckStreamGemv(s).ToString();
        const std::string origin = tmpl::StreamGemvOrigin(s);
        SCOPED_TRACE(origin);
        Candidate c;
        c.origin = origin;
        c.source = tmpl::StreamGemvPrelude(s.dtype, /*identity_epilogue=*/true) +
                   tmpl::StreamGemvInstance(s, "probe", /*rows_argument=*/true);
        const KernelLaunch l = tmpl::StreamGemvLaunch(s, "probe");
        c.plan.launches = {l};
        auto built = runtime::CompileCandidate(c, arch);
        ASSERT_TRUE(built.ok()) << built.status().ToString();
        runtime::CUmodule_t module = nullptr;
        ASSERT_EQ(d->cuModuleLoadData(&module, built->cubin.data()), 0);
        runtime::CUfunction_t f = nullptr;
        ASSERT_EQ(d->cuModuleGetFunction(&f, module, "probe"), 0);
        int rows = static_cast<int>(m);
        auto launch = [&](int i) {
          const void* xp = x.data_ptr();
          const void* wp = ws[static_cast<size_t>(i)].data_ptr();
          void* op = out.data_ptr();
          void* args[] = {&xp, &wp, &op, &rows};
          auto stream = static_cast<runtime::CUstream_t>(c10::cuda::getCurrentCUDAStream(0).stream());
          ASSERT_EQ(d->cuLaunchKernel(f, l.grid[0], 1, 1, l.block[0], 1, 1, 0, stream, args, nullptr), 0);
        };
        launch(0);
        const double err = (out.to(torch::kFloat32) - ref.to(torch::kFloat32)).abs().max().item<double>();
        EXPECT_LE(err, 0.02 * scale) << "max |gemv - linear| " << err << " of max " << scale;
        const double us = GraphUs(launch);
        std::printf("[gemv-probe] %-13s rows %lld  %-44s %7.2f us %5.2f TB/s  (%.2fx cuBLAS)\n", p.name,
                    static_cast<long long>(m), origin.c_str(), us, bytes / us * 1e-6, cublas_us / us);
        d->cuModuleUnload(module);
      }
    }
  }
}

}  // namespace
}  // namespace dice::generator
