// Implementation of dice/core/ir.h: dtypes, tensor specs, op table, canonical
// text, parser, hashing (validation and type/shape inference: ir_infer.cc).
#include "dice/core/ir.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "ir_internal.h"

namespace dice {
inline namespace core {
namespace ir {

// ---------------------------------------------------------------- dtypes ----

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "f32";
    case DType::kFloat16: return "f16";
    case DType::kBFloat16: return "bf16";
  }
  return "?";
}

Expected<DType> ParseDType(std::string_view text) {
  if (text == "f32" || text == "float32" || text == "float") return DType::kFloat32;
  if (text == "f16" || text == "float16" || text == "half") return DType::kFloat16;
  if (text == "bf16" || text == "bfloat16") return DType::kBFloat16;
  return Status(StatusCode::kInvalidArgument,
                "unknown dtype '" + std::string(text) + "' (expected f32, f16 or bf16)");
}

int64_t DTypeSize(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

DType PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  return DType::kFloat32;  // f32 wins; f16 with bf16 promotes to f32 as in torch
}

// ----------------------------------------------------------- TensorSpec ----

TensorSpec TensorSpec::Contiguous(DType dtype, std::vector<int64_t> shape) {
  TensorSpec s;
  s.dtype = dtype;
  s.strides.assign(shape.size(), 1);
  int64_t stride = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    s.strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  s.shape = std::move(shape);
  s.alignment = 16;
  return s;
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool TensorSpec::is_contiguous() const {
  int64_t expected = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

namespace detail {
std::string JoinInts(const std::vector<int64_t>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += std::to_string(v[i]);
  }
  return out;
}
}  // namespace detail
using detail::JoinInts;

std::string TensorSpec::ToString() const {
  std::string out = std::string(DTypeName(dtype)) + "[" + JoinInts(shape) + "]";
  if (!is_contiguous()) out += "{s=" + JoinInts(strides) + "}";
  if (alignment < 16) out += "@a" + std::to_string(alignment);
  return out;
}

bool TensorSpec::operator==(const TensorSpec& o) const {
  return dtype == o.dtype && shape == o.shape && strides == o.strides && alignment == o.alignment;
}

Expected<TensorSpec> ParseInputSpec(std::string_view text) {
  const std::string t(text);
  const size_t colon = t.rfind(':');
  if (colon == std::string::npos) {
    return Status(StatusCode::kInvalidArgument,
                  "input spec '" + t + "' has no ':dtype' (expected e.g. 1024x8192:f32)");
  }
  auto dtype = ParseDType(std::string_view(t).substr(colon + 1));
  if (!dtype.ok()) return dtype.status().WithContext("input spec '" + t + "'");
  std::vector<int64_t> shape;
  const std::string dims = t.substr(0, colon);
  if (dims != "scalar" && !dims.empty()) {
    size_t pos = 0;
    while (pos <= dims.size()) {
      size_t next = dims.find('x', pos);
      if (next == std::string::npos) next = dims.size();
      const std::string d = dims.substr(pos, next - pos);
      if (d.empty() || d.size() > 18 || !std::all_of(d.begin(), d.end(), ::isdigit)) {
        return Status(StatusCode::kInvalidArgument,
                      "input spec '" + t + "': dimension '" + d + "' is not a non-negative integer");
      }
      shape.push_back(std::stoll(d));
      pos = next + 1;
    }
  }
  if (shape.size() > 8) {
    return Status(StatusCode::kInvalidArgument, "input spec '" + t + "': rank above 8 is unsupported");
  }
  return TensorSpec::Contiguous(*dtype, std::move(shape));
}

// --------------------------------------------------------------- op table ----

namespace {
const OpInfo kOpTable[] = {
    {OpKind::kConstant, "const", OpCategory::kConstant, 0, 0, 1},
    {OpKind::kNeg, "neg", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kAbs, "abs", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kExp, "exp", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kLog, "log", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kSqrt, "sqrt", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kRsqrt, "rsqrt", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kReciprocal, "reciprocal", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kTanh, "tanh", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kSigmoid, "sigmoid", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kErf, "erf", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kRelu, "relu", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kGelu, "gelu", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kSilu, "silu", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kMish, "mish", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kSoftplus, "softplus", OpCategory::kUnary, 1, 1, 2},
    {OpKind::kSoftsign, "softsign", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kElu, "elu", OpCategory::kUnary, 1, 1, 3},
    {OpKind::kSelu, "selu", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kLeakyRelu, "leaky_relu", OpCategory::kUnary, 1, 1, 1},
    {OpKind::kClamp, "clamp", OpCategory::kUnary, 1, 1, 2},
    {OpKind::kHardswish, "hardswish", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kHardsigmoid, "hardsigmoid", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kPowScalar, "pow_scalar", OpCategory::kUnary, 1, 1, 1},
    {OpKind::kCast, "cast", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kAdd, "add", OpCategory::kBinary, 2, 2, 0},
    {OpKind::kSub, "sub", OpCategory::kBinary, 2, 2, 0},
    {OpKind::kMul, "mul", OpCategory::kBinary, 2, 2, 0},
    {OpKind::kDiv, "div", OpCategory::kBinary, 2, 2, 0},
    {OpKind::kMaximum, "maximum", OpCategory::kBinary, 2, 2, 0},
    {OpKind::kMinimum, "minimum", OpCategory::kBinary, 2, 2, 0},
    {OpKind::kPow, "pow", OpCategory::kBinary, 2, 2, 0},
    {OpKind::kSum, "sum", OpCategory::kReduction, 1, 1, 0},
    {OpKind::kMean, "mean", OpCategory::kReduction, 1, 1, 0},
    {OpKind::kAmax, "amax", OpCategory::kReduction, 1, 1, 0},
    {OpKind::kAmin, "amin", OpCategory::kReduction, 1, 1, 0},
    {OpKind::kLogSumExp, "logsumexp", OpCategory::kReduction, 1, 1, 0},
    {OpKind::kNorm, "norm", OpCategory::kReduction, 1, 1, 1},
    {OpKind::kSoftmax, "softmax", OpCategory::kNormalization, 1, 1, 0},
    {OpKind::kLogSoftmax, "log_softmax", OpCategory::kNormalization, 1, 1, 0},
    {OpKind::kLayerNorm, "layer_norm", OpCategory::kNormalization, 1, 3, 1},
    {OpKind::kGroupNorm, "group_norm", OpCategory::kNormalization, 1, 3, 1},
    {OpKind::kLinear, "linear", OpCategory::kContraction, 2, 3, 0},
    {OpKind::kConv2d, "conv2d", OpCategory::kContraction, 2, 3, 0},
    {OpKind::kContiguous, "contiguous", OpCategory::kUnary, 1, 1, 0},
    {OpKind::kAvgPool, "avg_pool", OpCategory::kPool, 1, 1, 0},
    {OpKind::kMaxPool, "max_pool", OpCategory::kPool, 1, 1, 0},
    {OpKind::kRotateHalf, "rotate_half", OpCategory::kRearrange, 1, 1, 0},
};
constexpr size_t kNumOps = sizeof(kOpTable) / sizeof(kOpTable[0]);
}  // namespace

const OpInfo& GetOpInfo(OpKind kind) {
  for (size_t i = 0; i < kNumOps; ++i) {
    if (kOpTable[i].kind == kind) return kOpTable[i];
  }
  static const OpInfo kUnknown{OpKind::kConstant, "?", OpCategory::kConstant, 0, 0, 0};
  return kUnknown;
}

Expected<OpKind> OpKindFromName(std::string_view name) {
  for (size_t i = 0; i < kNumOps; ++i) {
    if (name == kOpTable[i].name) return kOpTable[i].kind;
  }
  return Status(StatusCode::kInvalidArgument, "unknown op '" + std::string(name) + "'");
}

bool Op::operator==(const Op& o) const {
  if (kind != o.kind || args != o.args || dims != o.dims || keepdim != o.keepdim || ivalue != o.ivalue ||
      scalars.size() != o.scalars.size()) {
    return false;
  }
  for (size_t i = 0; i < scalars.size(); ++i) {
    const double a = scalars[i], b = o.scalars[i];
    if (!(a == b) && !(std::isnan(a) && std::isnan(b))) return false;
  }
  return true;
}

bool Graph::operator==(const Graph& o) const {
  return inputs == o.inputs && ops == o.ops && outputs == o.outputs;
}

// ------------------------------------------------------- canonical text ----

namespace {
std::string FormatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

Expected<double> ParseDouble(const std::string& s) {
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) {
    return Status(StatusCode::kInvalidArgument, "bad number '" + s + "'");
  }
  return v;
}
}  // namespace

std::string Canonical(const Graph& graph) {
  std::string out = "dice-ir v1\n";
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    out += "input %" + std::to_string(i) + " " + DTypeName(graph.inputs[i].dtype) + " rank=" +
           std::to_string(graph.inputs[i].rank) + "\n";
  }
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    out += "%" + std::to_string(graph.op_value(i)) + " = " + GetOpInfo(op.kind).name + "(";
    if (op.kind == OpKind::kConstant) {
      out += op.scalars.empty() ? "" : FormatDouble(op.scalars[0]);
    } else {
      for (size_t a = 0; a < op.args.size(); ++a) out += (a ? ", %" : "%") + std::to_string(op.args[a]);
    }
    out += ")";
    if (op.kind != OpKind::kConstant) {
      if (!op.dims.empty()) out += " dims=[" + JoinInts(op.dims) + "]";
      if (op.keepdim) out += " keepdim=1";
      if (op.ivalue != 0) out += " i=" + std::to_string(op.ivalue);
      if (!op.scalars.empty()) {
        out += " s=[";
        for (size_t k = 0; k < op.scalars.size(); ++k) out += (k ? "," : "") + FormatDouble(op.scalars[k]);
        out += "]";
      }
    }
    out += "\n";
  }
  out += "output";
  for (size_t k = 0; k < graph.outputs.size(); ++k) out += (k ? ", %" : " %") + std::to_string(graph.outputs[k]);
  out += "\n";
  return out;
}

namespace {
Status LineError(int line, const std::string& what) {
  return Status(StatusCode::kInvalidArgument, "IR line " + std::to_string(line) + ": " + what);
}

Expected<int32_t> ParseValueRef(const std::string& tok) {
  if (tok.size() < 2 || tok[0] != '%' || !std::all_of(tok.begin() + 1, tok.end(), ::isdigit) || tok.size() > 10) {
    return Status(StatusCode::kInvalidArgument, "bad value reference '" + tok + "'");
  }
  return static_cast<int32_t>(std::stol(tok.substr(1)));
}

std::vector<std::string> SplitList(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (!cur.empty() || !out.empty()) out.push_back(cur);
  return out;
}
}  // namespace

Expected<Graph> Parse(std::string_view text) {
  Graph g;
  std::istringstream in{std::string(text)};
  std::string line;
  int lineno = 0;
  bool saw_header = false, saw_output = false;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    if (saw_output) return LineError(lineno, "text after the output line");
    if (!saw_header) {
      if (line != "dice-ir v1") return LineError(lineno, "expected header 'dice-ir v1'");
      saw_header = true;
      continue;
    }
    if (line.rfind("input ", 0) == 0) {
      if (!g.ops.empty()) return LineError(lineno, "input after ops");
      char dt[16] = {0};
      int id = -1, rank = -1;
      if (std::sscanf(line.c_str(), "input %%%d %15s rank=%d", &id, dt, &rank) != 3) {
        return LineError(lineno, "malformed input declaration");
      }
      if (id != static_cast<int>(g.inputs.size())) return LineError(lineno, "inputs must be numbered in order");
      auto dtype = ParseDType(dt);
      if (!dtype.ok()) return LineError(lineno, dtype.status().message());
      g.inputs.push_back({*dtype, rank});
      continue;
    }
    if (line.rfind("output", 0) == 0) {
      for (const std::string& tok : SplitList(line.substr(6), ',')) {
        auto v = ParseValueRef(tok);
        if (!v.ok()) return LineError(lineno, v.status().message());
        g.outputs.push_back(*v);
      }
      saw_output = true;
      continue;
    }
    // %N = name(args) attrs
    const size_t eq = line.find(" = ");
    const size_t lp = line.find('(');
    const size_t rp = line.find(')');
    if (eq == std::string::npos || lp == std::string::npos || rp == std::string::npos || lp < eq || rp < lp) {
      return LineError(lineno, "malformed op line");
    }
    auto self = ParseValueRef(line.substr(0, eq));
    if (!self.ok()) return LineError(lineno, self.status().message());
    if (*self != g.num_values()) return LineError(lineno, "values must be numbered in order");
    auto kind = OpKindFromName(line.substr(eq + 3, lp - eq - 3));
    if (!kind.ok()) return LineError(lineno, kind.status().message());
    Op op;
    op.kind = *kind;
    const std::string inner = line.substr(lp + 1, rp - lp - 1);
    if (op.kind == OpKind::kConstant) {
      auto v = ParseDouble(inner);
      if (!v.ok()) return LineError(lineno, v.status().message());
      op.scalars.push_back(*v);
    } else if (!inner.empty()) {
      for (const std::string& tok : SplitList(inner, ',')) {
        auto v = ParseValueRef(tok);
        if (!v.ok()) return LineError(lineno, v.status().message());
        op.args.push_back(*v);
      }
    }
    std::istringstream attrs(line.substr(rp + 1));
    std::string attr;
    while (attrs >> attr) {
      const size_t e = attr.find('=');
      if (e == std::string::npos) return LineError(lineno, "malformed attribute '" + attr + "'");
      const std::string key = attr.substr(0, e), val = attr.substr(e + 1);
      try {
        if (key == "dims" || key == "s") {
          if (val.size() < 2 || val.front() != '[' || val.back() != ']') return LineError(lineno, "list expected for " + key);
          for (const std::string& item : SplitList(val.substr(1, val.size() - 2), ',')) {
            if (key == "dims") {
              if (item.empty() || !std::all_of(item.begin(), item.end(), ::isdigit) || item.size() > 2) return LineError(lineno, "bad dim '" + item + "'");
              op.dims.push_back(std::stoll(item));
            } else {
              auto v = ParseDouble(item);
              if (!v.ok()) return LineError(lineno, v.status().message());
              op.scalars.push_back(*v);
            }
          }
        } else if (key == "keepdim") {
          if (val != "1") return LineError(lineno, "keepdim must be 1 when present");
          op.keepdim = true;
        } else if (key == "i") {
          op.ivalue = std::stoll(val);
        } else {
          return LineError(lineno, "unknown attribute '" + key + "'");
        }
      } catch (const std::exception&) {
        return LineError(lineno, "bad attribute value '" + attr + "'");
      }
    }
    g.ops.push_back(std::move(op));
  }
  if (!saw_header) return Status(StatusCode::kInvalidArgument, "empty IR text");
  if (!saw_output) return Status(StatusCode::kInvalidArgument, "IR text has no output line");
  DICE_RETURN_IF_ERROR(Validate(g));
  return g;
}

std::string Sha256Hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

std::string GraphHash(const Graph& graph) { return Sha256Hex(Canonical(graph)); }

std::string Summary(const Graph& graph) {
  std::string out;
  for (const Op& op : graph.ops) {
    if (op.kind == OpKind::kConstant) continue;
    if (!out.empty()) out += "+";
    out += GetOpInfo(op.kind).name;
  }
  return out.empty() ? "identity" : out;
}

}  // namespace ir
}  // namespace core
}  // namespace dice
