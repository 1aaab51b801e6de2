// The SDAR decoder's fusion groups as IR: see dice/generator/sdar_groups.h.
// Torch-free.
#include "dice/generator/sdar_groups.h"

#include <utility>

#include "dice/core/ir_builder.h"

namespace dice::generator {
namespace {

using ir::DType;
using ir::OpKind;

// The IR builder plus the decoder's own pieces.
struct Builder : ir::GraphBuilder {
  int Cast(int v, DType to) { return Op(OpKind::kCast, {v}, {}, false, static_cast<int64_t>(to)); }
  // SdarModel::RmsNorm op by op: xf = x.float(); var = xf.pow(2).mean(-1,
  // keepdim); xf = xf * rsqrt(var + eps); w * xf.to(T).
  // `last`: the index of x's last dim (rank - 1).
  int RmsNorm(int x, int w, DType dt, double eps, int64_t last = 1) {
    const bool f32 = dt == DType::kFloat32;
    int xf = f32 ? x : Cast(x, DType::kFloat32);
    int sq = Op(OpKind::kPowScalar, {xf}, {}, false, 0, {2.0});
    int var = Op(OpKind::kMean, {sq}, {last}, true);
    int eps_c = Const(eps);
    int r = Op(OpKind::kRsqrt, {Op(OpKind::kAdd, {var, eps_c})});
    int n = Op(OpKind::kMul, {xf, r});
    return Op(OpKind::kMul, {w, f32 ? n : Cast(n, dt)});
  }
};

}  // namespace

const char* SdarGroupName(SdarGroup group) {
  switch (group) {
    case SdarGroup::kRmsNorm: return "rmsnorm";
    case SdarGroup::kAddRmsNorm: return "add_rmsnorm";
    case SdarGroup::kSiluMul: return "silu_mul";
    case SdarGroup::kQNormRope: return "qk_norm_rope.q";
    case SdarGroup::kKNormRope: return "qk_norm_rope.k";
  }
  return "unknown";
}

ir::Graph SdarGroupGraph(SdarGroup group, ir::DType dtype, double eps) {
  Builder b;
  switch (group) {
    case SdarGroup::kRmsNorm: {
      int x = b.Input(dtype, 2), w = b.Input(dtype, 1);
      b.g.outputs.push_back(b.RmsNorm(x, w, dtype, eps));
      break;
    }
    case SdarGroup::kAddRmsNorm: {
      int x = b.Input(dtype, 2), d = b.Input(dtype, 2), w = b.Input(dtype, 1);
      int s = b.Op(OpKind::kAdd, {x, d});
      int n = b.RmsNorm(s, w, dtype, eps);
      b.g.outputs = {s, n};
      break;
    }
    case SdarGroup::kSiluMul: {
      int gu = b.Input(dtype, 3), sel_gate = b.Input(dtype, 3), sel_up = b.Input(dtype, 3);
      int gate = b.Op(OpKind::kSum, {b.Op(OpKind::kMul, {gu, sel_gate})}, {1}, false);
      int up = b.Op(OpKind::kSum, {b.Op(OpKind::kMul, {gu, sel_up})}, {1}, false);
      b.g.outputs.push_back(b.Op(OpKind::kMul, {b.Op(OpKind::kSilu, {gate}), up}));
      break;
    }
    case SdarGroup::kQNormRope:
    case SdarGroup::kKNormRope: {
      // SdarModel::RunLayers' unfused path: q = RmsNorm(q, w); q * cos +
      // RotateHalf(q) * sin, every op in T.
      int x = b.Input(dtype, 3), w = b.Input(dtype, 1), cos = b.Input(dtype, 3), sin = b.Input(dtype, 3);
      int y = b.RmsNorm(x, w, dtype, eps, 2);
      int rotated = b.Op(OpKind::kMul, {b.Op(OpKind::kRotateHalf, {y}), sin});
      b.g.outputs.push_back(b.Op(OpKind::kAdd, {b.Op(OpKind::kMul, {y, cos}), rotated}));
      break;
    }
  }
  return std::move(b.g);
}

Expected<std::vector<SdarGroupDecl>> DeclareSdarGroups(const SdarConfig& config, ir::DType dtype, int64_t rows) {
  const int64_t hidden = config.hidden_size, inter = config.intermediate_size, hd = config.head_dim;
  const int64_t heads = config.num_attention_heads, kv_heads = config.num_key_value_heads;
  if (rows < 1 || hidden < 1 || inter < 1 || hd < 1 || heads < 1 || kv_heads < 1) {
    return Status(StatusCode::kInvalidArgument,
                  "DeclareSdarGroups: rows " + std::to_string(rows) + ", hidden_size " + std::to_string(hidden) +
                      ", intermediate_size " + std::to_string(inter) + ", head_dim " + std::to_string(hd) +
                      " and the head counts " + std::to_string(heads) + ", " + std::to_string(kv_heads) +
                      " must all be >= 1");
  }
  if (hd % 2 != 0) {
    return Status(StatusCode::kInvalidArgument,
                  "DeclareSdarGroups: head_dim " + std::to_string(hd) + " is odd (RoPE rotates its halves)");
  }
  auto spec = [&](std::vector<int64_t> shape) { return ir::TensorSpec::Contiguous(dtype, std::move(shape)); };
  std::vector<SdarGroupDecl> out;
  for (int i = 0; i < kNumSdarGroups; ++i) {
    SdarGroupDecl d;
    d.group = static_cast<SdarGroup>(i);
    d.name = SdarGroupName(d.group);
    d.graph = SdarGroupGraph(d.group, dtype, config.rms_norm_eps);
    d.ir_text = ir::Canonical(d.graph);
    switch (d.group) {
      case SdarGroup::kRmsNorm: d.inputs = {spec({rows, hidden}), spec({hidden})}; break;
      case SdarGroup::kAddRmsNorm: d.inputs = {spec({rows, hidden}), spec({rows, hidden}), spec({hidden})}; break;
      case SdarGroup::kSiluMul: d.inputs = {spec({rows, 2, inter}), spec({1, 2, 1}), spec({1, 2, 1})}; break;
      case SdarGroup::kQNormRope:
      case SdarGroup::kKNormRope: {
        const int64_t n = d.group == SdarGroup::kQNormRope ? heads : kv_heads;
        d.inputs = {spec({rows, n, hd}), spec({hd}), spec({rows, 1, hd}), spec({rows, 1, hd})};
        break;
      }
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace dice::generator
