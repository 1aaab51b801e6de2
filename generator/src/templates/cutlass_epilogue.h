// cutlass_epilogue.h (private) — what the CUTLASS 2.x template families (gemm.cc:
// linear, conv.cc: conv2d) share: the generated epilogue output op that
// computes a group's elementwise DAG where the contraction stores its result,
// the analysis that builds that DAG, and small spellings (element types,
// access widths). Output of these functions is CUDA C++ text for nvcc
// (extension form, extension_compiler.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dice/core/ir.h"
#include "dice/core/status.h"
#include "lowering.h"

namespace dice::generator::tmpl {

/// The epilogue DAG after a contraction: Node 0 is a Load of the contraction's
/// value (input 0, spelled `acc` or `(acc + c)`), an optional Load of the
/// epilogue's source tensor element (input 1, `c`); `result` the node of the
/// group output; `heavy` when it has transcendental math (CUTLASS's kIsHeavy).
struct EpilogueDag {
  Lowered chain;
  int result = 0;
  bool heavy = false;
};

/// The index of the group's `contraction` op (linear, conv2d), checking the
/// shape the CUTLASS families serve: it is the first non-constant op, every
/// later op is a constant or elementwise (unary / binary; no second
/// contraction: "one <unit> per group"), and the last op's value is the only
/// output. Errors: kUnsupported naming the offending op, no family prefix.
Expected<size_t> FindEpilogueChain(const ir::Graph& g, ir::OpKind contraction, const std::string& unit);

/// Builds the epilogue DAG for the ops after op `contraction` of `g`, one node
/// per IR value (AppendEpilogueNodes, lowering.h). `extra` is the group input
/// the epilogue reads as the source tensor c (-1: none); `fold_op` (-1: none)
/// is an add/sub of the contraction's value and `extra` that the host computes
/// into c instead (FoldableOp): its value becomes the Load of input 0 and it
/// is skipped. The group's only output must be an op value of the DAG.
/// Errors: kUnsupported without a family prefix (AppendEpilogueNodes' reasons).
Status BuildEpilogueDag(const ir::Graph& g, size_t contraction, int extra, int fold_op, EpilogueDag* dag);

/// The op index of an add(L, E) / add(E, L) / sub(L, E) after op
/// `contraction` (L its value, E the group input `extra`) when L and E are
/// each read by that op only, so bias ± E can be summed on the host into one
/// source tensor; -1 otherwise. `*sign` receives +1 (add) or -1 (sub).
int FoldableOp(const ir::Graph& g, size_t contraction, int extra, int* sign);

/// The tensor a contraction family's kernel reads as CUTLASS's source C:
/// none, the contraction's bias, the one extra group input, or bias ± extra
/// summed on the host (FoldableOp).
enum class Source { kNone, kBias, kExtra, kBiasPlusExtra, kBiasMinusExtra };

/// The one group input the ops after op `contraction` read (-1: none).
/// Errors: kUnsupported, without a family prefix, when they read more than
/// one ("2 group inputs read after <what>; the epilogue reads one extra
/// tensor"); `what` names the contraction ("linear", "conv2d").
Expected<int> EpilogueExtraInput(const ir::Graph& g, size_t contraction, const std::string& what);

/// How C is formed from the contraction's `bias` and the epilogue's `extra`
/// input (group input indices, -1: none): `*source`, and `*fold_op` (the op
/// the host computes into C for bias ± extra, -1 otherwise). `extra_text`
/// describes the extra tensor (TensorSpec::ToString) for the error. Errors:
/// kUnsupported, without a family prefix, when bias and extra both feed the
/// epilogue and no FoldableOp folds them.
Status ChooseEpilogueSource(const ir::Graph& g, size_t contraction, int bias, int extra, const std::string& extra_text,
                            const std::string& what, Source* source, int* fold_op);

/// The epilogue output-op functor `struct DiceEpilogue`: CUTLASS's
/// LinearCombination interface (cutlass/epilogue/thread/linear_combination.h:
/// Params, is_source_needed, set_k_partition, operator() with and without the
/// source fragment), computing `dag` in float per element; Element is the
/// CUTLASS spelling of `dtype`, `count` the elements per access (kCount).
/// `has_c`: the kernel reads a source tensor; `c_is_bias`: c is added to acc
/// before the DAG (the contraction's bias, or bias ± extra). `what` names the
/// contraction in the generated comment ("linear").
std::string EpilogueFunctorSource(ir::DType dtype, int count, bool has_c, bool c_is_bias, const EpilogueDag& dag,
                                  const std::string& what);

/// The CUTLASS 3.x epilogue visitor tree's compute node over DiceEpilogue
/// (EpilogueFunctorSource, which must come first): `template <class T>
/// struct DiceEvtCompute`, applying DiceEpilogue::Apply(acc, c) in float per
/// element (c = 0 without a source), with the cutlass::Array<T, N> form the
/// visitor calls. Shared by the sm90 conv and gemm kernels (cutlass/epilogue/
/// fusion/sm90_visitor_compute_tma_warpspecialized.hpp's Sm90Compute).
std::string EvtComputeFunctorSource();

/// What an sm90 kernel's epilogue visitor tree reads besides the
/// accumulator: nothing, one row broadcast down M (a bias or per-column /
/// per-channel tensor), or the output-shaped source C.
enum class EvtSource { kNone, kRow, kFull };

/// An sm90 kernel's threadblock tile (M x N x K elements, K a 128-byte
/// slice) and its cluster size along M.
struct Sm90Tile {
  int tm, tn, tk, cm;
};

/// "<tm>x<tn>x<tk>", with "/c<cm>" for a cluster larger than 1: the tile part
/// of an sm90 candidate's origin.
std::string Sm90TileName(const Sm90Tile& t);

/// Whether the sm90 kernels (TMA + wgmma) serve a group for `arch`: sm_90
/// or sm_90a, with x / weight (`align_ab`) and source / output (`align_c`)
/// accessed 16 bytes at a time (TMA moves 16-byte-aligned rows) in `dtype`.
bool Sm90Fits(const std::string& arch, ir::DType dtype, int align_ab, int align_c);

/// The sm90 kernels' shared type aliases, as C++ text: DiceTileShape
/// (t.tm x t.tn x `tile_k`, the K mode spelled by the family: "cute::Int<64>" or
/// "cute::Shape<cute::Int<32>>"), DiceClusterShape (t.cm x 1 x 1), DiceFusion
/// (Sm90EVT of the DiceEvtCompute node over Sm90AccFetch and the `source`
/// fetch; elements of `dtype`, float compute, `align` elements per access)
/// and DiceCollectiveEpilogue (CUTLASS 3.x's epilogue CollectiveBuilder,
/// C and D in `layout`, `schedule` e.g. "cutlass::epilogue::TmaWarpSpecialized").
std::string Sm90EpilogueTypes(ir::DType dtype, const Sm90Tile& t, const std::string& tile_k, int align,
                              EvtSource source, const std::string& layout, const std::string& schedule);

/// dice_forward's CUTLASS run, as C++ statements: a `op_type family;` object,
/// can_implement, a workspace tensor (uint8, on `x`'s device) when
/// get_workspace_size asks for one, initialize and run on `stream`, each
/// status checked with TORCH_CHECK ("<family> candidate: CUTLASS run: ...").
/// Expects `args` and `stream` to be defined by the preceding code.
std::string CutlassRunSource(const std::string& op_type, const std::string& family, const std::string& x);

/// The whole source of one extension-form CUTLASS candidate: a comment line
/// "// <origin>: <what>", ATen's tensor and c10's CUDA headers (not
/// <torch/extension.h>: 30% less nvcc time) with `torch::` aliased to `at::`,
/// CUTLASS's common headers, the
/// family's `device_headers` (#include lines), the device prelude (emit.h),
/// then `functor`, `kernel_type` and `host` as given. Shared by the gemm and
/// conv families so their sources differ only where the families do.
std::string CutlassCandidateSource(const std::string& origin, const std::string& what,
                                   const std::string& device_headers, const std::string& functor,
                                   const std::string& kernel_type, const std::string& host);

/// The host headers of every extension-form template candidate (CUTLASS's
/// and gemm_lt's): ATen's tensor and at::empty, c10's CUDA guard and stream,
/// then `torch::` aliased to `at::` (with kUInt8), as #include/C++ text.
/// Not <torch/extension.h>: LibTorch's full headers cost nvcc 30% of a
/// build. No Tensor operators (ATen/TensorOperators.h): use the methods.
std::string AtenHostHeaders();

/// Whether `shape` is a per-column vector of an [..., n] output of rank
/// `out_rank`: [n], [1, n], [1, 1, n] ... (at most out_rank dims, all but the
/// last 1). Pure.
bool IsPerColumn(const std::vector<int64_t>& shape, int64_t n, size_t out_rank);

/// Largest of {max_elems, ..., 2, 1} dividing `extent` whose byte size
/// divides the pointer alignment `align_bytes` (elements of `elem_bytes`).
int AccessElems(int64_t extent, int64_t align_bytes, int64_t elem_bytes, int max_elems);

/// The elements of a constexpr list (tile configurations) as a vector, copied
/// one by one: vector::assign from such an array made GCC 12 warn -Wnonnull
/// about a memmove it could not prove non-empty.
template <typename T, size_t kN>
std::vector<T> ListOf(const T (&list)[kN]) {
  std::vector<T> v;
  v.reserve(kN);
  for (const T& t : list) v.push_back(t);
  return v;
}

/// "float", "cutlass::half_t", "cutlass::bfloat16_t".
const char* CutlassElement(ir::DType dt);
/// "torch::kFloat", "torch::kHalf", "torch::kBFloat16".
const char* TorchScalarType(ir::DType dt);
/// A C++ 64-bit literal: "16LL".
std::string I64(int64_t v);

}  // namespace dice::generator::tmpl
