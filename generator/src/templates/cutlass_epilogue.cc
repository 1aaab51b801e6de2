// cutlass_epilogue.cc — cutlass_epilogue.h: the generated epilogue output op
// and the epilogue DAG shared by the gemm and conv template families.
#include "cutlass_epilogue.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "emit.h"

namespace dice::generator::tmpl {
namespace {

using ir::OpKind;

bool IsHeavyOp(OpKind k) {
  switch (k) {
    case OpKind::kExp: case OpKind::kLog: case OpKind::kTanh: case OpKind::kSigmoid: case OpKind::kErf:
    case OpKind::kGelu: case OpKind::kSilu: case OpKind::kMish: case OpKind::kSoftplus: case OpKind::kElu:
    case OpKind::kSelu: case OpKind::kPow: case OpKind::kPowScalar:
      return true;
    default:
      return false;
  }
}

}  // namespace

int AccessElems(int64_t extent, int64_t align_bytes, int64_t elem_bytes, int max_elems) {
  for (int v = max_elems; v > 1; v /= 2) {
    if (extent % v == 0 && align_bytes % (v * elem_bytes) == 0) return v;
  }
  return 1;
}

int FoldableOp(const ir::Graph& g, size_t contraction, int extra, int* sign) {
  const int32_t L = g.op_value(contraction);
  int uses_l = 0, uses_e = 0, found = -1;
  for (size_t i = contraction + 1; i < g.ops.size(); ++i) {
    const ir::Op& op = g.ops[i];
    for (int32_t a : op.args) {
      uses_l += a == L;
      uses_e += a == extra;
    }
    if (op.args.size() == 2 && (op.kind == OpKind::kAdd || op.kind == OpKind::kSub)) {
      const bool le = op.args[0] == L && op.args[1] == extra;
      const bool el = op.args[0] == extra && op.args[1] == L;
      if (le || (el && op.kind == OpKind::kAdd)) {
        found = static_cast<int>(i);
        *sign = op.kind == OpKind::kSub ? -1 : 1;
      }
    }
  }
  return uses_l == 1 && uses_e == 1 ? found : -1;
}

// One node per IR value (an op reading a value twice, or two ops reading one
// value, share its node).
Status BuildEpilogueDag(const ir::Graph& g, size_t contraction, int extra, int fold_op, EpilogueDag* dag) {
  std::map<int32_t, int> node_of;  // value id -> node id
  auto add = [&](Node n) {
    dag->chain.nodes.push_back(std::move(n));
    return static_cast<int>(dag->chain.nodes.size()) - 1;
  };
  Node lin;
  lin.kind = NodeKind::kLoad;
  lin.input = 0;
  const int lin_node = add(lin);
  node_of[fold_op >= 0 ? g.op_value(fold_op) : g.op_value(contraction)] = lin_node;
  if (extra >= 0 && fold_op < 0) {
    Node c;
    c.kind = NodeKind::kLoad;
    c.input = 1;
    node_of[extra] = add(c);
  }
  std::vector<size_t> skip;
  if (fold_op >= 0) skip.push_back(static_cast<size_t>(fold_op));
  const Status st = AppendEpilogueNodes(g, contraction, skip, &node_of, &dag->chain);
  if (!st.ok()) return st;
  for (const Node& n : dag->chain.nodes) {
    const bool op_node = n.kind == NodeKind::kUnary || n.kind == NodeKind::kBinary;
    dag->heavy = dag->heavy || (op_node && IsHeavyOp(n.op));
  }
  dag->result = node_of.at(g.outputs[0]);
  return Status::Ok();
}

const char* CutlassElement(ir::DType dt) {
  switch (dt) {
    case ir::DType::kFloat32: return "float";
    case ir::DType::kFloat16: return "cutlass::half_t";
    case ir::DType::kBFloat16: return "cutlass::bfloat16_t";
  }
  return "float";
}

const char* TorchScalarType(ir::DType dt) {
  switch (dt) {
    case ir::DType::kFloat32: return "torch::kFloat";
    case ir::DType::kFloat16: return "torch::kHalf";
    case ir::DType::kBFloat16: return "torch::kBFloat16";
  }
  return "torch::kFloat";
}

std::string I64(int64_t v) { return std::to_string(v) + "LL"; }

// The group's epilogue in place of LinearCombination's alpha * acc + beta * c.
std::string EpilogueFunctorSource(ir::DType dtype, int count, bool has_c, bool c_is_bias, const EpilogueDag& dag,
                                  const std::string& what) {
  std::string body;
  EmitNodes(dag.chain, {dag.result},
            [&](int id) -> std::string {
              if (dag.chain.nodes[id].input == 1) return "c";
              return c_is_bias ? "(acc + c)" : "acc";
            },
            "    ", &body);
  std::string s;
  s += "// Epilogue output op generated from the group's elementwise chain (interface of\n"
       "// cutlass::epilogue::thread::LinearCombination). Per element, in float: the " + what + "\n"
       "// value, then the chain; `c` is the source tensor's element (0 without one).\n";
  s += "struct DiceEpilogue {\n";
  s += "  using Element = " + std::string(CutlassElement(dtype)) + ";\n";
  s += "  using ElementOutput = Element;\n  using ElementSource = Element;\n  using ElementC = Element;\n"
       "  using ElementD = Element;\n  using ElementAccumulator = float;\n  using ElementCompute = float;\n";
  s += "  static int const kCount = " + std::to_string(count) + ";\n";
  s += std::string("  static bool const kIsHeavy = ") + (dag.heavy ? "true" : "false") + ";\n";
  s += "  static cutlass::FloatRoundStyle const kRound = cutlass::FloatRoundStyle::round_to_nearest;\n"
       "  using FragmentOutput = cutlass::Array<ElementOutput, kCount>;\n"
       "  using FragmentSource = cutlass::Array<ElementSource, kCount>;\n"
       "  using FragmentAccumulator = cutlass::Array<ElementAccumulator, kCount>;\n"
       "  using FragmentCompute = cutlass::Array<ElementCompute, kCount>;\n"
       "  struct Params {\n    CUTLASS_HOST_DEVICE Params() {}\n  };\n"
       "  CUTLASS_HOST_DEVICE explicit DiceEpilogue(Params const&) {}\n"
       "  CUTLASS_HOST_DEVICE explicit DiceEpilogue(Params const&, int) {}\n";
  s += std::string("  CUTLASS_HOST_DEVICE bool is_source_needed() const { return ") + (has_c ? "true" : "false") +
       "; }\n";
  s += "  CUTLASS_HOST_DEVICE void set_k_partition(int, int) {}\n";
  s += "  CUTLASS_DEVICE static float Apply(float acc, float c) {\n";
  s += "    (void)c;\n" + body;
  s += "    return v" + std::to_string(dag.result) + ";\n  }\n";
  s += "  CUTLASS_DEVICE FragmentOutput operator()(FragmentAccumulator const& accum, FragmentSource const& source) const {\n"
       "    cutlass::NumericArrayConverter<ElementCompute, ElementSource, kCount, kRound> to_compute;\n"
       "    cutlass::NumericArrayConverter<ElementOutput, ElementCompute, kCount, kRound> to_output;\n"
       "    FragmentCompute c = to_compute(source);\n    FragmentCompute r;\n"
       "    CUTLASS_PRAGMA_UNROLL\n    for (int i = 0; i < kCount; ++i) r[i] = Apply(accum[i], c[i]);\n"
       "    return to_output(r);\n  }\n";
  s += "  CUTLASS_DEVICE FragmentOutput operator()(FragmentAccumulator const& accum) const {\n"
       "    cutlass::NumericArrayConverter<ElementOutput, ElementCompute, kCount, kRound> to_output;\n"
       "    FragmentCompute r;\n"
       "    CUTLASS_PRAGMA_UNROLL\n    for (int i = 0; i < kCount; ++i) r[i] = Apply(accum[i], 0.0f);\n"
       "    return to_output(r);\n  }\n";
  s += "};\n";
  return s;
}

Expected<size_t> FindEpilogueChain(const ir::Graph& g, ir::OpKind contraction, const std::string& unit) {
  auto refuse = [](const std::string& why) -> Status { return Status(StatusCode::kUnsupported, why); };
  const std::string name = ir::GetOpInfo(contraction).name;
  size_t index = g.ops.size();
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].kind == ir::OpKind::kConstant) continue;
    if (g.ops[i].kind != contraction) {
      return refuse("the first op must be " + name + ", got " + std::string(ir::GetOpInfo(g.ops[i].kind).name));
    }
    index = i;
    break;
  }
  if (index == g.ops.size()) return refuse("no " + name + " op");
  for (size_t i = index + 1; i < g.ops.size(); ++i) {
    const ir::OpCategory cat = ir::GetOpInfo(g.ops[i].kind).category;
    if (cat == ir::OpCategory::kContraction) {
      return refuse("a second contraction (op " + std::to_string(i) + "); one " + unit + " per group");
    }
    if (cat != ir::OpCategory::kConstant && cat != ir::OpCategory::kUnary && cat != ir::OpCategory::kBinary) {
      return refuse("op " + std::to_string(i) + " (" + ir::GetOpInfo(g.ops[i].kind).name + ") after " + name +
                    " is not elementwise (the epilogue computes one output element at a time)");
    }
  }
  if (g.outputs.size() != 1 || g.outputs[0] != g.op_value(g.ops.size() - 1)) {
    return refuse("the last op's value must be the only group output");
  }
  return index;
}

Expected<int> EpilogueExtraInput(const ir::Graph& g, size_t contraction, const std::string& what) {
  const int n_in = static_cast<int>(g.inputs.size());
  std::set<int32_t> extras;
  for (size_t i = contraction + 1; i < g.ops.size(); ++i)
    for (int32_t a : g.ops[i].args)
      if (a < n_in) extras.insert(a);
  if (extras.size() > 1) {
    return Status(StatusCode::kUnsupported, std::to_string(extras.size()) + " group inputs read after " + what +
                                                "; the epilogue reads one extra tensor");
  }
  return extras.empty() ? -1 : *extras.begin();
}

Status ChooseEpilogueSource(const ir::Graph& g, size_t contraction, int bias, int extra, const std::string& extra_text,
                            const std::string& what, Source* source, int* fold_op) {
  *fold_op = -1;
  *source = Source::kNone;
  if (bias >= 0 && extra >= 0 && extra != bias) {
    int sign = 1;
    *fold_op = FoldableOp(g, contraction, extra, &sign);
    if (*fold_op < 0) {
      return Status(StatusCode::kUnsupported,
                    what + "'s bias and the extra tensor " + extra_text +
                        " both feed the epilogue; supported only when the epilogue adds the extra tensor to (or "
                        "subtracts it from) " + what + "'s output directly and reads " + what + "'s output nowhere else");
    }
    *source = sign > 0 ? Source::kBiasPlusExtra : Source::kBiasMinusExtra;
  } else if (bias >= 0) {
    *source = Source::kBias;
  } else if (extra >= 0) {
    *source = Source::kExtra;
  }
  return Status::Ok();
}

std::string CutlassCandidateSource(const std::string& origin, const std::string& what,
                                   const std::string& device_headers, const std::string& functor,
                                   const std::string& kernel_type, const std::string& host) {
  std::string s = "// " + origin + ": " + what + "\n";
  // ATen's tensor and c10's CUDA headers, not <torch/extension.h>: the host
  // code needs only tensors, at::empty, TORCH_CHECK, the device guard and
  // the current stream, and LibTorch's full headers cost nvcc 30% of a
  // CUTLASS build (cudafe++, cicc and the host compiler all parse them): a
  // sm90 conv candidate 100 -> 70.5 s on 2 cores. The torch:: names the
  // templates use stay valid through the alias below (as torch/types.h does).
  s += AtenHostHeaders();
  s += "#include <cutlass/cutlass.h>\n#include <cutlass/array.h>\n#include <cutlass/numeric_conversion.h>\n";
  s += device_headers;
  s += Prelude();
  s += functor;
  s += kernel_type;
  s += host;
  return s;
}

std::string AtenHostHeaders() {
  return "#include <ATen/core/Tensor.h>\n#include <ATen/ops/empty.h>\n#include <c10/cuda/CUDAGuard.h>\n"
         "#include <c10/cuda/CUDAStream.h>\n"
         "namespace torch {\nusing namespace at;\nconstexpr auto kUInt8 = at::kByte;\n}  // namespace torch\n";
}

bool IsPerColumn(const std::vector<int64_t>& shape, int64_t n, size_t out_rank) {
  if (shape.empty() || shape.size() > out_rank || shape.back() != n) return false;
  for (size_t d = 0; d + 1 < shape.size(); ++d)
    if (shape[d] != 1) return false;
  return true;
}

std::string CutlassRunSource(const std::string& op_type, const std::string& family, const std::string& x) {
  const std::string who = "\"" + family + " candidate: CUTLASS ";
  std::string s;
  s += "  " + op_type + " " + family + ";\n";
  s += "  cutlass::Status status = " + family + ".can_implement(args);\n";
  s += "  TORCH_CHECK(status == cutlass::Status::kSuccess, " + who + "can_implement: \",\n"
       "              cutlassGetStatusString(status));\n";
  s += "  const size_t workspace_bytes = " + op_type + "::get_workspace_size(args);\n";
  s += "  torch::Tensor workspace;\n";
  s += "  if (workspace_bytes > 0) {\n"
       "    workspace = torch::empty({static_cast<int64_t>(workspace_bytes)}, " + x + ".options().dtype(torch::kUInt8));\n"
       "  }\n";
  s += "  status = " + family + ".initialize(args, workspace_bytes > 0 ? workspace.data_ptr() : nullptr, stream);\n";
  s += "  TORCH_CHECK(status == cutlass::Status::kSuccess, " + who + "initialize: \",\n"
       "              cutlassGetStatusString(status));\n";
  s += "  status = " + family + ".run(stream);\n";
  s += "  TORCH_CHECK(status == cutlass::Status::kSuccess, " + who + "run: \",\n"
       "              cutlassGetStatusString(status), \" (\", cudaGetErrorString(cudaGetLastError()), \")\");\n";
  return s;
}

std::string EvtComputeFunctorSource() {
  return "// The EVT compute node: the group's epilogue (DiceEpilogue::Apply) per element, in float.\n"
         "template <class T>\n"
         "struct DiceEvtCompute {\n"
         "  CUTLASS_DEVICE T operator()(T const& acc) const { return T(DiceEpilogue::Apply(float(acc), 0.0f)); }\n"
         "  CUTLASS_DEVICE T operator()(T const& acc, T const& c) const {\n"
         "    return T(DiceEpilogue::Apply(float(acc), float(c)));\n  }\n};\n"
         "template <class T, int N>\n"
         "struct DiceEvtCompute<cutlass::Array<T, N>> {\n"
         "  CUTLASS_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& acc) const {\n"
         "    cutlass::Array<T, N> r;\n    CUTLASS_PRAGMA_UNROLL\n"
         "    for (int i = 0; i < N; ++i) r[i] = T(DiceEpilogue::Apply(float(acc[i]), 0.0f));\n    return r;\n  }\n"
         "  CUTLASS_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& acc,\n"
         "                                                     cutlass::Array<T, N> const& c) const {\n"
         "    cutlass::Array<T, N> r;\n    CUTLASS_PRAGMA_UNROLL\n"
         "    for (int i = 0; i < N; ++i) r[i] = T(DiceEpilogue::Apply(float(acc[i]), float(c[i])));\n    return r;\n  }\n"
         "};\n";
}

std::string Sm90TileName(const Sm90Tile& t) {
  return std::to_string(t.tm) + "x" + std::to_string(t.tn) + "x" + std::to_string(t.tk) +
         (t.cm > 1 ? "/c" + std::to_string(t.cm) : "");
}

bool Sm90Fits(const std::string& arch, ir::DType dtype, int align_ab, int align_c) {
  if (arch != "sm_90" && arch != "sm_90a") return false;
  const int64_t esize = ir::DTypeSize(dtype);
  return align_ab * esize == 16 && align_c * esize == 16;
}

std::string Sm90EpilogueTypes(ir::DType dtype, const Sm90Tile& t, const std::string& tile_k, int align,
                              EvtSource source, const std::string& layout, const std::string& schedule) {
  const std::string e = CutlassElement(dtype), a = std::to_string(align);
  const std::string f = "cutlass::epilogue::fusion::";
  std::string s;
  s += "using DiceTileShape = cute::Shape<cute::Int<" + std::to_string(t.tm) + ">, cute::Int<" + std::to_string(t.tn) +
       ">, " + tile_k + ">;\n";
  s += "using DiceClusterShape = cute::Shape<cute::Int<" + std::to_string(t.cm) + ">, cute::_1, cute::_1>;\n";
  s += "using DiceFusion = " + f + "Sm90EVT<" + f + "Sm90Compute<DiceEvtCompute, " + e +
       ", float, cutlass::FloatRoundStyle::round_to_nearest>,\n    " + f + "Sm90AccFetch";
  if (source == EvtSource::kRow) {
    s += ", " + f + "Sm90RowBroadcast<0, DiceTileShape, " + e + ", float, cute::Stride<cute::_0, cute::_1, cute::_0>, " +
         a + ">";
  } else if (source == EvtSource::kFull) {
    s += ", " + f + "Sm90SrcFetch<" + e + ">";
  }
  s += ">;\n";
  s += "using DiceCollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<\n"
       "    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, DiceTileShape, DiceClusterShape,\n"
       "    cutlass::epilogue::collective::EpilogueTileAuto, float, float,\n";
  s += "    " + (source == EvtSource::kFull ? e : std::string("void")) + ", " + layout + ", " + a + ",  // C\n";
  s += "    " + e + ", " + layout + ", " + a + ",  // D\n";
  s += "    " + schedule + ", DiceFusion>::CollectiveOp;\n";
  return s;
}

}  // namespace dice::generator::tmpl
