// conv_sm90_probe.cu — bench/conv_sm90_probe.py's kernel (issue 18 item 2): a CUTLASS 3.x
// sm90 implicit-GEMM forward convolution (TMA im2col loads, wgmma TF32 for
// float operands, CUTLASS's conv CollectiveBuilder) with a fused epilogue,
// built once per configuration by nvcc -arch=sm_90a and called through
// ctypes. Not a dice candidate: it measures whether Hopper's own conv
// kernels can reach cuDNN before the conv template family (CUTLASS 2.x, sm80
// tensor ops; 0.63-0.68x of torch.compile, docs/PERF.md session 16) grows one.
// Macros: TM/TN/TK threadblock tile (output pixels x output channels x
// input-channel slice), CM cluster along M, EPI 0 = + bias[K], 1 = + bias[K] then
// ReLU, 2 = + bias[K] then Mish twice. Layouts: x NHWC, w KRSC, out NHWC
// (NPQK), float32, 16-byte aligned, C and K multiples of 4 (TMA).
#include <cstdint>
#include <cuda_runtime.h>
#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/kernel_hardware_info.hpp"
#include "cutlass/conv/convnd_problem_shape.hpp"
#include "cutlass/conv/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"
#include "cutlass/conv/device/conv_universal_adapter.hpp"
#include "cutlass/epilogue/thread/activation.h"

using namespace cute;
#define DICE_STR2(x) #x
#define DICE_STR(x) DICE_STR2(x)

// Mish twice, PyTorch's softplus threshold (20): x * tanh(softplus(x)).
template <class T> struct MishMish {
  CUTLASS_HOST_DEVICE static float mish(float x) {
    const float sp = x > 20.f ? x : log1pf(expf(x));
    return x * tanhf(sp);
  }
  CUTLASS_HOST_DEVICE T operator()(T const& x) const { return T(mish(mish(float(x)))); }
};
template <class T, int N> struct MishMish<cutlass::Array<T, N>> {
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& v) const {
    cutlass::Array<T, N> r;
    MishMish<T> f;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) r[i] = f(v[i]);
    return r;
  }
};

using Element = float;
using TileShape = Shape<Int<TM>, Int<TN>, Shape<Int<TK>>>;
using ClusterShape = Shape<Int<CM>, _1, _1>;
constexpr int kAlign = 4;  // 16 bytes of float

#if EPI == 0
using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<cutlass::epilogue::thread::Identity, Element, float, Element, Element, float, kAlign>;
#elif EPI == 1
using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<cutlass::epilogue::thread::ReLu, Element, float, Element, Element, float, kAlign>;
#else
using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<MishMish, Element, float, Element, Element, float, kAlign>;
#endif

// The one sm90 conv schedule CUTLASS 4.2 offers: the cooperative and ping-pong
// (persistent) ones stop at a static_assert ("Persistent schedules not support for conv yet").
using MainSchedule = cutlass::conv::KernelImplicitTmaWarpSpecializedSm90;
using EpiSchedule = cutlass::epilogue::TmaWarpSpecialized;

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    void, cutlass::layout::TensorNHWC, kAlign,          // no source C
    Element, cutlass::layout::TensorNHWC, kAlign,
    EpiSchedule, Fusion>::CollectiveOp;

using CollectiveMainloop = typename cutlass::conv::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kFprop,
    Element, cutlass::layout::TensorNHWC, kAlign,
    Element, cutlass::layout::TensorNHWC, kAlign,
    float, TileShape, ClusterShape,
    cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    MainSchedule>::CollectiveOp;

using ProblemShape = cutlass::conv::ConvProblemShape<cutlass::conv::Operator::kFprop, 2>;
using ConvKernel = cutlass::conv::kernel::ConvUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
using Conv = cutlass::conv::device::ConvUniversalAdapter<ConvKernel>;

extern "C" const char* dice_probe_config() {
  return "sm90 tf32 " DICE_STR(TM) "x" DICE_STR(TN) "x" DICE_STR(TK) " cluster " DICE_STR(CM)
         "x1 epi " DICE_STR(EPI);
}

// out [N, P, Q, K] (NHWC) = epilogue(conv(x [N, H, W, C] NHWC, w [K, R, S, C] KRSC) + bias [K]).
// Returns 0, or a cutlass::Status code + 100 (can_implement / initialize / run), or 200 + a CUDA error.
extern "C" int dice_probe_run(const float* x, const float* w, const float* bias, float* out, int n, int h, int wd, int c,
                              int k, int r, int s, int pad, int stride, void* stream) {
  ProblemShape problem(cutlass::conv::Mode::kCrossCorrelation, {n, h, wd, c}, {k, r, s, c}, {pad, pad}, {pad, pad},
                       {stride, stride}, {1, 1}, 1);
  typename Conv::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = problem;
  args.mainloop.ptr_A = x;
  args.mainloop.ptr_B = w;
  args.epilogue.thread.alpha = 1.f;
  args.epilogue.thread.beta = 0.f;
  args.epilogue.thread.bias_ptr = bias;
  using StrideD = typename Conv::ConvKernel::StrideD;
  StrideD dD{};
  // The output's M mode is (Q, P, N), innermost first; problem.stride_C is [n, p, q, k].
  cute::get<0, 0>(dD) = problem.stride_C[2];
  cute::get<0, 1>(dD) = problem.stride_C[1];
  cute::get<0, 2>(dD) = problem.stride_C[0];
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = out;
  args.epilogue.dD = dD;
  int dev = 0;
  cudaGetDevice(&dev);
  args.hw_info = cutlass::KernelHardwareInfo::make_kernel_hardware_info<ConvKernel>(dev);
  Conv op;
  cutlass::Status st = op.can_implement(args);
  if (st != cutlass::Status::kSuccess) return 100 + static_cast<int>(st);
  static void* workspace = nullptr;
  static size_t workspace_bytes = 0;
  const size_t need = Conv::get_workspace_size(args);
  if (need > workspace_bytes) {
    if (workspace) cudaFree(workspace);
    if (cudaMalloc(&workspace, need) != cudaSuccess) return 250;
    workspace_bytes = need;
  }
  st = op.initialize(args, workspace, static_cast<cudaStream_t>(stream));
  if (st != cutlass::Status::kSuccess) return 120 + static_cast<int>(st);
  st = op.run(static_cast<cudaStream_t>(stream));
  if (st != cutlass::Status::kSuccess) return 140 + static_cast<int>(st);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : 200 + static_cast<int>(e);
}
