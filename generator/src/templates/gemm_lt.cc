// gemm_lt.cc — the cuBLASLt family (issue 18 item 1: "also try cuBLASLt's
// fused epilogues (bias, ReLU, GELU), with cuBLAS as the baseline"): a linear
// whose epilogue is one of cuBLASLt's own becomes one cublasLtMatmul call,
// D = act(x @ weight^T + bias + R), in the Hopper kernels cuBLAS itself runs,
// so the epilogue's extra pass over the output is gone without giving up the
// library's GEMM. Extension form (extension_compiler.h): host C++ only, no
// kernel of ours, linked against cuBLASLt through the source directive
// "// dice-nvcc-link: cublasLt" (ExtensionLinkLibraries), so a build costs
// the ATen headers' parse, not a CUTLASS instantiation.
//
// GEMM mapping, column-major as cuBLASLt sees row-major torch tensors:
// D^T [N, M] (ldd = N) = op(A) B with A = weight [N, K] read as a K x N
// column-major matrix (lda = K) and transposed, B = x [M, K] read as K x M
// (ldb = K); bias [N] is cuBLASLt's per-row bias of D^T; the residual R
// [M, N] is C (beta = 1, ldc = N). Math: CUBLAS_COMPUTE_32F with float
// scaling for every dtype, so float32 stays float32
// (torch.backends.cuda.matmul.allow_tf32 is off by default) and f16/bf16
// accumulate in float.
//
// One candidate per rank r of cuBLASLt's heuristic list for the shape
// (cublasLtMatmulAlgoGetHeuristic, 32 MiB workspace, the pointers' actual
// alignments): rank 0 is what the library would pick, the others are what
// the worker's timing may prefer. The sources bake in the epilogue, the
// dtype, x's rank and r, never a shape: the plan (layouts and algorithm) is
// looked up per device, M, N, K and alignment at run time and kept for the
// life of the process, so tasks that differ only in M/N/K share one build.
#include <cstdlib>
#include <string>
#include <vector>

#include "cutlass_epilogue.h"
#include "families.h"

namespace dice::generator::tmpl {
namespace {

using ir::OpKind;

Status Unsupported(const std::string& why) { return Status(StatusCode::kUnsupported, "gemm_lt: " + why); }

// cuBLASLt's epilogue activation after bias (and the residual C).
enum class Act { kNone, kRelu, kGeluTanh };

struct LtPlan {
  ir::DType dtype = ir::DType::kFloat32;
  int x = 0, w = 1;
  int bias = -1;      // group input added per column: linear's own bias or a per-column add
  int residual = -1;  // group input of the output's shape added before the activation (C, beta = 1)
  Act act = Act::kNone;
};

// The accepted groups: act(linear(x, w[, b]) [+ E]) where E is a per-column
// vector (when linear has no bias) or an output-shaped tensor, act relu or
// the tanh GELU, each op reading the running value once; everything else is
// refused with the op that does not fit cuBLASLt's epilogues.
Expected<LtPlan> Match(const Task& task) {
  const ir::Graph& g = task.graph;
  auto found = FindEpilogueChain(g, OpKind::kLinear, "GEMM");
  if (!found.ok()) return Unsupported(found.status().message());
  const size_t lin = *found;
  const ir::Op& op = g.ops[lin];
  const int n_in = static_cast<int>(g.inputs.size());
  for (int32_t a : op.args) {
    if (a >= n_in) return Unsupported("linear's operands must be group inputs");
  }
  LtPlan p;
  p.x = op.args[0];
  p.w = op.args[1];
  p.bias = op.args.size() > 2 ? op.args[2] : -1;
  const ir::TensorSpec& x = task.inputs[p.x];
  const ir::TensorSpec& w = task.inputs[p.w];
  if (x.shape.empty() || w.shape.size() != 2 || x.shape.back() != w.shape[1]) {
    return Unsupported("linear wants x [..., K] and weight [N, K]");
  }
  p.dtype = x.dtype;
  const int64_t n = w.shape[0];
  const ir::TensorSpec& out = task.outputs[0];
  for (const ir::TensorSpec& s : task.inputs) {
    if (s.dtype != p.dtype) return Unsupported("inputs of mixed dtypes (" + s.ToString() + " vs " + x.ToString() + ")");
    if (!s.is_contiguous()) return Unsupported("non-contiguous input " + s.ToString());
  }
  if (out.dtype != p.dtype) return Unsupported("the output dtype differs from linear's");
  if (x.numel() == 0 || n == 0 || x.shape.back() == 0) return Unsupported("empty GEMM (M, N or K is 0)");
  int32_t cur = g.op_value(lin);
  bool fused_any = false;
  for (size_t i = lin + 1; i < g.ops.size(); ++i) {
    const ir::Op& e = g.ops[i];
    if (e.kind == OpKind::kConstant) continue;
    fused_any = true;
    const std::string name = ir::GetOpInfo(e.kind).name;
    if (p.act != Act::kNone) return Unsupported(name + " after the activation (cuBLASLt applies it last)");
    if (e.kind == OpKind::kAdd && e.args.size() == 2 && (e.args[0] == cur) != (e.args[1] == cur)) {
      const int32_t other = e.args[0] == cur ? e.args[1] : e.args[0];
      if (other >= n_in) return Unsupported("add of a computed value (the epilogue adds a group input)");
      const ir::TensorSpec& t = task.inputs[other];
      if (p.residual < 0 && t.shape == out.shape) {
        p.residual = other;
      } else if (p.bias < 0 && IsPerColumn(t.shape, n, out.shape.size())) {
        p.bias = other;
      } else {
        return Unsupported("add of " + t.ToString() + ": cuBLASLt adds one bias [N] and one output-shaped tensor");
      }
    } else if (e.kind == OpKind::kRelu && e.args.size() == 1 && e.args[0] == cur) {
      p.act = Act::kRelu;
    } else if (e.kind == OpKind::kGelu && e.args.size() == 1 && e.args[0] == cur && e.ivalue == 1) {
      p.act = Act::kGeluTanh;
    } else {
      return Unsupported(name + (e.kind == OpKind::kGelu ? " (exact, erf)" : "") +
                         " is not one of cuBLASLt's epilogues (bias, an output-shaped add, relu, tanh gelu)");
    }
    cur = g.op_value(i);
  }
  if (g.outputs[0] != cur) return Unsupported("the group output is not the end of the epilogue chain");
  if (!fused_any) return Unsupported("a bare linear is PyTorch's own cuBLASLt call; nothing to fuse");
  return p;
}

std::string EpilogueName(const LtPlan& p) {
  std::string s = p.residual >= 0 ? "residual" : "";
  if (p.bias >= 0) s += s.empty() ? "bias" : "_bias";
  if (p.act == Act::kRelu) s += s.empty() ? "relu" : "_relu";
  if (p.act == Act::kGeluTanh) s += s.empty() ? "gelu" : "_gelu";
  return s.empty() ? "plain" : s;
}

const char* LtEpilogue(const LtPlan& p) {
  const bool b = p.bias >= 0;
  switch (p.act) {
    case Act::kRelu: return b ? "CUBLASLT_EPILOGUE_RELU_BIAS" : "CUBLASLT_EPILOGUE_RELU";
    case Act::kGeluTanh: return b ? "CUBLASLT_EPILOGUE_GELU_BIAS" : "CUBLASLT_EPILOGUE_GELU";
    case Act::kNone: break;
  }
  return b ? "CUBLASLT_EPILOGUE_BIAS" : "CUBLASLT_EPILOGUE_DEFAULT";
}

const char* CudaDataType(ir::DType dt) {
  switch (dt) {
    case ir::DType::kFloat16: return "CUDA_R_16F";
    case ir::DType::kBFloat16: return "CUDA_R_16BF";
    default: return "CUDA_R_32F";
  }
}

// The source up to dice_forward: headers, the configuration's constants,
// the handle, plan and descriptor helpers, the input check.
std::string LtPreamble(const LtPlan& p, int rank, const std::string& origin) {
  std::string s = "// " + origin + ": linear + epilogue as one cuBLASLt matmul (generated by dice's gemm_lt templates)\n";
  s += "// dice-nvcc-link: cublasLt\n";
  s += AtenHostHeaders();  // the ATen/c10 subset the CUTLASS families use, not <torch/extension.h>
  s += "#include <cublasLt.h>\n#include <climits>\n#include <cstdint>\n#include <map>\n#include <mutex>\n#include <tuple>\n"
       "#include <vector>\n\n";
  s += "namespace {\n";
  s += "constexpr int kAlgoRank = " + std::to_string(rank) + ";  // index into cuBLASLt's heuristic list\n";
  s += "constexpr size_t kWorkspaceBytes = size_t(32) << 20;\n";
  s += "constexpr cudaDataType_t kType = " + std::string(CudaDataType(p.dtype)) + ";\n";
  s += "constexpr cublasLtEpilogue_t kEpilogue = " + std::string(LtEpilogue(p)) + ";\n";
  s += "constexpr bool kResidual = " + std::string(p.residual >= 0 ? "true" : "false") + ";\n";
  s += "constexpr bool kBias = " + std::string(p.bias >= 0 ? "true" : "false") + ";\n\n";
  s += R"DICE(#define DICE_LT(expr, what)                                                                   \
  do {                                                                                        \
    const cublasStatus_t dice_st = (expr);                                                    \
    TORCH_CHECK(dice_st == CUBLAS_STATUS_SUCCESS, "gemm_lt candidate: ", what, ": ",          \
                cublasLtGetStatusString(dice_st), " (", static_cast<int>(dice_st), ")");      \
  } while (0)

// One cuBLASLt handle per device for the process's life (cublasLtCreate is
// not free; the handle holds no stream).
cublasLtHandle_t dice_handle(int device) {
  static std::mutex mu;
  static std::map<int, cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  DICE_LT(cublasLtCreate(&h), "cublasLtCreate");
  handles[device] = h;
  return h;
}

// Largest power of two <= 256 dividing the address (cuBLASLt's alignment preferences).
uint32_t dice_align(const void* ptr) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(ptr);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a >>= 1;
  return a;
}

// The descriptor of this configuration: transposes, float math, the epilogue.
cublasLtMatmulDesc_t dice_desc(const void* bias) {
  cublasLtMatmulDesc_t d = nullptr;
  DICE_LT(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const cublasLtEpilogue_t epi = kEpilogue;
  DICE_LT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "TRANSA");
  DICE_LT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "TRANSB");
  DICE_LT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "EPILOGUE");
  if (kBias) {
    DICE_LT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)), "BIAS_POINTER");
  }
  return d;
}

// Layouts and the chosen algorithm for one shape and alignment class.
struct DicePlan {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo;
  size_t workspace = 0;
};

const DicePlan& dice_plan(cublasLtHandle_t handle, int device, int64_t M, int64_t N, int64_t K, uint32_t aa,
                          uint32_t ab, uint32_t ac, uint32_t ad, const void* bias) {
  using Key = std::tuple<int, int64_t, int64_t, int64_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t>;
  static std::mutex mu;
  static std::map<Key, DicePlan> plans;
  const Key key{device, M, N, K, aa, ab, ac, ad, kBias ? dice_align(bias) : 0u};
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  DicePlan p;
  DICE_LT(cublasLtMatrixLayoutCreate(&p.a, kType, K, N, K), "layout A (weight)");
  DICE_LT(cublasLtMatrixLayoutCreate(&p.b, kType, K, M, K), "layout B (x)");
  DICE_LT(cublasLtMatrixLayoutCreate(&p.c, kType, N, M, N), "layout C/D (out)");
  cublasLtMatmulPreference_t pref = nullptr;
  DICE_LT(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const size_t ws = kWorkspaceBytes;
  DICE_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
          "MAX_WORKSPACE_BYTES");
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const uint32_t align[4] = {aa, ab, ac, ad};
  for (int i = 0; i < 4; ++i) {
    DICE_LT(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &align[i], sizeof(align[i])), "MIN_ALIGNMENT");
  }
  cublasLtMatmulDesc_t desc = dice_desc(bias);
  cublasLtMatmulHeuristicResult_t found[kAlgoRank + 1];
  int returned = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc, p.a, p.b, p.c, p.c, pref, kAlgoRank + 1,
                                                           found, &returned);
  cublasLtMatmulDescDestroy(desc);
  cublasLtMatmulPreferenceDestroy(pref);
  DICE_LT(st, "cublasLtMatmulAlgoGetHeuristic");
  TORCH_CHECK(returned > kAlgoRank, "gemm_lt candidate: cuBLASLt offers ", returned,
              " algorithm(s) for M=", M, " N=", N, " K=", K, "; this candidate takes number ", kAlgoRank + 1);
  p.algo = found[kAlgoRank].algo;
  p.workspace = found[kAlgoRank].workspaceSize;
  return plans.emplace(key, p).first->second;
}

void dice_check(const torch::Tensor& t, const char* what, const c10::Device& device) {
  TORCH_CHECK(t.is_cuda(), "gemm_lt candidate: ", what, " must be a CUDA tensor, got ", t.device());
  TORCH_CHECK(t.device() == device, "gemm_lt candidate: ", what, " is on ", t.device(), ", x on ", device);
)DICE";
  s += "  TORCH_CHECK(t.scalar_type() == " + std::string(TorchScalarType(p.dtype)) +
       ", \"gemm_lt candidate: \", what, \" must be " + ir::DTypeName(p.dtype) + ", got \", t.scalar_type());\n";
  s += "  TORCH_CHECK(t.is_contiguous(), \"gemm_lt candidate: \", what, \" must be contiguous\");\n}\n";
  s += "}  // namespace\n\n";
  return s;
}

// dice_forward: checks, the plan for this shape, one cublasLtMatmul.
std::string LtHostFunction(const Task& task, const LtPlan& p) {
  const std::string x = "in" + std::to_string(p.x), w = "in" + std::to_string(p.w);
  const std::string rank_text = std::to_string(task.inputs[p.x].shape.size());
  std::string sig;
  for (size_t i = 0; i < task.inputs.size(); ++i) sig += (i ? ", " : "") + std::string("torch::Tensor in") + std::to_string(i);
  std::string s = "// out[..., N] = " + EpilogueName(p) +
                  "(x @ weight^T ...) in one cublasLtMatmul on the current stream of x's\n"
                  "// device; M, N, K are read from x [..., K] and weight [N, K] at run time.\n";
  s += "torch::Tensor dice_forward(" + sig + ") {\n";
  for (size_t i = 0; i < task.inputs.size(); ++i) {
    s += "  dice_check(in" + std::to_string(i) + ", \"in" + std::to_string(i) + "\", " + x + ".device());\n";
  }
  s += "  TORCH_CHECK(" + x + ".dim() == " + rank_text + ", \"gemm_lt candidate: x (" + x + ") must have rank " +
       rank_text + " (built for it), got \", " + x + ".dim());\n";
  s += "  TORCH_CHECK(" + w + ".dim() == 2 && " + w + ".size(1) == " + x + ".size(-1), \"gemm_lt candidate: weight (" +
       w + ") must be [N, K] with K = x's last dim, got \", " + w + ".sizes(), \" and \", " + x + ".sizes());\n";
  s += "  const int64_t K = " + x + ".size(-1), N = " + w + ".size(0), M = K > 0 ? " + x + ".numel() / K : 0;\n";
  s += "  TORCH_CHECK(M > 0 && N > 0 && K > 0, \"gemm_lt candidate: empty GEMM (M=\", M, \" N=\", N, \" K=\", K, \")\");\n";
  s += "  std::vector<int64_t> out_sizes(" + x + ".sizes().begin(), " + x + ".sizes().end());\n";
  s += "  out_sizes.back() = N;\n";
  std::string bias_ptr = "nullptr", c_ptr = "out.data_ptr()";
  if (p.bias >= 0) {
    const std::string b = "in" + std::to_string(p.bias);
    s += "  TORCH_CHECK(" + b + ".numel() == N && " + b + ".size(-1) == N, \"gemm_lt candidate: bias (" + b +
         ") must hold N=\", N, \" values along its last dim, got \", " + b + ".sizes());\n";
    bias_ptr = b + ".data_ptr()";
  }
  if (p.residual >= 0) {
    const std::string r = "in" + std::to_string(p.residual);
    s += "  TORCH_CHECK(" + r + ".sizes().vec() == out_sizes, \"gemm_lt candidate: the added tensor (" + r +
         ") must be output-shaped \", c10::IntArrayRef(out_sizes), \", got \", " + r + ".sizes());\n";
    c_ptr = r + ".data_ptr()";
  }
  s += "  const c10::cuda::CUDAGuard guard(" + x + ".device());\n";
  s += "  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(" + x + ".device().index()).stream();\n";
  s += "  torch::Tensor out = torch::empty({M, N}, " + x + ".options());\n";
  s += "  const cublasLtHandle_t handle = dice_handle(" + x + ".device().index());\n";
  s += "  const DicePlan& plan = dice_plan(handle, " + x + ".device().index(), M, N, K, dice_align(" + w +
       ".data_ptr()), dice_align(" + x + ".data_ptr()), dice_align(" + c_ptr + "), dice_align(out.data_ptr()), " +
       bias_ptr + ");\n";
  s += "  torch::Tensor workspace;\n";
  s += "  if (plan.workspace > 0) {\n"
       "    workspace = torch::empty({static_cast<int64_t>(plan.workspace)}, " + x + ".options().dtype(torch::kUInt8));\n"
       "  }\n";
  s += "  const float alpha = 1.0f, beta = kResidual ? 1.0f : 0.0f;\n";
  s += "  cublasLtMatmulDesc_t desc = dice_desc(" + bias_ptr + ");\n";
  s += "  const cublasStatus_t st = cublasLtMatmul(handle, desc, &alpha, " + w + ".data_ptr(), plan.a, " + x +
       ".data_ptr(), plan.b, &beta, " + c_ptr + ", plan.c, out.data_ptr(), plan.c, &plan.algo,\n"
       "                                         plan.workspace > 0 ? workspace.data_ptr() : nullptr, plan.workspace, stream);\n";
  s += "  cublasLtMatmulDescDestroy(desc);\n";
  s += "  DICE_LT(st, \"cublasLtMatmul\");\n";
  s += "  return out.view(out_sizes);\n}\n";
  return s;
}

}  // namespace

Expected<std::vector<Candidate>> GemmLtCandidates(const Task& task, int max_candidates) {
  const char* off = std::getenv("DICE_GEMM_LT");
  if (off != nullptr && std::string(off) == "0") return Unsupported("DICE_GEMM_LT=0 turns the cuBLASLt family off");
  auto plan = Match(task);
  if (!plan.ok()) return plan.status();
  std::vector<Candidate> out;
  for (int r = 0; r < kGemmLtRanks && static_cast<int>(out.size()) < max_candidates; ++r) {
    Candidate c;
    c.form = CandidateForm::kExtension;
    c.origin = "template:gemm_lt/" + EpilogueName(*plan) + "/a" + std::to_string(r);
    c.reduced_precision = false;  // CUBLAS_COMPUTE_32F: float math for every dtype
    c.source = LtPreamble(*plan, r, c.origin) + LtHostFunction(task, *plan);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace dice::generator::tmpl
