// conv.cc — the conv template family (families.h, issue 18 item 2): a
// conv2d (F.conv2d, groups == 1) followed by an elementwise epilogue, as
// extension-form candidates on CUTLASS 2.x's implicit-GEMM forward
// convolution (cutlass/conv/kernel/default_conv2d_fprop.h +
// cutlass/conv/device/implicit_gemm_convolution.h, IteratorAlgorithm
// kOptimized, sm80 tensor-op kernels, which run on sm_90) whose epilogue
// output op is generated from the group (cutlass_epilogue.h, shared with the
// gemm family): the elementwise chain is computed where the conv stores its
// result, so the activation is written once instead of written, read and
// written again by a separate epilogue pass.
//
// Layouts: CUTLASS's fprop reads NHWC activations and KRSC filters and writes
// NHWC (NPQK) outputs. dice_forward takes the tensors as the group gets them
// (NCHW, contiguous or channels_last) and converts x and the weight with
// .contiguous(at::MemoryFormat::ChannelsLast) on every call (a no-op for a
// channels_last tensor, one copy otherwise; nothing is cached across calls),
// and writes the result into a channels_last output tensor.
// Implicit GEMM: M = N*P*Q, N_gemm = K, K_gemm = C*R*S.
// The epilogue's source tensor C (ElementC = the group's dtype):
//   - conv's own bias [K] (TensorNHWC stride 0: every output pixel reads the
//     same per-channel vector);
//   - else the one extra tensor the epilogue reads: per-channel ([K, 1, 1],
//     [1, K, 1, 1]; stride 0) or output-shaped [N, K, P, Q] (converted to
//     channels_last, a copy unless it already is);
//   - with both, bias ± extra summed by dice_forward with one torch op when
//     the epilogue adds the extra tensor to conv's output directly;
//   - none: CUTLASS's source-free path.
// Precision: f32 runs TF32 tensor ops (OpMultiplyAdd on float operands,
// which CUTLASS rounds to tfloat32, as cuDNN does under PyTorch's default
// torch.backends.cudnn.allow_tf32 = True for convolutions), marked
// reduced_precision; DICE_STRICT_FP32=1 gives 3xTF32 (OpMultiplyAddFastF32)
// instead, float32 accuracy. bf16/f16: OpMultiplyAdd, float accumulation.
// Shape-generic sources: N, H, W, C, K, R, S are read from the tensors at run
// time; the stride, padding and dilation are baked in as constants (they are
// the graph's attributes, so one graph has one set), as are dtype, epilogue,
// tile, stages, access widths (from C and K divisibility, checked at run
// time) and the source's kind, so tasks differing only in sizes get
// byte-identical sources and share one build (extension_compiler.h).
// On sm_90, conv_sm90.cc's CUTLASS 3.x candidates (DICE_CONV_SM90=1) come
// before these; both share conv_plan.h.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "conv_plan.h"
#include "cutlass_epilogue.h"
#include "dice/core/tensor_layout.h"
#include "emit.h"
#include "families.h"

namespace dice::generator::tmpl {
namespace {

using ir::OpKind;

// One CUTLASS tile configuration (threadblock, warp tile, stages), sizes from
// CUTLASS's sm80 conv2d fprop lists (cutlass_library/generator.py:
// GenerateSM80_TensorOp_1688 for tf32, GenerateSM80_TensorOp_16816 for f16/bf16).
struct Tile {
  int tm, tn, tk;
  int wm, wn, wk;
  int stages;
};

constexpr Tile kTf32Tiles[] = {
    {128, 128, 16, 64, 64, 16, 3},  // 4 warps
    {128, 64, 16, 64, 32, 16, 4},   // 4 warps
    {64, 64, 16, 32, 32, 16, 3},    // 4 warps (small grids)
};
constexpr Tile kHalfTiles[] = {
    {128, 128, 32, 64, 64, 32, 3},  // 4 warps
    {128, 64, 32, 64, 32, 32, 4},   // 4 warps
};

Status Unsupported(const std::string& why) { return Status(StatusCode::kUnsupported, "conv: " + why); }

// [K, 1, 1] or [1, K, 1, 1]: broadcast over an NCHW output, one value per channel.
bool IsPerChannel(const std::vector<int64_t>& shape, int64_t K) {
  if (shape.size() < 3 || shape.size() > 4) return false;
  const size_t c = shape.size() - 3;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d != c && shape[d] != 1) return false;
  }
  return shape[c] == K;
}

bool DenseNchwOrNhwc(const ir::TensorSpec& s) {
  const TensorLayout l = ClassifyLayout(s);
  return l == TensorLayout::kContiguous || l == TensorLayout::kChannelsLast;
}

// Checks conv's operands and fills dtype, sizes, attributes, x/w/bias.
Status AnalyzeConv(const Task& task, const ir::Op& conv, ConvPlan* p) {
  const int n_in = static_cast<int>(task.graph.inputs.size());
  for (int32_t a : conv.args) {
    if (a >= n_in) return Unsupported("conv2d's operands must be group inputs (x, weight[, bias]), got %" + std::to_string(a));
  }
  if (conv.ivalue != 1) {
    return Unsupported("groups = " + std::to_string(conv.ivalue) +
                       " (grouped / depthwise conv); the CUTLASS optimized fprop candidates serve groups == 1 only");
  }
  p->x = conv.args[0];
  p->w = conv.args[1];
  p->bias = conv.args.size() > 2 ? conv.args[2] : -1;
  p->attrs = conv.dims;
  const ir::TensorSpec& x = task.inputs[p->x];
  const ir::TensorSpec& w = task.inputs[p->w];
  p->dtype = x.dtype;
  p->N = x.shape[0], p->C = x.shape[1], p->H = x.shape[2], p->W = x.shape[3];
  p->K = w.shape[0], p->R = w.shape[2], p->S = w.shape[3];
  const ir::TensorSpec& out = task.outputs[0];
  p->P = out.shape.size() == 4 ? out.shape[2] : 0;
  p->Q = out.shape.size() == 4 ? out.shape[3] : 0;
  if (p->N == 0 || p->C == 0 || p->K == 0 || p->P == 0 || p->Q == 0) return Unsupported("empty convolution");
  if (p->R > 32 || p->S > 32) {
    return Unsupported("filter " + std::to_string(p->R) + "x" + std::to_string(p->S) +
                       " exceeds 32 along R or S (the optimized iterator's filter mask)");
  }
  const int64_t esize = ir::DTypeSize(p->dtype);
  const int64_t k2g = int64_t{1} << 31;
  if (x.numel() * esize >= k2g || w.numel() * esize >= k2g || p->N * p->K * p->P * p->Q * esize >= k2g) {
    return Unsupported("a tensor of 2 GiB or more (CUTLASS's conv iterators use 32-bit offsets)");
  }
  for (size_t i = 0; i < task.inputs.size(); ++i) {
    const ir::TensorSpec& s = task.inputs[i];
    if (s.dtype != p->dtype) return Unsupported("inputs of mixed dtypes (" + s.ToString() + " vs " + x.ToString() + ")");
    const bool four_d = static_cast<int>(i) == p->x || static_cast<int>(i) == p->w || s.shape.size() == 4;
    if (four_d ? !DenseNchwOrNhwc(s) : !s.is_contiguous()) {
      return Unsupported("input " + std::to_string(i) + " " + s.ToString() + " is neither contiguous nor channels_last");
    }
  }
  return Status::Ok();
}

// Validates the group and builds the plan (see the file comment).
Expected<ConvPlan> Analyze(const Task& task) {
  const ir::Graph& g = task.graph;
  auto conv_index = FindEpilogueChain(g, OpKind::kConv2d, "conv");
  if (!conv_index.ok()) return Unsupported(conv_index.status().message());
  const size_t ci = *conv_index;
  ConvPlan p;
  DICE_RETURN_IF_ERROR(AnalyzeConv(task, g.ops[ci], &p));
  const ir::TensorSpec& out = task.outputs[0];
  if (out.shape != std::vector<int64_t>{p.N, p.K, p.P, p.Q}) {
    return Unsupported("the output " + out.ToString() + " is not conv2d's shape (the chain broadcasts it)");
  }
  if (out.dtype != p.dtype) return Unsupported("the output dtype differs from conv2d's");
  auto extra = EpilogueExtraInput(g, ci, "conv2d");
  if (!extra.ok()) return Unsupported(extra.status().message());
  int64_t c_align_bytes = 16;  // the output and any tensor dice_forward makes are fresh allocations
  if (*extra >= 0) {
    p.extra = *extra;
    const ir::TensorSpec& e = task.inputs[p.extra];
    p.extra_full = e.shape == out.shape;
    if (!p.extra_full && !IsPerChannel(e.shape, p.K)) {
      return Unsupported("the extra tensor " + e.ToString() + " is neither per-channel ([K, 1, 1] or [1, K, 1, 1]) nor "
                         "output-shaped " + out.ToString());
    }
    if (!p.extra_full || ClassifyLayout(e) == TensorLayout::kChannelsLast) c_align_bytes = e.alignment;
  }
  int fold_op = -1;
  const Status source = ChooseEpilogueSource(g, ci, p.bias, p.extra, p.extra >= 0 ? task.inputs[p.extra].ToString() : "",
                                             "conv2d", &p.source, &fold_op);
  if (!source.ok()) return Unsupported(source.message());
  if (p.source == Source::kBiasPlusExtra || p.source == Source::kBiasMinusExtra) {
    c_align_bytes = 16;
  } else if (p.source == Source::kBias) {
    c_align_bytes = task.inputs[p.bias].alignment;
  }
  const int64_t esize = ir::DTypeSize(p.dtype);
  const int max_elems = static_cast<int>(16 / esize);
  auto operand_align = [&](int i) {  // a channels_last operand is used in place, a contiguous one is copied
    return ClassifyLayout(task.inputs[i]) == TensorLayout::kChannelsLast ? task.inputs[i].alignment : int64_t{16};
  };
  p.align_ab = AccessElems(p.C, std::min(operand_align(p.x), operand_align(p.w)), esize, max_elems);
  p.align_c = AccessElems(p.K, c_align_bytes, esize, max_elems);
  if (esize == 2 && (p.align_ab < 2 || p.align_c < 2)) {
    return Unsupported("16-bit tensor-op kernels need C and K even and 4-byte aligned data (C=" + std::to_string(p.C) +
                       ", K=" + std::to_string(p.K) + ")");
  }
  if (p.dtype == ir::DType::kFloat32) {
    const char* strict = std::getenv("DICE_STRICT_FP32");
    p.math = strict != nullptr && std::string(strict) == "1" ? Math::kFastF32 : Math::kTf32;
  } else {
    p.math = Math::kHalf;
  }
  const Status chain = BuildEpilogueDag(g, ci, p.extra, fold_op, &p.epi);
  if (!chain.ok()) return Unsupported(chain.message());
  return p;
}

// The DefaultConv2dFprop / ImplicitGemmConvolution instantiation for `t`.
std::string ConvType(const ConvPlan& p, const Tile& t) {
  const std::string e = CutlassElement(p.dtype);
  auto shape = [](int a, int b, int c) {
    return "cutlass::gemm::GemmShape<" + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c) + ">";
  };
  const char* math = p.math == Math::kFastF32 ? "cutlass::arch::OpMultiplyAddFastF32" : "cutlass::arch::OpMultiplyAdd";
  const std::string nhwc = "cutlass::layout::TensorNHWC";
  std::string s = "using DiceConvKernel = cutlass::conv::kernel::DefaultConv2dFprop<\n";
  s += "    " + e + ", " + nhwc + ",  // A = x as NHWC\n";
  s += "    " + e + ", " + nhwc + ",  // B = weight as KRSC\n";
  s += "    " + e + ", " + nhwc + ",  // C, D = NPQK\n";
  s += "    float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,\n";
  s += "    " + shape(t.tm, t.tn, t.tk) + ", " + shape(t.wm, t.wn, t.wk) + ", " +
       (p.dtype == ir::DType::kFloat32 ? shape(16, 8, 8) : shape(16, 8, 16)) + ",\n";
  s += "    DiceEpilogue, cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<4>, " + std::to_string(t.stages) + ",\n";
  s += "    " + std::string(math) + ", cutlass::conv::IteratorAlgorithm::kOptimized, cutlass::conv::StrideSupport::kUnity,\n";
  s += "    " + std::to_string(p.align_ab) + ", " + std::to_string(p.align_ab) + ">::Kernel;\n";
  s += "using DiceConv = cutlass::conv::device::ImplicitGemmConvolution<DiceConvKernel>;\n";
  return s;
}

// dice_forward's size checks: N, C, H, W, K, R, S from the tensors, P and Q
// from the baked attributes; what the configuration was built for (groups 1,
// the access widths along C and K, the extra tensor's kind) with a clear message.
std::string ShapeChecks(const ConvPlan& p) {
  const std::string x = In(p.x), w = In(p.w);
  const auto& a = p.attrs;
  std::string s;
  s += "  TORCH_CHECK(" + x + ".dim() == 4 && " + w + ".dim() == 4, \"conv candidate: x (" + x + ") and weight (" + w +
       ") must be 4-d, got \", " + x + ".sizes(), \" and \", " + w + ".sizes());\n";
  s += "  const int64_t N = " + x + ".size(0), C = " + x + ".size(1), H = " + x + ".size(2), W = " + x + ".size(3);\n";
  s += "  const int64_t K = " + w + ".size(0), R = " + w + ".size(2), S = " + w + ".size(3);\n";
  s += "  TORCH_CHECK(" + w + ".size(1) == C, \"conv candidate: built for groups == 1: weight (" + w + ") is \", " + w +
       ".sizes(), \", x has C=\", C);\n";
  s += "  // stride, padding, dilation: the graph's conv2d attributes\n";
  s += "  constexpr int64_t sh = " + I64(a[0]) + ", sw = " + I64(a[1]) + ", ph = " + I64(a[2]) + ", pw = " + I64(a[3]) +
       ", dh = " + I64(a[4]) + ", dw = " + I64(a[5]) + ";\n";
  s += "  const int64_t P = (H + 2 * ph - dh * (R - 1) - 1) / sh + 1, Q = (W + 2 * pw - dw * (S - 1) - 1) / sw + 1;\n";
  s += "  TORCH_CHECK(N > 0 && C > 0 && K > 0 && H + 2 * ph >= dh * (R - 1) + 1 && W + 2 * pw >= dw * (S - 1) + 1,\n"
       "              \"conv candidate: empty convolution (x \", " + x + ".sizes(), \", weight \", " + w + ".sizes(), \")\");\n";
  s += "  TORCH_CHECK(C % " + std::to_string(p.align_ab) + " == 0 && K % " + std::to_string(p.align_c) +
       " == 0, \"conv candidate: built for " + std::to_string(p.align_ab) + "-element accesses along C and " +
       std::to_string(p.align_c) + " along K, got C=\", C, \" K=\", K, \" (another alignment class)\");\n";
  if (p.bias >= 0) {
    const std::string b = In(p.bias);
    s += "  TORCH_CHECK(" + b + ".dim() == 1 && " + b + ".size(0) == K, \"conv candidate: bias (" + b +
         ") must be [K] = [\", K, \"], got \", " + b + ".sizes());\n";
  }
  if (p.extra >= 0 && p.extra != p.bias) {
    const std::string e = In(p.extra);
    if (p.extra_full) {
      s += "  TORCH_CHECK(" + e + ".dim() == 4 && " + e + ".size(0) == N && " + e + ".size(1) == K && " + e +
           ".size(2) == P && " + e + ".size(3) == Q, \"conv candidate: the extra tensor (" + e +
           ") must be output-shaped [\", N, \", \", K, \", \", P, \", \", Q, \"], got \", " + e + ".sizes());\n";
    } else {
      s += "  TORCH_CHECK(" + e + ".dim() >= 3 && " + e + ".numel() == K && " + e + ".size(-3) == K, \"conv candidate: the "
           "extra tensor (" + e + ") must be per-channel ([K, 1, 1] or [1, K, 1, 1]; K=\", K, \"), got \", " + e +
           ".sizes());\n";
    }
  }
  return s;
}

// The 2.x kernel's view of the source tensor C (ConvSourceTensor): its
// pointer and layout (stride 0 = per-channel vector).
std::string SourceLayout(const ConvPlan& p) {
  const bool per_channel = p.source != Source::kNone && !p.extra_full;
  std::string s = "  const Layout c_layout = ";
  s += per_channel ? "Layout(Layout::Stride(0));\n" : "out_layout;\n";
  s += ConvSourceCheck(p);
  s += "  E* c_ptr = static_cast<E*>(csrc.defined() ? csrc.data_ptr() : out.data_ptr());\n";
  return s;
}

// dice_forward for the CUTLASS 2.x kernel: ConvHostPrologue, the NHWC
// layouts, the source tensor, the CUTLASS run.
std::string HostFunction(const Task& task, const ConvPlan& p) {
  std::string s = ConvHostPrologue(task, p);
  s += "  using E = DiceEpilogue::Element;\n  using Layout = cutlass::layout::TensorNHWC;\n";
  s += "  const Layout x_layout = Layout::packed({static_cast<int>(N), static_cast<int>(H), static_cast<int>(W), static_cast<int>(C)});\n";
  s += "  const Layout w_layout = Layout::packed({static_cast<int>(K), static_cast<int>(R), static_cast<int>(S), static_cast<int>(C)});\n";
  s += "  const Layout out_layout = Layout::packed({static_cast<int>(N), static_cast<int>(P), static_cast<int>(Q), static_cast<int>(K)});\n";
  s += ConvSourceTensor(p);
  s += SourceLayout(p);
  s += "  cutlass::conv::Conv2dProblemSize problem(\n"
       "      static_cast<int>(N), static_cast<int>(H), static_cast<int>(W), static_cast<int>(C), static_cast<int>(K),\n"
       "      static_cast<int>(R), static_cast<int>(S), static_cast<int>(P), static_cast<int>(Q), static_cast<int>(ph),\n"
       "      static_cast<int>(pw), static_cast<int>(sh), static_cast<int>(sw), static_cast<int>(dh), static_cast<int>(dw),\n"
       "      cutlass::conv::Mode::kCrossCorrelation, 1, 1);\n";
  s += "  DiceConv::Arguments args(problem, {static_cast<E*>(xl.data_ptr()), x_layout},\n"
       "                           {static_cast<E*>(wl.data_ptr()), w_layout}, {c_ptr, c_layout},\n"
       "                           {static_cast<E*>(out.data_ptr()), out_layout}, DiceEpilogue::Params());\n";
  s += CutlassRunSource("DiceConv", "conv", In(p.x));
  s += "  return out;\n}\n";
  return s;
}

std::string TileName(const Tile& t) {
  return std::to_string(t.tm) + "x" + std::to_string(t.tn) + "x" + std::to_string(t.tk);
}

// CTAs of the implicit GEMM (M = N*P*Q rows, K columns) per SM, capped at one
// wave: small outputs rank the small tile first, large ones the large tiles.
double WaveFill(const ConvPlan& p, const Tile& t, int sm_count) {
  const int64_t m = p.N * p.P * p.Q;
  const int64_t ctas = ((m + t.tm - 1) / t.tm) * ((p.K + t.tn - 1) / t.tn);
  return std::min(1.0, static_cast<double>(ctas) / std::max(sm_count, 1));
}

}  // namespace

std::string ConvHostPrologue(const Task& task, const ConvPlan& p) {
  const int64_t esize = ir::DTypeSize(p.dtype);
  std::string sig, checks;
  for (size_t i = 0; i < task.inputs.size(); ++i) {
    sig += (i ? ", " : "") + std::string("torch::Tensor ") + In(static_cast<int>(i));
    checks += "  dice_conv_check(" + In(static_cast<int>(i)) + ", \"" + In(static_cast<int>(i)) + "\", 1, " + In(p.x) +
              ".device());\n";
  }
  const std::string x = In(p.x), w = In(p.w);
  const std::string ab = I64(p.align_ab * esize);
  std::string s;
  s += "#include <climits>\n#include <vector>\n\n";
  s += "// Throws (TORCH_CHECK) unless `t` is a CUDA tensor of the task's dtype on `device`\n"
       "// whose data pointer is a multiple of `align_bytes`.\n";
  s += "static void dice_conv_check(const torch::Tensor& t, const char* what, int64_t align_bytes,\n"
       "                            const c10::Device& device) {\n"
       "  TORCH_CHECK(t.is_cuda(), \"conv candidate: \", what, \" must be a CUDA tensor, got \", t.device());\n"
       "  TORCH_CHECK(t.device() == device, \"conv candidate: \", what, \" is on \", t.device(), \", x on \", device);\n"
       "  TORCH_CHECK(t.scalar_type() == " + std::string(TorchScalarType(p.dtype)) +
       ", \"conv candidate: \", what, \" must be " + ir::DTypeName(p.dtype) + ", got \", t.scalar_type());\n"
       "  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % align_bytes == 0, \"conv candidate: \", what,\n"
       "              \" is not \", align_bytes, \"-byte aligned\");\n}\n\n";
  s += "// out [N, K, P, Q] = epilogue(conv2d(x [N, C, H, W], weight [K, C, R, S][, bias [K]])), groups 1.\n"
       "// Takes NCHW tensors of any of the two dense layouts; x and the weight are made channels_last\n"
       "// on every call (no-op when they are). Returns a channels_last-strided NCHW tensor: the caller\n"
       "// must accept any strides. Runs on the current CUDA stream of x's device.\n";
  s += "torch::Tensor dice_forward(" + sig + ") {\n";
  s += checks;
  s += ShapeChecks(p);
  s += "  TORCH_CHECK(N <= INT_MAX && H <= INT_MAX && W <= INT_MAX && P <= INT_MAX && Q <= INT_MAX,\n"
       "              \"conv candidate: a size exceeds 2^31 - 1\");\n";
  s += "  const c10::cuda::CUDAGuard guard(" + x + ".device());\n";
  s += "  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(" + x + ".device().index()).stream();\n";
  s += "  torch::Tensor xl = " + x + ".contiguous(at::MemoryFormat::ChannelsLast);  // NHWC\n";
  s += "  torch::Tensor wl = " + w + ".contiguous(at::MemoryFormat::ChannelsLast);  // KRSC\n";
  s += "  dice_conv_check(xl, \"x as NHWC\", " + ab + ", " + x + ".device());\n";
  s += "  dice_conv_check(wl, \"weight as KRSC\", " + ab + ", " + x + ".device());\n";
  s += "  torch::Tensor out = torch::empty({N, K, P, Q}, " + x + ".options().memory_format(at::MemoryFormat::ChannelsLast));\n";
  return s;
}

std::string ConvSourceTensor(const ConvPlan& p) {
  const char* cl = "at::MemoryFormat::ChannelsLast";
  std::string s = "  torch::Tensor csrc;  // the epilogue's source tensor (undefined: none)\n";
  const std::string b = p.bias >= 0 ? In(p.bias) : "", e = p.extra >= 0 ? In(p.extra) : "";
  switch (p.source) {
    case Source::kNone: break;
    case Source::kBias: s += "  csrc = " + b + ".contiguous();\n"; break;
    case Source::kExtra:
      s += p.extra_full ? "  csrc = " + e + ".contiguous(" + cl + ");  // NPQK (a copy unless channels_last)\n"
                        : "  csrc = " + e + ".reshape({K}).contiguous();\n";
      break;
    case Source::kBiasPlusExtra:
    case Source::kBiasMinusExtra: {
      // Tensor methods, not operator+/- (ATen/TensorOperators.h is not included).
      const bool plus = p.source == Source::kBiasPlusExtra;
      const std::string method = plus ? ".add(" : ".sub(";
      s += "  // conv2d's bias and the extra tensor, summed once: C = bias " + std::string(plus ? "+" : "-") + " extra.\n";
      s += p.extra_full ? "  csrc = " + b + ".view({1, K, 1, 1})" + method + e + ").contiguous(" + cl + ");\n"
                        : "  csrc = " + b + method + e + ".reshape({K})).contiguous();\n";
      break;
    }
  }
  return s;
}

std::string ConvSourceCheck(const ConvPlan& p) {
  if (p.source == Source::kNone) return "";
  return "  dice_conv_check(csrc, \"the epilogue's source tensor\", " + I64(p.align_c * ir::DTypeSize(p.dtype)) + ", " +
         In(p.x) + ".device());\n";
}

Expected<std::vector<Candidate>> ConvCandidates(const Task& task, int max_candidates) {
  auto plan = Analyze(task);
  if (!plan.ok()) return plan.status();
  const ConvPlan& p = *plan;
  std::vector<Tile> tiles = p.math == Math::kHalf ? ListOf(kHalfTiles) : ListOf(kTf32Tiles);
  std::stable_sort(tiles.begin(), tiles.end(), [&](const Tile& a, const Tile& b) {
    return WaveFill(p, a, task.target.sm_count) > WaveFill(p, b, task.target.sm_count);
  });
  const bool c_is_bias =
      p.source == Source::kBias || p.source == Source::kBiasPlusExtra || p.source == Source::kBiasMinusExtra;
  const std::string functor =
      EpilogueFunctorSource(p.dtype, p.align_c, p.source != Source::kNone, c_is_bias, p.epi, "conv2d");
  const std::string host = HostFunction(task, p);
  const char* math = p.math == Math::kTf32 ? "tf32/" : p.math == Math::kFastF32 ? "3xtf32/" : "tc/";
  // Hopper's own kernels first where they apply (DICE_CONV_SM90=1; conv_sm90.cc), then the 2.x ones.
  std::vector<Candidate> out = ConvSm90Candidates(task, p, functor, max_candidates);
  for (const Tile& t : tiles) {
    if (static_cast<int>(out.size()) >= max_candidates) break;
    Candidate c;
    c.form = CandidateForm::kExtension;
    c.origin = std::string("template:conv/") + math + TileName(t) + "/s" + std::to_string(t.stages);
    // TF32 rounds the operands to 10 mantissa bits (as cuDNN does under PyTorch's
    // default allow_tf32 for convs); 3xTF32 and the 16-bit kernels keep the dtype's accuracy.
    c.reduced_precision = p.math == Math::kTf32;
    c.source = CutlassCandidateSource(
        c.origin, "conv2d + epilogue on CUTLASS 2.x implicit-GEMM fprop (generated by dice's conv templates)",
        "#include <cutlass/conv/kernel/default_conv2d_fprop.h>\n#include <cutlass/conv/device/implicit_gemm_convolution.h>\n",
        functor, ConvType(p, t), host);
    out.push_back(std::move(c));
  }
  return out;
}

bool HasConv(const ir::Graph& graph) {
  for (const ir::Op& op : graph.ops)
    if (op.kind == ir::OpKind::kConv2d) return true;
  return false;
}

}  // namespace dice::generator::tmpl
