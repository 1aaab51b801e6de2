// gemm_sm90.cc — the gemm family's Hopper kernels (issue 18 item 1: "build
// the templates on CUTLASS 3.x / CuTe, Hopper wgmma + TMA"): bf16 / f16
// linear + elementwise epilogue on CUTLASS 3.x's GemmUniversal
// (cutlass/gemm/collective/collective_builder.hpp) with the TMA
// warp-specialized cooperative schedule: TMA loads of x (A, [M, K]
// row-major) and the weight (B, [N, K] = K x N column-major), wgmma with
// float accumulation. The epilogue is an epilogue visitor tree
// (cutlass/epilogue/fusion/sm90_visitor_*.hpp) as in the conv family's sm90
// kernels (conv_sm90.cc): a compute node running the group's generated
// DiceEpilogue::Apply(acc, c) per element, fed by the accumulator and the
// source — a row broadcast down M (linear's bias, a per-column extra tensor,
// or bias ± such an extra summed on the host) or the output-shaped tensor C
// (TMA). Why: the CUTLASS 2.x tensor-op kernels (sm80 instructions) ran a
// bf16 GPT-2 projection at 92.5 µs against cuBLAS's 50.2 µs on the H100
// (docs/DECISIONS.md, session 29); where cuBLASLt has no fused form of the
// epilogue (anything past bias, a residual add, relu and the tanh GELU),
// these are the candidates that can fuse it at Hopper speed. Off by default
// (DICE_GEMM_SM90=1) until measured on a GPU.
//
// Shape-generic like the 2.x sources: dice_forward reads M, N, K at run time
// and the adapter builds the TMA descriptors from them on each call; what
// is baked in is the configuration (dtype, epilogue, tile, cluster, source
// kind), so tasks differing only in M/N/K share one build.
#include <cstdlib>
#include <string>
#include <vector>

#include "gemm_plan.h"

namespace dice::generator::tmpl {
namespace {

// Tiles (K = 128 bytes of 16-bit elements). The cooperative schedule splits
// M between two consumer warpgroups, so the tile's M is 128 or more.
constexpr Sm90Tile kTiles[] = {{128, 128, 64, 1}, {128, 256, 64, 1}, {128, 128, 64, 2}};

// The kernel types: tile, EVT, collective epilogue and mainloop, kernel, adapter.
std::string KernelType(const GemmPlan& p, const Sm90Tile& t) {
  const std::string e = CutlassElement(p.dtype);
  const std::string ab = std::to_string(p.align_ab);
  const EvtSource src = RowSource(p) ? EvtSource::kRow : p.source != Source::kNone ? EvtSource::kFull : EvtSource::kNone;
  std::string s = Sm90EpilogueTypes(p.dtype, t, "cute::Int<" + std::to_string(t.tk) + ">", p.align_c, src,
                                    "cutlass::layout::RowMajor", "cutlass::epilogue::TmaWarpSpecializedCooperative");
  s += "using DiceCollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<\n"
       "    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,\n";
  s += "    " + e + ", cutlass::layout::RowMajor, " + ab + ",     // A = x [M, K]\n";
  s += "    " + e + ", cutlass::layout::ColumnMajor, " + ab + ",  // B = weight [N, K] as K x N\n";
  s += "    float, DiceTileShape, DiceClusterShape,\n"
       "    cutlass::gemm::collective::StageCountAutoCarveout<\n"
       "        static_cast<int>(sizeof(typename DiceCollectiveEpilogue::SharedStorage))>,\n"
       "    cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;\n";
  s += "using DiceGemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,\n"
       "                                                         DiceCollectiveMainloop, DiceCollectiveEpilogue>;\n";
  s += "using DiceGemm = cutlass::gemm::device::GemmUniversalAdapter<DiceGemmKernel>;\n";
  return s;
}

// dice_forward: the shared prologue (checks, out, csum), the sm90 arguments, the run.
std::string HostFunction(const Task& task, const GemmPlan& p) {
  const std::string x = "in" + std::to_string(p.x), w = "in" + std::to_string(p.w);
  const GemmHostPrologue pro = GemmPrologue(task, p);
  const bool full = p.source != Source::kNone && !RowSource(p);
  std::string s = pro.text;
  s += "  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);\n";
  s += "  DiceGemm::Arguments args{};\n"
       "  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;\n"
       "  args.problem_shape = {m, n, k, 1};\n"
       "  args.mainloop.ptr_A = static_cast<E const*>(" + x + ".data_ptr());\n"
       "  args.mainloop.dA = cutlass::make_cute_packed_stride(DiceGemmKernel::StrideA{}, {m, k, 1});\n"
       "  args.mainloop.ptr_B = static_cast<E const*>(" + w + ".data_ptr());\n"
       "  args.mainloop.dB = cutlass::make_cute_packed_stride(DiceGemmKernel::StrideB{}, {n, k, 1});\n";
  if (RowSource(p)) {
    s += "  args.epilogue.thread = {{}, {static_cast<E const*>(" + pro.c_ptr +
         "), E(0), {}}, {}};  // acc, row, compute\n";
  } else if (full) {
    s += "  args.epilogue.thread = {{}, {}, {}};  // acc, C, compute\n";
  } else {
    s += "  args.epilogue.thread = {{}, {}};  // acc, compute\n";
  }
  if (full) {
    s += "  args.epilogue.ptr_C = static_cast<E const*>(" + pro.c_ptr + ");\n"
         "  args.epilogue.dC = cutlass::make_cute_packed_stride(DiceGemmKernel::StrideC{}, {m, n, 1});\n";
  } else {
    s += "  args.epilogue.ptr_C = nullptr;\n";
  }
  s += "  args.epilogue.ptr_D = static_cast<E*>(out.data_ptr());\n"
       "  args.epilogue.dD = cutlass::make_cute_packed_stride(DiceGemmKernel::StrideD{}, {m, n, 1});\n";
  s += "  args.hw_info = cutlass::KernelHardwareInfo::make_kernel_hardware_info<DiceGemmKernel>(" + x +
       ".device().index());\n";
  s += CutlassRunSource("DiceGemm", "gemm", x);
  s += "  return out.view(out_sizes);\n}\n";
  return s;
}

}  // namespace

std::vector<Candidate> GemmSm90Candidates(const Task& task, const GemmPlan& p, const std::string& functor,
                                          int max_candidates) {
  std::vector<Candidate> out;
  const char* on = std::getenv("DICE_GEMM_SM90");
  if (on == nullptr || std::string(on) != "1") return out;
  if (p.dtype == ir::DType::kFloat32) return out;  // TF32 only: no float32-exact sm90 form
  if (!Sm90Fits(task.target.arch, p.dtype, p.align_ab, p.align_c)) return out;
  const std::string host = HostFunction(task, p);
  for (const Sm90Tile& t : ListOf(kTiles)) {
    if (static_cast<int>(out.size()) >= max_candidates) break;
    Candidate c;
    c.form = CandidateForm::kExtension;
    c.origin = "template:gemm/sm90-tc/" + Sm90TileName(t);
    c.reduced_precision = false;  // the 16-bit dtype's own tensor ops, float accumulation
    c.source = CutlassCandidateSource(
        c.origin, "linear + epilogue on CUTLASS 3.x sm90 GEMM (generated by dice's gemm templates)",
        // wgmma and TMA: nvcc builds this source for sm_90a (extension_compiler.h NvccArch).
        "// dice-nvcc-arch-feature: a\n"
        "#include <cute/tensor.hpp>\n#include <cutlass/kernel_hardware_info.hpp>\n"
        "#include <cutlass/gemm/collective/collective_builder.hpp>\n"
        "#include <cutlass/epilogue/collective/collective_builder.hpp>\n"
        "#include <cutlass/gemm/kernel/gemm_universal.hpp>\n#include <cutlass/gemm/device/gemm_universal_adapter.h>\n"
        "#include <cutlass/util/packed_stride.hpp>\n",
        functor + EvtComputeFunctorSource(), KernelType(p, t), host);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace dice::generator::tmpl
