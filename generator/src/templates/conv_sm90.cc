// conv_sm90.cc — the conv family's Hopper kernels (issue 18 item 2): conv2d +
// elementwise epilogue on CUTLASS 3.x's sm90 implicit-GEMM forward
// convolution (cutlass/conv/collective/collective_builder.hpp: TMA im2col
// loads of the NHWC activation, TMA loads of the KRSC filter, wgmma; the
// non-persistent KernelImplicitTmaWarpSpecializedSm90 schedule, the only one
// CUTLASS 4.2 builds for conv). The epilogue is an epilogue visitor tree
// (EVT, cutlass/epilogue/fusion/sm90_visitor_*.hpp): a compute node whose
// function is the group's generated DiceEpilogue::Apply(acc, c) per element
// (cutlass_epilogue.h), fed by the accumulator and, when the group has a
// source tensor, a per-channel row broadcast (bias, [K, 1, 1] extra) or the
// output-shaped source C (TMA). The CUTLASS 2.x generation (conv.cc) measured
// 0.63-0.68x of torch.compile on the H200 because cuDNN's channels_last
// conv is ~1.9x faster than its sm80 kernel (docs/PERF.md, session 16); these
// candidates are Hopper's own kernels. Off by default (DICE_CONV_SM90=1) until
// measured on a GPU (bench/conv_sm90_probe.py measures the kernel alone).
//
// Mapping: GEMM M = N*P*Q output pixels (mode (Q, P, N), innermost first), N
// = K output channels, K = C*R*S. dice_forward takes the tensors as the
// group gets them, converts x and the weight to channels_last on each call
// (ConvHostPrologue) and writes a channels_last output. Precision as in the
// 2.x kernels: float32 runs TF32 (reduced_precision), 16-bit types their
// tensor ops; 3xTF32 (DICE_STRICT_FP32=1) has no sm90 form, so none is offered.
#include <cstdlib>
#include <string>
#include <vector>

#include "conv_plan.h"

namespace dice::generator::tmpl {
namespace {

// Tiles: output pixels x output channels x a reduction slice of 128 bytes.
constexpr Sm90Tile kTf32Tiles[] = {{128, 128, 32, 1}, {128, 64, 32, 1}, {128, 128, 32, 2}};
constexpr Sm90Tile kHalfTiles[] = {{128, 128, 64, 1}, {128, 64, 64, 1}, {128, 128, 64, 2}};

bool PerChannelSource(const ConvPlan& p) { return p.source != Source::kNone && !p.extra_full; }
bool FullSource(const ConvPlan& p) { return p.source != Source::kNone && p.extra_full; }

// The kernel types: tile, EVT, collective epilogue and mainloop, kernel, adapter.
std::string KernelType(const ConvPlan& p, const Sm90Tile& t) {
  const std::string e = CutlassElement(p.dtype);
  const std::string aab = std::to_string(p.align_ab);
  const EvtSource src = PerChannelSource(p) ? EvtSource::kRow : FullSource(p) ? EvtSource::kFull : EvtSource::kNone;
  std::string s = Sm90EpilogueTypes(p.dtype, t, "cute::Shape<cute::Int<" + std::to_string(t.tk) + ">>", p.align_c, src, "cutlass::layout::TensorNHWC", "cutlass::epilogue::TmaWarpSpecialized");
  s += "using DiceCollectiveMainloop = typename cutlass::conv::collective::CollectiveBuilder<\n"
       "    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kFprop,\n";
  s += "    " + e + ", cutlass::layout::TensorNHWC, " + aab + ",  // A = x as NHWC\n";
  s += "    " + e + ", cutlass::layout::TensorNHWC, " + aab + ",  // B = weight as KRSC\n";
  s += "    float, DiceTileShape, DiceClusterShape,\n"
       "    cutlass::conv::collective::StageCountAutoCarveout<\n"
       "        static_cast<int>(sizeof(typename DiceCollectiveEpilogue::SharedStorage))>,\n"
       "    cutlass::conv::KernelImplicitTmaWarpSpecializedSm90>::CollectiveOp;\n";
  s += "using DiceProblemShape = cutlass::conv::ConvProblemShape<cutlass::conv::Operator::kFprop, 2>;\n";
  s += "using DiceConvKernel = cutlass::conv::kernel::ConvUniversal<DiceProblemShape, DiceCollectiveMainloop,\n"
       "                                                           DiceCollectiveEpilogue>;\n";
  s += "using DiceConv = cutlass::conv::device::ConvUniversalAdapter<DiceConvKernel>;\n";
  return s;
}

// dice_forward: the shared prologue, the source tensor, the sm90 arguments, the run.
std::string HostFunction(const Task& task, const ConvPlan& p) {
  const std::string x = In(p.x);
  std::string s = ConvHostPrologue(task, p);
  s += "  using E = DiceEpilogue::Element;\n";
  s += ConvSourceTensor(p);
  s += ConvSourceCheck(p);
  s += "  auto i32 = [](int64_t v) { return static_cast<int>(v); };\n";
  s += "  DiceProblemShape problem(cutlass::conv::Mode::kCrossCorrelation, {i32(N), i32(H), i32(W), i32(C)},\n"
       "                           {i32(K), i32(R), i32(S), i32(C)}, {i32(ph), i32(pw)}, {i32(ph), i32(pw)},\n"
       "                           {i32(sh), i32(sw)}, {i32(dh), i32(dw)}, 1);\n";
  s += "  DiceConv::Arguments args{};\n"
       "  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;\n"
       "  args.problem_shape = problem;\n"
       "  args.mainloop.ptr_A = static_cast<E const*>(xl.data_ptr());\n"
       "  args.mainloop.ptr_B = static_cast<E const*>(wl.data_ptr());\n";
  if (PerChannelSource(p)) {
    s += "  args.epilogue.thread = {{}, {static_cast<E const*>(csrc.data_ptr()), E(0), {}}, {}};  // acc, row, compute\n";
  } else if (FullSource(p)) {
    s += "  args.epilogue.thread = {{}, {}, {}};  // acc, C, compute\n";
  } else {
    s += "  args.epilogue.thread = {{}, {}};  // acc, compute\n";
  }
  s += "  // The output's M mode is (Q, P, N), innermost first; problem.stride_C is [n, p, q, k].\n"
       "  DiceConvKernel::StrideD d_out{};\n"
       "  cute::get<0, 0>(d_out) = problem.stride_C[2];\n"
       "  cute::get<0, 1>(d_out) = problem.stride_C[1];\n"
       "  cute::get<0, 2>(d_out) = problem.stride_C[0];\n";
  if (FullSource(p)) {
    s += "  DiceConvKernel::StrideC d_c{};\n"
         "  cute::get<0, 0>(d_c) = problem.stride_C[2];\n"
         "  cute::get<0, 1>(d_c) = problem.stride_C[1];\n"
         "  cute::get<0, 2>(d_c) = problem.stride_C[0];\n"
         "  args.epilogue.ptr_C = static_cast<E const*>(csrc.data_ptr());\n"
         "  args.epilogue.dC = d_c;\n";
  } else {
    s += "  args.epilogue.ptr_C = nullptr;\n";
  }
  s += "  args.epilogue.ptr_D = static_cast<E*>(out.data_ptr());\n"
       "  args.epilogue.dD = d_out;\n";
  s += "  args.hw_info = cutlass::KernelHardwareInfo::make_kernel_hardware_info<DiceConvKernel>(" + x +
       ".device().index());\n";
  s += CutlassRunSource("DiceConv", "conv", x);
  s += "  return out;\n}\n";
  return s;
}

}  // namespace

std::vector<Candidate> ConvSm90Candidates(const Task& task, const ConvPlan& p, const std::string& functor,
                                          int max_candidates) {
  std::vector<Candidate> out;
  const char* on = std::getenv("DICE_CONV_SM90");
  if (on == nullptr || std::string(on) != "1") return out;
  if (p.math == Math::kFastF32) return out;  // no sm90 3xTF32 conv
  if (!Sm90Fits(task.target.arch, p.dtype, p.align_ab, p.align_c)) return out;
  const std::string host = HostFunction(task, p);
  const bool tf32 = p.math == Math::kTf32;
  for (const Sm90Tile& t : tf32 ? ListOf(kTf32Tiles) : ListOf(kHalfTiles)) {
    if (static_cast<int>(out.size()) >= max_candidates) break;
    Candidate c;
    c.form = CandidateForm::kExtension;
    c.origin = std::string("template:conv/sm90-") + (tf32 ? "tf32/" : "tc/") + Sm90TileName(t);
    c.reduced_precision = tf32;
    c.source = CutlassCandidateSource(
        c.origin, "conv2d + epilogue on CUTLASS 3.x sm90 implicit-GEMM fprop (generated by dice's conv templates)",
        // wgmma and TMA: nvcc builds this source for sm_90a (extension_compiler.h NvccArch).
        "// dice-nvcc-arch-feature: a\n"
        "#include <cute/tensor.hpp>\n#include <cutlass/kernel_hardware_info.hpp>\n"
        "#include <cutlass/conv/convnd_problem_shape.hpp>\n#include <cutlass/conv/collective/collective_builder.hpp>\n"
        "#include <cutlass/epilogue/collective/collective_builder.hpp>\n#include <cutlass/conv/kernel/conv_universal.hpp>\n"
        "#include <cutlass/conv/device/conv_universal_adapter.hpp>\n",
        functor + EvtComputeFunctorSource(), KernelType(p, t), host);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace dice::generator::tmpl
