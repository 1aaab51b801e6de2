// The SDAR decoder's fused elementwise kernels: see
// dice/generator/sdar_fused_kernels.h. Torch-free on purpose (LAYERS.md):
// only the runtime's public compiler and driver headers.
#include "dice/generator/sdar_fused_kernels.h"

#include <algorithm>
#include <sstream>

#include "dice/core/candidate.h"
#include "dice/runtime/compiler.h"
#include "dice/runtime/cuda_driver.h"

namespace dice::generator {
namespace {

using runtime::CudaDriver;

enum Kernel { kRmsNorm = 0, kAddRmsNorm = 1, kQkNormRope = 2, kSiluMul = 3 };

constexpr unsigned kSiluThreads = 256;

// Threads of a norm block: about 8 elements a thread, whole warps, at most 1024.
unsigned NormThreads(int64_t hidden) {
  const int64_t per8 = (hidden + 7) / 8;
  return static_cast<unsigned>(std::clamp<int64_t>((per8 + 31) / 32 * 32, 32, 1024));
}

unsigned HeadThreads(int64_t head_dim) { return static_cast<unsigned>(std::max<int64_t>(32, (head_dim + 31) / 32 * 32)); }

const char* TypeName(FusedDtype d) {
  switch (d) {
    case FusedDtype::kF32: return "float";
    case FusedDtype::kBF16: return "__nv_bfloat16";
    case FusedDtype::kF16: return "__half";
  }
  return "float";
}

// The fixed part of the source; the shape arrives as the #defines before it.
// R(v): v rounded to the element type (identity for float), where LibTorch
// would store an intermediate in the compute dtype.
constexpr const char* kBody = R"CUDA(
__device__ __forceinline__ float L(const T* p, long i) { return dice_to_float(p[i]); }
__device__ __forceinline__ float R(float v) { return dice_to_float(dice_from_float(v)); }

// Sum of v over the block (NT threads, whole warps); every thread gets it.
template <int NT>
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (NT <= 32) return v;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float s = lane < NT / 32 ? scratch[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  __syncthreads();
  return s;
}

// One block per row; the row's values stay in registers between the passes.
template <bool ADD>
__device__ __forceinline__ void RowNorm(const T* x, const T* d, const T* w, T* sum, T* norm) {
  __shared__ float scratch[32];
  const long base = (long)blockIdx.x * HIDDEN;
  float v[NORM_ELEMS];
  float ss = 0.f;
#pragma unroll
  for (int e = 0; e < NORM_ELEMS; ++e) {
    const int j = threadIdx.x + e * NORM_THREADS;
    v[e] = 0.f;
    if (j < HIDDEN) {
      float s = L(x, base + j);
      if (ADD) {
        s = R(s + L(d, base + j));
        sum[base + j] = dice_from_float(s);
      }
      v[e] = s;
      ss += s * s;
    }
  }
  const float r = rsqrtf(BlockSum<NORM_THREADS>(ss, scratch) / (float)HIDDEN + EPS);
#pragma unroll
  for (int e = 0; e < NORM_ELEMS; ++e) {
    const int j = threadIdx.x + e * NORM_THREADS;
    if (j < HIDDEN) norm[base + j] = dice_from_float(L(w, j) * R(v[e] * r));
  }
}

extern "C" __global__ void __launch_bounds__(NORM_THREADS)
dice_sdar_rmsnorm(const T* x, const T* w, T* norm) { RowNorm<false>(x, nullptr, w, nullptr, norm); }

extern "C" __global__ void __launch_bounds__(NORM_THREADS)
dice_sdar_add_rmsnorm(const T* x, const T* d, const T* w, T* sum, T* norm) { RowNorm<true>(x, d, w, sum, norm); }

// grid (rows, HEADS + KV_HEADS), HEAD_THREADS threads: one head of one row.
extern "C" __global__ void __launch_bounds__(HEAD_THREADS)
dice_sdar_qk_norm_rope(const T* qkv, const T* qw, const T* kw, const T* cos_t, const T* sin_t, T* q_out, T* k_out,
                       int seq_len) {
  __shared__ float scratch[32];
  __shared__ float normed[HEAD_DIM];
  const long row = blockIdx.x;
  const int head = blockIdx.y, t = threadIdx.x;
  const bool is_q = head < HEADS;
  const T* w = is_q ? qw : kw;
  const long in = row * (long)((HEADS + 2 * KV_HEADS) * HEAD_DIM) + (long)head * HEAD_DIM;
  const float v = t < HEAD_DIM ? L(qkv, in + t) : 0.f;
  const float r = rsqrtf(BlockSum<HEAD_THREADS>(v * v, scratch) / (float)HEAD_DIM + EPS);
  if (t < HEAD_DIM) normed[t] = R(L(w, t) * R(v * r));
  __syncthreads();
  if (t >= HEAD_DIM) return;
  constexpr int HALF = HEAD_DIM / 2;
  const float n = normed[t];
  const float rot = t < HALF ? -normed[t + HALF] : normed[t - HALF];
  const long tab = (row % seq_len) * HEAD_DIM + t;
  const float out = R(R(n * L(cos_t, tab)) + R(rot * L(sin_t, tab)));
  if (is_q) {
    q_out[(row * HEADS + head) * HEAD_DIM + t] = dice_from_float(out);
  } else {
    k_out[(row * KV_HEADS + (head - HEADS)) * HEAD_DIM + t] = dice_from_float(out);
  }
}

// grid (rows, ceil(INTER / SILU_THREADS)): out = silu(gate) * up.
extern "C" __global__ void __launch_bounds__(SILU_THREADS)
dice_sdar_silu_mul(const T* gate_up, T* out) {
  const long row = blockIdx.x;
  const int j = blockIdx.y * SILU_THREADS + threadIdx.x;
  if (j >= INTER) return;
  const float g = L(gate_up, row * 2L * INTER + j), u = L(gate_up, row * 2L * INTER + INTER + j);
  out[row * (long)INTER + j] = dice_from_float(R(g / (1.f + expf(-g))) * u);
}
)CUDA";

Status CudaFail(const CudaDriver* d, const char* call, int rc) {
  return Status(StatusCode::kCudaError, "SDAR fused kernels: " + d->ErrorText(call, rc));
}

}  // namespace

Status CheckFusedShape(const SdarFusedShape& s) {
  auto bad = [](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, "SDAR fused kernels do not fit this model: " + why);
  };
  if (s.hidden < 1 || s.heads < 1 || s.kv_heads < 1 || s.head_dim < 1 || s.intermediate < 1) {
    return bad("every size must be >= 1");
  }
  if (s.head_dim % 2 != 0 || s.head_dim > 1024) {
    return bad("head_dim " + std::to_string(s.head_dim) + " must be even and <= 1024");
  }
  if (s.hidden > 32768) return bad("hidden_size " + std::to_string(s.hidden) + " exceeds 32768");
  if (s.heads % s.kv_heads != 0) {
    return bad("num_attention_heads " + std::to_string(s.heads) + " is not a multiple of num_key_value_heads " +
               std::to_string(s.kv_heads));
  }
  if (!(s.eps > 0)) return bad("rms_norm_eps must be > 0");
  return Status::Ok();
}

std::vector<std::string> SdarFusedKernelNames() {
  return {"dice_sdar_rmsnorm", "dice_sdar_add_rmsnorm", "dice_sdar_qk_norm_rope", "dice_sdar_silu_mul"};
}

std::string SdarFusedSource(const SdarFusedShape& s) {
  const unsigned nt = NormThreads(s.hidden);
  std::ostringstream o;
  o.precision(17);
  o << "// SDAR fused elementwise kernels (dice/generator/sdar_fused_kernels.h)\n"
    << "#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n"
    << "typedef " << TypeName(s.dtype) << " T;\n";
  switch (s.dtype) {
    case FusedDtype::kF32:
      o << "__device__ __forceinline__ float dice_to_float(float v) { return v; }\n"
        << "__device__ __forceinline__ float dice_from_float(float v) { return v; }\n";
      break;
    case FusedDtype::kBF16:
      o << "__device__ __forceinline__ float dice_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }\n"
        << "__device__ __forceinline__ __nv_bfloat16 dice_from_float(float v) { return __float2bfloat16_rn(v); }\n";
      break;
    case FusedDtype::kF16:
      o << "__device__ __forceinline__ float dice_to_float(__half v) { return __half2float(v); }\n"
        << "__device__ __forceinline__ __half dice_from_float(float v) { return __float2half_rn(v); }\n";
      break;
  }
  o << "#define HIDDEN " << s.hidden << "\n#define HEADS " << s.heads << "\n#define KV_HEADS " << s.kv_heads
    << "\n#define HEAD_DIM " << s.head_dim << "\n#define INTER " << s.intermediate << "\n#define EPS "
    << static_cast<float>(s.eps) << "f\n#define NORM_THREADS " << nt << "\n#define NORM_ELEMS "
    << (s.hidden + nt - 1) / nt << "\n#define HEAD_THREADS " << HeadThreads(s.head_dim) << "\n#define SILU_THREADS "
    << kSiluThreads << "\n"
    << kBody;
  return o.str();
}

Expected<std::unique_ptr<SdarFusedKernels>> SdarFusedKernels::Build(const SdarFusedShape& shape,
                                                                   const std::string& arch, int ordinal) {
  DICE_RETURN_IF_ERROR(CheckFusedShape(shape));
  Candidate c;
  c.origin = "sdar:fused_elementwise";
  c.source = SdarFusedSource(shape);
  for (const auto& name : SdarFusedKernelNames()) c.plan.launches.push_back(KernelLaunch{name});
  std::string target = arch;
  if (target.empty()) {
    auto info = runtime::QueryDevice(ordinal);
    if (!info.ok()) return info.status();
    target = info->arch;
  }
  auto compiled = runtime::CompileCandidate(c, target);
  if (!compiled.ok()) return compiled.status();
  auto driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  const CudaDriver* d = *driver;
  runtime::CUcontext_t ctx = nullptr;
  if (int rc = d->cuCtxGetCurrent(&ctx); rc != 0) return CudaFail(d, "cuCtxGetCurrent", rc);
  if (ctx == nullptr) {
    runtime::CUdevice_t dev = 0;
    if (int rc = d->cuDeviceGet(&dev, ordinal); rc != 0) return CudaFail(d, "cuDeviceGet", rc);
    if (int rc = d->cuDevicePrimaryCtxRetain(&ctx, dev); rc != 0) return CudaFail(d, "cuDevicePrimaryCtxRetain", rc);
    if (int rc = d->cuCtxSetCurrent(ctx); rc != 0) return CudaFail(d, "cuCtxSetCurrent", rc);
  }
  std::unique_ptr<SdarFusedKernels> k(new SdarFusedKernels());
  k->shape_ = shape;
  k->driver_ = d;
  k->norm_threads_ = NormThreads(shape.hidden);
  k->head_threads_ = HeadThreads(shape.head_dim);
  k->compile_ms_ = compiled->compile_ms;
  runtime::CUmodule_t module = nullptr;
  if (int rc = d->cuModuleLoadData(&module, compiled->cubin.data()); rc != 0) return CudaFail(d, "cuModuleLoadData", rc);
  k->module_ = module;
  for (const auto& name : SdarFusedKernelNames()) {
    runtime::CUfunction_t f = nullptr;
    if (int rc = d->cuModuleGetFunction(&f, module, name.c_str()); rc != 0) {
      return CudaFail(d, ("cuModuleGetFunction " + name).c_str(), rc);
    }
    k->functions_.push_back(f);
  }
  return k;
}

SdarFusedKernels::~SdarFusedKernels() {
  if (module_ != nullptr) static_cast<const CudaDriver*>(driver_)->cuModuleUnload(static_cast<runtime::CUmodule_t>(module_));
}

Status SdarFusedKernels::Launch(int which, unsigned grid_x, unsigned grid_y, unsigned block, void** args,
                                void* stream) const {
  const auto* d = static_cast<const CudaDriver*>(driver_);
  const int rc = d->cuLaunchKernel(static_cast<runtime::CUfunction_t>(functions_[which]), grid_x, grid_y, 1, block, 1,
                                   1, 0, static_cast<runtime::CUstream_t>(stream), args, nullptr);
  if (rc != 0) return CudaFail(d, "cuLaunchKernel", rc);
  return Status::Ok();
}

Status SdarFusedKernels::AddRmsNorm(const void* x, const void* delta, const void* w, void* sum, void* norm,
                                    int64_t rows, void* stream) const {
  if (rows < 1 || rows > 0x7fffffff) return Status(StatusCode::kInvalidArgument, "SDAR fused AddRmsNorm: bad rows");
  if (delta == nullptr) {
    void* args[] = {&x, &w, &norm};
    return Launch(kRmsNorm, static_cast<unsigned>(rows), 1, norm_threads_, args, stream);
  }
  void* args[] = {&x, &delta, &w, &sum, &norm};
  return Launch(kAddRmsNorm, static_cast<unsigned>(rows), 1, norm_threads_, args, stream);
}

Status SdarFusedKernels::QkNormRope(const void* qkv, const void* q_w, const void* k_w, const void* cos,
                                    const void* sin, void* q_out, void* k_out, int64_t rows, int64_t seq_len,
                                    void* stream) const {
  if (rows < 1 || rows > 0x7fffffff || seq_len < 1 || rows % seq_len != 0) {
    return Status(StatusCode::kInvalidArgument, "SDAR fused QkNormRope: rows " + std::to_string(rows) +
                                                    " is not a positive multiple of seq_len " +
                                                    std::to_string(seq_len));
  }
  int len = static_cast<int>(seq_len);
  void* args[] = {&qkv, &q_w, &k_w, &cos, &sin, &q_out, &k_out, &len};
  return Launch(kQkNormRope, static_cast<unsigned>(rows), static_cast<unsigned>(shape_.heads + shape_.kv_heads),
                head_threads_, args, stream);
}

Status SdarFusedKernels::SiluMul(const void* gate_up, void* out, int64_t rows, void* stream) const {
  if (rows < 1 || rows > 0x7fffffff) return Status(StatusCode::kInvalidArgument, "SDAR fused SiluMul: bad rows");
  void* args[] = {&gate_up, &out};
  const auto chunks = static_cast<unsigned>((shape_.intermediate + kSiluThreads - 1) / kSiluThreads);
  return Launch(kSiluMul, static_cast<unsigned>(rows), chunks, kSiluThreads, args, stream);
}

}  // namespace dice::generator
