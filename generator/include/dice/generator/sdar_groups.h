// dice/generator/sdar_groups.h — the SDAR decoder's elementwise chains as
// dice fusion-group IR (issue 19 item 1: "the runtime tunes its own
// generator"). Torch-free: the declarations only; serving them is
// sdar_served_groups.h.
//
// The decoder is hand-written LibTorch, so nothing traces it: these
// functions state its fusion groups in the IR (dice/core/ir.h) exactly as
// SdarModel's unfused path computes them op by op (sdar_model.h), so a
// template kernel verified against the IR's reference executor (DESIGN.md
// "Verification") computes what the decoder computes, and any user model
// with the same chain gets the same task key and winner. Groups, for T the
// compute dtype (f32, bf16 or f16) and R token rows (batch x tokens):
//   rmsnorm      x [R, hidden] T, w [hidden] T -> w * cast_T(cast_f32(x) *
//                rsqrt(mean(cast_f32(x)^2, -1) + eps))          [R, hidden] T
//   add_rmsnorm  x, d [R, hidden] T, w [hidden] T -> s = x + d (T) and
//                rmsnorm(s, w): two outputs, the residual sum first
//   silu_mul     gu [R, 2, inter] T (the fused gate/up GEMM's output
//                [R, 2 inter] viewed with gate columns first), sel_gate
//                [1, 2, 1] T = (1, 0), sel_up [1, 2, 1] T = (0, 1) ->
//                silu(sum(gu * sel_gate, 1)) * sum(gu * sel_up, 1)   [R, inter] T
//   qk_norm_rope x [R, n, head_dim] T (q or k heads of R token rows: n =
//                num_attention_heads for q, num_key_value_heads for k), w
//                [head_dim] T (q_norm / k_norm), cos, sin [R, 1, head_dim] T
//                (the RoPE tables of each row's position) -> y * cos +
//                rotate_half(y) * sin with y = rmsnorm(x, w) over head_dim
//                (f32 statistics as rmsnorm), each op rounded to T as the
//                unfused path's `q * cos + RotateHalf(q) * sin` [R, n, hd] T
// silu_mul picks the two halves with one-hot selector inputs because the IR
// has no slice op; g*1 + u*0 is exactly g for finite u (an Inf or NaN in the
// up half makes the gate half NaN too, where torch's narrow would not).
// qk_norm_rope is one IR applied at two shapes (q's and k's head counts), so
// it is declared twice: SdarGroup::kQNormRope and kKNormRope, the same graph.
// Its rotate_half is the IR op of that name (dice/core/ir.h), which the row
// template family pushes down to its loads. The hand-written QkNormRope also
// stores the new K/V into the KV cache; the served group does not (the
// decoder copies them, sdar_served_groups.h).
// Casts are part of each group (the f32 statistics and the rounding back to
// T), as in the unfused path; for T = f32 they are left out (identities).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dice/core/ir.h"
#include "dice/core/status.h"
#include "dice/generator/checkpoint.h"

namespace dice::generator {

/// The decoder's declared fusion groups.
enum class SdarGroup { kRmsNorm = 0, kAddRmsNorm = 1, kSiluMul = 2, kQNormRope = 3, kKNormRope = 4 };
inline constexpr int kNumSdarGroups = 5;

/// "rmsnorm", "add_rmsnorm", "silu_mul", "qk_norm_rope.q", "qk_norm_rope.k"
/// (static storage).
const char* SdarGroupName(SdarGroup group);

/// The IR of `group` for compute dtype `dtype` and RMSNorm epsilon `eps`
/// (> 0; unused by silu_mul), as the header comment states it. Valid by
/// ir::Validate. Shape-free: one graph for every row count (and, for
/// kQNormRope / kKNormRope, the same qk_norm_rope graph for both).
ir::Graph SdarGroupGraph(SdarGroup group, ir::DType dtype, double eps);

/// One declared group at concrete shapes.
struct SdarGroupDecl {
  SdarGroup group = SdarGroup::kRmsNorm;
  std::string name;                   ///< SdarGroupName
  ir::Graph graph;                    ///< SdarGroupGraph
  std::string ir_text;                ///< ir::Canonical(graph): what the serving API is handed
  std::vector<ir::TensorSpec> inputs; ///< contiguous, 16-byte aligned, in the graph's input order
};

/// Every group of one forward over `rows` token rows of model `config` in
/// `dtype` (one decl per SdarGroup, in its order), with the input specs of
/// the header comment (hidden = config.hidden_size, inter =
/// config.intermediate_size, eps = config.rms_norm_eps, n =
/// config.num_attention_heads for qk_norm_rope.q and num_key_value_heads for
/// qk_norm_rope.k, head_dim = config.head_dim). Errors: kInvalidArgument when
/// rows < 1, a size of `config` is < 1 or head_dim is odd (RoPE rotates
/// halves).
Expected<std::vector<SdarGroupDecl>> DeclareSdarGroups(const SdarConfig& config, ir::DType dtype, int64_t rows);

}  // namespace dice::generator
