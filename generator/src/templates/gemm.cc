// gemm.cc — the gemm template family (families.h, issue 18 item 1): a
// linear (F.linear) followed by an elementwise epilogue, as extension-form
// candidates on CUTLASS 2.x's device GEMM (cutlass/gemm/device/gemm.h,
// sm80 tensor-op kernels, which run on sm_90) whose epilogue output op is
// generated from it. The epilogue is a DAG, not only a chain: any op may read
// any earlier value of the group (y * sigmoid(y), sigmoid(y) * s + y; the
// policy's rule 4, torch_ext/src/fusion_policy.h), and each value is computed
// once per element.
//
// GEMM mapping: x [..., K] is A = [M, K] row-major (M = product of the
// leading dims), weight [N, K] is B = K x N column-major (ldb = K), the
// output is D = [M, N] row-major (ldd = N). The epilogue reads one source
// tensor C (CUTLASS's "source", ElementC = the group's dtype):
//   - linear's own bias [N] (ldc = 0: every row reads the same vector);
//   - else the one extra tensor the epilogue reads: a per-column vector ([N],
//     [1, N], ...; ldc = 0) or the full output-shaped tensor (ldc = N);
//   - with both, bias ± extra summed by dice_forward with one torch op,
//     when the epilogue adds the extra tensor to linear's output directly;
//   - none: beta = 0, CUTLASS's source-free path.
// Per element the generated functor computes, in float, the linear value
// (acc, or acc + c when C holds the bias) and the epilogue's ops (emit.h's
// EmitNodes over a Node DAG whose leaves are `acc` and `c`: one `const float
// v<id>` per IR value, every later use naming that variable).
// Shape-generic sources (issue 18: a CUTLASS instantiation costs 30-90 s of
// nvcc, so one build must serve every shape): dice_forward reads M, N, K and
// x's leading dims from the tensors at run time. What the source does bake in
// is the configuration — dtype, epilogue, tile, stages, the access widths along
// K and N (chosen from the task's divisibility and alignment, checked at run
// time), x's rank, the source C's kind (bias, per-column or output-shaped
// extra) — so tasks differing only in M/N/K generate byte-identical sources
// and hit the runtime's build cache (extension_compiler.h).
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cutlass_epilogue.h"
#include "emit.h"
#include "families.h"
#include "gemm_plan.h"

namespace dice::generator::tmpl {
namespace {

using ir::OpKind;

// One CUTLASS tile configuration (threadblock, warp tile, pipeline stages);
// the sizes appear in CUTLASS's own sm80 profiler lists
// (cutlass_library/generator.py: GenerateSM80_TensorOp_1688_fast_fp32_math
// for float via 3xTF32, GenerateSM80_TensorOp_16816 for f16/bf16).
struct Tile {
  int tm, tn, tk;  // threadblock tile M x N x K
  int wm, wn, wk;  // warp tile
  int stages;
};

constexpr Tile kFastF32Tiles[] = {
    {128, 128, 16, 32, 64, 16, 4},  // 8 warps ([4, 2, 1])
    {128, 64, 16, 64, 32, 16, 4},   // 4 warps ([2, 2, 1])
    {256, 64, 16, 64, 32, 16, 3},   // 8 warps ([4, 2, 1])
};
constexpr Tile kHalfTiles[] = {
    {128, 128, 32, 64, 64, 32, 4},  // 4 warps ([2, 2, 1])
    {256, 128, 32, 64, 64, 32, 3},  // 8 warps ([4, 2, 1])
    {128, 64, 32, 64, 32, 32, 6},   // 4 warps ([2, 2, 1])
};
// The small-grid tiles (same lists: fast-fp32 64x64x16 with 3 stages, 16816
// 64x64x32 with 10), tried besides the three above only when none of those
// fills half of the machine's tile slots (UsefulWork < kSmallGridWork): a
// 490 x 768 output makes 24-48 CTAs of a 128-wide tile on 132 SMs, 96 of
// 64x64. Larger grids keep exactly the three candidates above.
constexpr Tile kFastF32SmallGridTile = {64, 64, 16, 32, 32, 16, 3};  // 4 warps ([2, 2, 1])
constexpr Tile kHalfSmallGridTile = {64, 64, 32, 32, 32, 32, 10};    // 4 warps ([2, 2, 1])
constexpr double kSmallGridWork = 0.5;

Status Unsupported(const std::string& why) { return Status(StatusCode::kUnsupported, "gemm: " + why); }

// Checks linear's operands and fills dtype, M, N, K, x/w/bias.
Status AnalyzeLinear(const Task& task, const ir::Op& lin, GemmPlan* p) {
  const int n_in = static_cast<int>(task.graph.inputs.size());
  for (int32_t a : lin.args) {
    if (a >= n_in) return Unsupported("linear's operands must be group inputs (x, weight[, bias]), got %" + std::to_string(a));
  }
  p->x = lin.args[0];
  p->w = lin.args[1];
  p->bias = lin.args.size() > 2 ? lin.args[2] : -1;
  const ir::TensorSpec& x = task.inputs[p->x];
  const ir::TensorSpec& w = task.inputs[p->w];
  if (x.shape.empty() || w.shape.size() != 2) return Unsupported("linear wants x [..., K] and weight [N, K]");
  p->dtype = x.dtype;
  p->K = x.shape.back();
  p->N = w.shape[0];
  p->M = 1;
  for (size_t d = 0; d + 1 < x.shape.size(); ++d) p->M *= x.shape[d];
  if (p->M == 0 || p->N == 0 || p->K == 0) return Unsupported("empty GEMM (M, N or K is 0)");
  const int64_t kIntMax = 2147483647;
  if (p->M > kIntMax || p->N > kIntMax || p->K > kIntMax) return Unsupported("M, N or K exceeds 2^31 - 1");
  for (const ir::TensorSpec& s : task.inputs) {
    if (s.dtype != p->dtype) return Unsupported("inputs of mixed dtypes (" + s.ToString() + " vs " + x.ToString() + ")");
    if (!s.is_contiguous()) return Unsupported("non-contiguous input " + s.ToString());
  }
  return Status::Ok();
}

// Validates the group and builds the plan (see the file comment).
Expected<GemmPlan> Analyze(const Task& task) {
  const ir::Graph& g = task.graph;
  auto found = FindEpilogueChain(g, OpKind::kLinear, "GEMM");
  if (!found.ok()) return Unsupported(found.status().message());
  const size_t lin_index = *found;
  GemmPlan p;
  DICE_RETURN_IF_ERROR(AnalyzeLinear(task, g.ops[lin_index], &p));
  std::vector<int64_t> lin_shape(task.inputs[p.x].shape.begin(), task.inputs[p.x].shape.end() - 1);
  lin_shape.push_back(p.N);
  const ir::TensorSpec& out = task.outputs[0];
  if (out.shape != lin_shape) {
    return Unsupported("the output " + out.ToString() + " is not linear's shape (the chain broadcasts it)");
  }
  if (out.dtype != p.dtype) return Unsupported("the output dtype differs from linear's");
  // The one extra tensor: a group input read after linear.
  auto extra = EpilogueExtraInput(g, lin_index, "linear");
  if (!extra.ok()) return Unsupported(extra.status().message());
  int64_t c_align_bytes = 16;
  if (*extra >= 0) {
    p.extra = *extra;
    const ir::TensorSpec& e = task.inputs[p.extra];
    p.extra_full = e.shape == out.shape;
    if (!p.extra_full && !IsPerColumn(e.shape, p.N, out.shape.size())) {
      return Unsupported("the extra tensor " + e.ToString() + " is neither per-column ([N] or [1, N]) nor output-shaped " +
                         out.ToString());
    }
    c_align_bytes = e.alignment;
  }
  int fold_op = -1;
  const Status source = ChooseEpilogueSource(g, lin_index, p.bias, p.extra,
                                             p.extra >= 0 ? task.inputs[p.extra].ToString() : "", "linear", &p.source,
                                             &fold_op);
  if (!source.ok()) return Unsupported(source.message());
  if (p.source == Source::kBiasPlusExtra || p.source == Source::kBiasMinusExtra) {
    c_align_bytes = 16;  // a fresh torch tensor
  } else if (p.source == Source::kBias) {
    c_align_bytes = task.inputs[p.bias].alignment;
  }
  const int64_t esize = ir::DTypeSize(p.dtype);
  const int max_elems = static_cast<int>(16 / esize);
  p.align_ab = AccessElems(p.K, std::min(task.inputs[p.x].alignment, task.inputs[p.w].alignment), esize, max_elems);
  p.align_c = AccessElems(p.N, std::min<int64_t>(c_align_bytes, out.alignment), esize, max_elems);
  if (esize == 2 && (p.align_ab < 2 || p.align_c < 2)) {
    return Unsupported("16-bit tensor-op kernels need K and N even and 4-byte aligned data (K=" + std::to_string(p.K) +
                       ", N=" + std::to_string(p.N) + ")");
  }
  const Status chain = BuildEpilogueDag(g, lin_index, p.extra, fold_op, &p.epi);
  if (!chain.ok()) return Unsupported(chain.message());
  return p;
}

// The cutlass::gemm::device::Gemm instantiation for `tile`.
std::string GemmType(const GemmPlan& p, const Tile& t) {
  const bool f32 = p.dtype == ir::DType::kFloat32;
  const std::string e = CutlassElement(p.dtype);
  auto shape = [](int a, int b, int c) {
    return "cutlass::gemm::GemmShape<" + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c) + ">";
  };
  std::string s = "using DiceGemm = cutlass::gemm::device::Gemm<\n";
  s += "    " + e + ", cutlass::layout::RowMajor,     // A = x [M, K]\n";
  s += "    " + e + ", cutlass::layout::ColumnMajor,  // B = weight [N, K] as K x N\n";
  s += "    " + e + ", cutlass::layout::RowMajor,     // C, D [M, N]\n";
  s += "    float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,\n";
  s += "    " + shape(t.tm, t.tn, t.tk) + ", " + shape(t.wm, t.wn, t.wk) + ", " +
       (f32 ? shape(16, 8, 8) : shape(16, 8, 16)) + ",\n";
  s += "    DiceEpilogue, cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, " + std::to_string(t.stages) +
       ",\n";
  s += "    " + std::to_string(p.align_ab) + ", " + std::to_string(p.align_ab) + ", false, " +
       (f32 ? "cutlass::arch::OpMultiplyAddFastF32" : "cutlass::arch::OpMultiplyAdd") + ">;\n";
  return s;
}

// The shape checks of dice_forward: M, N, K come from x and weight at run
// time; what the configuration was built for (x's rank, the access widths
// along K and N, the extra tensor's kind) is checked, with a clear message.
std::string ShapeChecks(const Task& task, const GemmPlan& p) {
  const std::string x = "in" + std::to_string(p.x), w = "in" + std::to_string(p.w);
  const std::string rank = std::to_string(task.inputs[p.x].shape.size());
  std::string s;
  s += "  TORCH_CHECK(" + x + ".dim() == " + rank + ", \"gemm candidate: x (" + x + ") must have rank " + rank +
       " (built for it), got \", " + x + ".dim());\n";
  s += "  TORCH_CHECK(" + w + ".dim() == 2, \"gemm candidate: weight (" + w + ") must be [N, K], got \", " + w +
       ".sizes());\n";
  s += "  const int64_t K = " + x + ".size(-1), N = " + w + ".size(0);\n";
  s += "  TORCH_CHECK(" + w + ".size(1) == K, \"gemm candidate: weight (" + w + ") is \", " + w +
       ".sizes(), \", x's last dim is \", K);\n";
  s += "  TORCH_CHECK(K > 0 && N > 0 && " + x + ".numel() > 0, \"gemm candidate: empty GEMM (x \", " + x +
       ".sizes(), \", weight \", " + w + ".sizes(), \")\");\n";
  s += "  const int64_t M = " + x + ".numel() / K;\n";
  s += "  TORCH_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX, \"gemm candidate: M, N or K exceeds 2^31 - 1\");\n";
  s += "  TORCH_CHECK(K % " + std::to_string(p.align_ab) + " == 0, \"gemm candidate: built for " +
       std::to_string(p.align_ab) + "-element accesses along K, K=\", K, \" is not a multiple of " +
       std::to_string(p.align_ab) + " (another alignment class)\");\n";
  s += "  TORCH_CHECK(N % " + std::to_string(p.align_c) + " == 0, \"gemm candidate: built for " +
       std::to_string(p.align_c) + "-element accesses along N, N=\", N, \" is not a multiple of " +
       std::to_string(p.align_c) + " (another alignment class)\");\n";
  s += "  std::vector<int64_t> out_sizes(" + x + ".sizes().begin(), " + x + ".sizes().end());\n";
  s += "  out_sizes.back() = N;\n";
  if (p.bias >= 0) {
    const std::string b = "in" + std::to_string(p.bias);
    s += "  TORCH_CHECK(" + b + ".dim() == 1 && " + b + ".size(0) == N, \"gemm candidate: bias (" + b +
         ") must be [N] = [\", N, \"], got \", " + b + ".sizes());\n";
  }
  if (p.extra >= 0 && p.extra != p.bias) {
    const std::string e = "in" + std::to_string(p.extra);
    if (p.extra_full) {
      s += "  TORCH_CHECK(" + e + ".sizes().vec() == out_sizes, \"gemm candidate: the extra tensor (" + e +
           ") must be output-shaped \", c10::IntArrayRef(out_sizes), \", got \", " + e + ".sizes());\n";
    } else {
      s += "  TORCH_CHECK(" + e + ".dim() >= 1 && " + e + ".dim() <= " + rank + " && " + e + ".numel() == N && " + e +
           ".size(-1) == N, \"gemm candidate: the extra tensor (" + e + ") must be per-column ([N], [1, N], ...; N=\", N, "
           "\"), got \", " + e + ".sizes());\n";
    }
  }
  return s;
}

// dice_forward's opening (gemm_plan.h GemmPrologue). No shape is baked in:
// one build serves every shape of the configuration's class.
GemmHostPrologue HostPrologue(const Task& task, const GemmPlan& p) {
  const size_t n_in = task.inputs.size();
  const int64_t esize = ir::DTypeSize(p.dtype);
  std::string sig, checks;
  for (size_t i = 0; i < n_in; ++i) {
    const std::string name = "in" + std::to_string(i);
    sig += (i ? ", " : "") + std::string("torch::Tensor ") + name;
    int64_t align = 1;
    if (static_cast<int>(i) == p.x || static_cast<int>(i) == p.w) align = p.align_ab;
    if ((p.source == Source::kBias && static_cast<int>(i) == p.bias) ||
        (p.source == Source::kExtra && static_cast<int>(i) == p.extra)) {
      align = p.align_c;
    }
    checks += "  dice_gemm_check(" + name + ", \"" + name + "\", " + I64(align * esize) + ", in" +
              std::to_string(p.x) + ".device());\n";
  }
  const std::string x = "in" + std::to_string(p.x), w = "in" + std::to_string(p.w);
  std::string c_ptr = "out.data_ptr()", ldc = "N";
  std::string prep;
  switch (p.source) {
    case Source::kNone: break;
    case Source::kBias:
      c_ptr = "in" + std::to_string(p.bias) + ".data_ptr()";
      ldc = "0LL";
      break;
    case Source::kExtra:
      c_ptr = "in" + std::to_string(p.extra) + ".data_ptr()";
      ldc = p.extra_full ? "N" : "0LL";
      break;
    case Source::kBiasPlusExtra:
    case Source::kBiasMinusExtra: {
      // Tensor methods, not operator+/-: those live in ATen/TensorOperators.h,
      // which the ATen subset these sources include (cutlass_epilogue.h) lacks.
      const bool plus = p.source == Source::kBiasPlusExtra;
      prep = "  // linear's bias and the extra tensor, summed once: C = bias " + std::string(plus ? "+" : "-") + " extra.\n";
      prep += "  torch::Tensor csum = in" + std::to_string(p.bias) + ".view({1LL, N})." + (plus ? "add" : "sub") + "(in" +
              std::to_string(p.extra) + ".view({-1LL, N})).contiguous();\n";
      c_ptr = "csum.data_ptr()";
      ldc = p.extra_full ? "N" : "0LL";
      break;
    }
  }
  std::string s;
  s += "#include <climits>\n#include <vector>\n\n";
  s += "// Throws (TORCH_CHECK) unless `t` is a contiguous CUDA tensor of the task's dtype on\n"
       "// `device` whose data pointer is a multiple of `align_bytes`.\n";
  s += "static void dice_gemm_check(const torch::Tensor& t, const char* what, int64_t align_bytes,\n"
       "                            const c10::Device& device) {\n"
       "  TORCH_CHECK(t.is_cuda(), \"gemm candidate: \", what, \" must be a CUDA tensor, got \", t.device());\n"
       "  TORCH_CHECK(t.device() == device, \"gemm candidate: \", what, \" is on \", t.device(), \", x on \", device);\n"
       "  TORCH_CHECK(t.scalar_type() == " + std::string(TorchScalarType(p.dtype)) +
       ", \"gemm candidate: \", what, \" must be " + ir::DTypeName(p.dtype) + ", got \", t.scalar_type());\n"
       "  TORCH_CHECK(t.is_contiguous(), \"gemm candidate: \", what, \" must be contiguous\");\n"
       "  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % align_bytes == 0, \"gemm candidate: \", what,\n"
       "              \" is not \", align_bytes, \"-byte aligned\");\n}\n\n";
  s += "// out[..., N] = epilogue(x @ weight^T), M x N x K read from x [..., K] and weight [N, K];\n"
       "// built for " + std::to_string(p.align_ab) + "-element accesses along K and " + std::to_string(p.align_c) +
       " along N. Runs on the current CUDA stream of x's device.\n";
  s += "torch::Tensor dice_forward(" + sig + ") {\n";
  s += checks;
  s += ShapeChecks(task, p);
  s += "  const c10::cuda::CUDAGuard guard(" + x + ".device());\n";
  s += "  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(" + x + ".device().index()).stream();\n";
  s += "  torch::Tensor out = torch::empty({M, N}, " + x + ".options());\n";
  s += prep;
  s += "  using E = DiceEpilogue::Element;\n";
  return {s, c_ptr, ldc};
}

// dice_forward of the 2.x kernel: the prologue, then cutlass::gemm::device::Gemm's arguments and run.
std::string HostFunction(const Task& task, const GemmPlan& p) {
  const std::string x = "in" + std::to_string(p.x), w = "in" + std::to_string(p.w);
  const GemmHostPrologue pro = HostPrologue(task, p);
  const std::string& c_ptr = pro.c_ptr;
  const std::string& ldc = pro.ldc;
  std::string s = pro.text;
  s += "  DiceGemm::Arguments args({static_cast<int>(M), static_cast<int>(N), static_cast<int>(K)},\n";
  s += "                           {static_cast<E const*>(" + x + ".data_ptr()), K},\n";
  s += "                           {static_cast<E const*>(" + w + ".data_ptr()), K},\n";
  s += "                           {static_cast<E const*>(" + c_ptr + "), " + ldc + "},\n";
  s += "                           {static_cast<E*>(out.data_ptr()), N},\n";
  s += "                           DiceEpilogue::Params(), 1);\n";
  s += CutlassRunSource("DiceGemm", "gemm", x);
  s += "  return out.view(out_sizes);\n}\n";
  return s;
}

std::string TileName(const Tile& t) {
  return std::to_string(t.tm) + "x" + std::to_string(t.tn) + "x" + std::to_string(t.tk);
}

// The ordering heuristic: the fraction of the machine's tile slots (waves x
// SMs x tile elements) that compute output elements, so a grid that leaves
// SMs idle or pads a small output ranks lower. Sorted by that fraction
// relative to the best tile's, in bins of 1/20; ties go to the larger tile
// (more operand reuse per loaded byte), then to the list order.
double UsefulWork(const GemmPlan& p, const Tile& t, int sm_count) {
  const int64_t ctas = ((p.M + t.tm - 1) / t.tm) * ((p.N + t.tn - 1) / t.tn);
  const int64_t sms = std::max(sm_count, 1);
  const int64_t waves = (ctas + sms - 1) / sms;
  return static_cast<double>(p.M) * static_cast<double>(p.N) /
         (static_cast<double>(waves * sms) * static_cast<double>(t.tm) * static_cast<double>(t.tn));
}

void OrderTiles(const GemmPlan& p, int sm_count, std::vector<Tile>* tiles) {
  double best = 0;
  for (const Tile& t : *tiles) best = std::max(best, UsefulWork(p, t, sm_count));
  auto bin = [&](const Tile& t) { return static_cast<int>(UsefulWork(p, t, sm_count) / best * 20.0 + 0.5); };
  std::stable_sort(tiles->begin(), tiles->end(), [&](const Tile& a, const Tile& b) {
    const int ea = bin(a), eb = bin(b);
    if (ea != eb) return ea > eb;
    return a.tm * a.tn > b.tm * b.tn;
  });
}

}  // namespace

Expected<GemmPlan> AnalyzeGemm(const Task& task) { return Analyze(task); }

GemmHostPrologue GemmPrologue(const Task& task, const GemmPlan& p) { return HostPrologue(task, p); }

Expected<std::vector<Candidate>> GemmCandidates(const Task& task, int max_candidates) {
  auto plan = Analyze(task);
  if (!plan.ok()) return plan.status();
  const GemmPlan& p = *plan;
  const bool f32 = p.dtype == ir::DType::kFloat32;
  if (f32) {
    const char* strict = std::getenv("DICE_STRICT_FP32");
    if (strict != nullptr && std::string(strict) == "1") {
      return Unsupported("DICE_STRICT_FP32=1 turns off the 3xTF32 float32 GEMM candidates");
    }
  }
  std::vector<Tile> tiles = f32 ? ListOf(kFastF32Tiles) : ListOf(kHalfTiles);
  double best_work = 0;
  for (const Tile& t : tiles) best_work = std::max(best_work, UsefulWork(p, t, task.target.sm_count));
  if (best_work < kSmallGridWork) tiles.push_back(f32 ? kFastF32SmallGridTile : kHalfSmallGridTile);
  OrderTiles(p, task.target.sm_count, &tiles);
  const bool c_is_bias =
      p.source == Source::kBias || p.source == Source::kBiasPlusExtra || p.source == Source::kBiasMinusExtra;
  const std::string functor =
      EpilogueFunctorSource(p.dtype, p.align_c, p.source != Source::kNone, c_is_bias, p.epi, "linear");
  const std::string host = HostFunction(task, p);
  // Hopper's own kernels first where they apply (DICE_GEMM_SM90=1; gemm_sm90.cc), then the 2.x ones.
  std::vector<Candidate> out = GemmSm90Candidates(task, p, functor, max_candidates);
  for (const Tile& t : tiles) {
    if (static_cast<int>(out.size()) >= max_candidates) break;
    Candidate c;
    c.form = CandidateForm::kExtension;
    c.origin = std::string("template:gemm/") + (f32 ? "3xtf32/" : "tc/") + TileName(t) + "/s" + std::to_string(t.stages);
    c.reduced_precision = false;  // 3xTF32 keeps float32 accuracy; the verifier decides (issue 18)
    c.source = CutlassCandidateSource(c.origin,
                                      "linear + epilogue on CUTLASS 2.x device GEMM (generated by dice's gemm templates)",
                                      "#include <cutlass/gemm/device/gemm.h>\n", functor, GemmType(p, t), host);
    out.push_back(std::move(c));
  }
  return out;
}

bool HasContraction(const ir::Graph& graph) {
  for (const ir::Op& op : graph.ops)
    if (ir::GetOpInfo(op.kind).category == ir::OpCategory::kContraction) return true;
  return false;
}

}  // namespace dice::generator::tmpl
