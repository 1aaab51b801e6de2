// dice/generator/sdar_model.h — the SDAR decoder (Qwen3 architecture with
// block-causal attention) in LibTorch, with a KV cache for block diffusion.
//
// SDAR (the base of DICE, arXiv 2602.11715) is a Qwen3 decoder whose
// attention is block-causal: the sequence is cut into blocks of
// `block_size` tokens (4 in every released config) and a token attends to
// every token of all earlier blocks and to every token of its own block (in
// both directions), never to a later block. The layer stack is Hugging Face
// Qwen3's (modeling_qwen3.py), in its tensor names:
//   x = embed_tokens[ids]
//   per layer: a = RMSNorm(x); q,k,v = a W_q^T, a W_k^T, a W_v^T;
//              q,k = RMSNorm over head_dim (q_norm, k_norm); RoPE on q,k
//              (rotate-half form, inv_freq = rope_theta^(-2i/head_dim),
//              angles in float32); grouped-query attention (each KV head
//              serves heads/kv_heads query heads), scale 1/sqrt(head_dim);
//              x += o W_o^T; m = RMSNorm(x); x += (silu(m W_gate^T) *
//              (m W_up^T)) W_down^T
//   logits = RMSNorm(x) (lm_head or, when tied, embed_tokens)^T
// RMSNorm(x) = w * x / sqrt(mean(x^2) + rms_norm_eps), computed in float32
// and cast back, as Qwen3RMSNorm does. No biases (attention_bias false).
//
// Ownership and threads: an SdarModel owns its weights (copied out of the
// checkpoint's mapping onto the target device and dtype; the Checkpoint may
// be closed afterwards). Forward is const and may run concurrently on
// different KvCaches; a KvCache must not be shared between concurrent calls.
// All calls except ForwardPacked (training) run under torch::NoGradGuard.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dice/generator/checkpoint.h"
#include "dice/core/status.h"

namespace dice::generator {

class SdarFusedKernels;  // sdar_fused_kernels.h
class SdarServedGroups;  // sdar_served_groups.h

/// Where and in what precision the model computes.
struct SdarModelOptions {
  /// Device the weights live on and every forward runs on (CPU or cuda:N).
  torch::Device device = torch::kCPU;
  /// Compute dtype of weights and activations: kFloat32, kBFloat16 or
  /// kFloat16. Checkpoint tensors of another float dtype are converted on
  /// load. Norm statistics, RoPE angles and the returned logits are float32.
  torch::ScalarType dtype = torch::kFloat32;
  /// Run the Q/K/V projections as one GEMM and gate/up as one GEMM in
  /// forwards without autograd (Forward, the decoder, CUDA graphs; issue 19
  /// item 2). The weights are stored fused either way (per layer one
  /// [q+k+v, hidden] and one [2*intermediate, hidden] row-major matrix; the
  /// Hugging Face-named tensors of NamedWeights() are row-slice views of
  /// them), so this only picks the GEMMs. Forwards with autograd enabled
  /// (ForwardPacked in training) always use the per-projection views, the
  /// leaves the optimiser sees. f32 logits equal the unfused path within
  /// 1e-5 absolute on CPU (SdarFusedProjectionTest); greedy tokens equal.
  bool fuse_projections = true;
  /// On a CUDA device, run the layer's elementwise chains as fused kernels
  /// (sdar_fused_kernels.h: residual add + RMSNorm, q/k RMSNorm + RoPE,
  /// SiLU*up) compiled with NVRTC at load, in forwards without autograd.
  /// Needs fuse_projections. When the shape or dtype does not fit or the
  /// compile fails, the model loads anyway on the unfused path and
  /// SdarModel::fused_elementwise_note() (also printed to stderr) says why.
  /// Tolerance against the unfused path: sdar_fused_kernels.h.
  bool fuse_elementwise = true;
  /// Issue 19 item 1 (off by default until a GPU run has measured it): on
  /// a CUDA device with the fused elementwise kernels on, declare the
  /// decoder's fusion groups as dice IR (sdar_groups.h: residual add +
  /// RMSNorm, RMSNorm, SiLU*up) and serve them from dice's own templates
  /// and cache through the runtime's public serving API
  /// (sdar_served_groups.h; what a miss does follows DICE_MODE: cache,
  /// tune, tune-sync). A group is served at a row count only where its
  /// winner is measured faster than the hand-written kernel
  /// (sdar_fused_kernels.h) at load; elsewhere that kernel runs, with a
  /// message at load. DICE_SDAR_SERVE_GROUPS=1 turns it on without code
  /// (benchmarks); DICE_SDAR_SERVE_FORCE=1 serves every winner untimed.
  bool serve_groups = false;
  /// Token-row counts (batch x tokens of one forward) whose groups Load
  /// prepares (looks up or tunes); empty = {block_size}, the batch-1
  /// denoising step. SdarStepGraph prepares its own rows before capturing.
  std::vector<int64_t> serve_rows;
};

/// Keys and values of the committed prefix, per layer, for a batch of
/// sequences that share one length (the decoder batches n samples of one
/// prompt). Storage is preallocated to `capacity` positions: per layer
/// K and V of shape [batch, num_key_value_heads, capacity, head_dim] in the
/// model's dtype on its device. Positions [0, length) hold committed blocks;
/// an uncommitted forward writes its keys/values into the slots after
/// `length` as scratch and leaves `length` unchanged, so SDPA reads one view
/// without concatenation. Movable, not copyable (it can be gigabytes).
class KvCache {
 public:
  KvCache() = default;
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  /// Committed positions (a multiple of the model's block_size).
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t batch() const { return batch_; }
  /// Drops the committed prefix (length 0); storage is kept.
  void Clear() { length_ = 0; }
  /// Keeps only the rows `index` (int64 [n'], values in [0, batch)) of every
  /// layer's K/V: used to drop finished samples from a batch. Errors:
  /// kInvalidArgument for an index outside [0, batch) or not 1-D.
  Status SelectBatch(const torch::Tensor& index);

 private:
  friend class SdarModel;
  friend class SdarStepGraph;  // sdar_step_graph.h: replays write the same storage
  friend class DecodeSession;  // decode_session.h: caches that view storage kept across decodes
  std::vector<torch::Tensor> k_, v_;
  int64_t length_ = 0;
  int64_t capacity_ = 0;
  int64_t batch_ = 0;
};

/// SDAR's block-causal attention mask: bool [q_positions.numel(),
/// k_positions.numel()] where entry (i, j) is true (attend) iff
/// k_positions[j] / block_size <= q_positions[i] / block_size. Positions are
/// int64 1-D tensors on one device; the result lives there too. The
/// decoder's own forwards and dice::training's packed masks use this one
/// definition.
torch::Tensor BlockCausalMask(const torch::Tensor& q_positions, const torch::Tensor& k_positions,
                              int64_t block_size);

/// The SDAR/Qwen3 decoder. Movable, not copyable.
class SdarModel {
 public:
  /// Builds the model from an opened checkpoint: Checkpoint::Validate()
  /// (missing tensor / wrong shape errors name the file and tensor), then
  /// every tensor is copied to `options.device` in `options.dtype`.
  /// A tied config (tie_word_embeddings) uses model.embed_tokens.weight as
  /// the LM head and ignores any lm_head.weight.
  /// Errors: those of Validate; kInvalidArgument for a dtype other than
  /// f32/bf16/f16; kNoDevice when a CUDA device is asked for and none is
  /// present; kInternal naming the tensor when LibTorch fails (e.g. out of
  /// device memory).
  static Expected<SdarModel> Load(const Checkpoint& checkpoint, const SdarModelOptions& options = {});
  /// Checkpoint::Open(dir) then Load. Errors: those of Checkpoint::Open and Load.
  static Expected<SdarModel> Load(const std::string& dir, const SdarModelOptions& options = {});

  /// A model of `config` with random weights drawn on `options.device`
  /// (seeded: the same seed gives the same weights on a device): randn x
  /// 0.02 for embeddings and projections, 1 + randn x 0.02 for norm
  /// weights. For benchmarks and tests at real shapes without a checkpoint
  /// (issue 3: no weights can be downloaded). Errors: as Load (dtype,
  /// kNoDevice, kInternal for an allocation failure naming the tensor).
  static Expected<SdarModel> Random(const SdarConfig& config, const SdarModelOptions& options = {},
                                    uint64_t seed = 0);

  SdarModel(SdarModel&&) = default;
  SdarModel& operator=(SdarModel&&) = default;
  SdarModel(const SdarModel&) = delete;
  SdarModel& operator=(const SdarModel&) = delete;

  const SdarConfig& config() const { return config_; }
  const SdarModelOptions& options() const { return options_; }

  /// An empty cache for `batch` sequences of up to `capacity` positions
  /// (committed plus the one block being denoised). Errors:
  /// kInvalidArgument when batch < 1, capacity < 1 or capacity exceeds
  /// max_position_embeddings (the context length); kInternal when the
  /// allocation fails (message from LibTorch).
  Expected<KvCache> NewCache(int64_t batch, int64_t capacity) const;

  /// Runs the decoder over new tokens `ids` (integer tensor [B, L], any
  /// device; values in [0, vocab_size)) placed at positions
  /// P .. P+L-1 after the committed prefix, P = cache->length() (0 when
  /// `cache` is null). Attention is block-causal over prefix + new tokens:
  /// the new token at position p sees every cached position and every new
  /// position q with q / block_size <= p / block_size. When all L tokens lie
  /// in one block (the denoising step) no mask is built and SDPA may use its
  /// flash/efficient kernels.
  ///   cache == nullptr: a plain full-sequence forward (P = 0).
  ///   commit == false: the cache's committed length is unchanged.
  ///   commit == true: the new keys/values become part of the prefix
  ///     (length += L); REQUIRES L % block_size == 0 so committed prefixes
  ///     always end on a block boundary.
  /// Returns float32 logits [B, L, vocab_size] on the model's device, or an
  /// undefined tensor when `compute_logits` is false (a prefill or commit
  /// pass whose logits nobody reads skips the LM head).
  /// Errors (kInvalidArgument, naming the problem): ids not 2-D integer,
  /// L == 0, a token id outside [0, vocab_size), B != cache->batch(),
  /// P + L > cache->capacity(), commit with L not a multiple of block_size
  /// or with a null cache; kInternal when LibTorch throws (message kept).
  Expected<torch::Tensor> Forward(const torch::Tensor& ids, KvCache* cache = nullptr, bool commit = false,
                                  bool compute_logits = true) const;

  /// Training forward (used by dice::training; autograd stays enabled, no KV
  /// cache): runs the decoder over `ids` (integer [B, L]) whose token j sits
  /// at RoPE position `positions[j]` (int64 [L]) and attends to key j' iff
  /// `mask[j][j']` (bool [L, L], true = attend; every row needs one true).
  /// This is how block-diffusion training packs a noised copy of a sequence
  /// next to its clean copy (SDAR/BD3-LM style) and how TraceRL packs the
  /// rebuilt denoising states of a rollout. Returns float32 logits
  /// [B, L, vocab_size]; gradients reach the tensors of NamedWeights() when
  /// they require grad. L may exceed the context (copies share positions);
  /// the positions may not. Errors: kInvalidArgument for a bad ids tensor
  /// (as Forward), positions/mask of the wrong shape or dtype, or a position
  /// outside [0, max_position_embeddings); kInternal when LibTorch throws.
  Expected<torch::Tensor> ForwardPacked(const torch::Tensor& ids, const torch::Tensor& positions,
                                        const torch::Tensor& mask) const;

  /// The weights by Hugging Face tensor name, in SdarConfig::ExpectedTensors()
  /// order (a tied model lists model.embed_tokens.weight once and no
  /// lm_head.weight). The tensors share storage with the model: setting
  /// requires_grad on them, or updating them in place under NoGradGuard,
  /// trains the model (dice::training does both). Float tensors in
  /// options().dtype on options().device.
  std::vector<std::pair<std::string, torch::Tensor>> NamedWeights() const;

  /// True when no-grad forwards run the fused elementwise kernels
  /// (SdarModelOptions::fuse_elementwise took effect).
  bool fused_elementwise() const { return fused_ != nullptr; }
  /// Why the fused elementwise kernels are off ("" when on): the option was
  /// off, a CPU device, fuse_projections off, or the CheckFusedShape /
  /// NVRTC / driver error that made the model fall back.
  const std::string& fused_elementwise_note() const { return fused_note_; }
  /// The served fusion groups (SdarModelOptions::serve_groups), or null
  /// when serving is off or could not start (the reason went to stderr).
  SdarServedGroups* served_groups() const { return served_.get(); }

 private:
  struct Layer {
    // q_proj/k_proj/v_proj are row slices (views) of qkv_proj, gate_proj/
    // up_proj of gate_up_proj: one storage, so training the views trains the
    // fused matrices the inference GEMMs read.
    torch::Tensor input_norm, q_proj, k_proj, v_proj, o_proj, q_norm, k_norm, post_norm, gate_proj, up_proj,
        down_proj;
    torch::Tensor qkv_proj;      // [(heads + 2 kv_heads) * head_dim, hidden]
    torch::Tensor gate_up_proj;  // [2 * intermediate, hidden]
  };
  friend struct SdarDecodeAccess;  // diffusion_decoder.cc: forwards on ids it made itself
  friend class SdarStepGraph;      // sdar_step_graph.h: the fixed-shape (CUDA graph) step forward
  SdarModel() = default;
  // Fills the model from `get(name)` (a tensor of SdarConfig::ExpectedTensors'
  // shape, already on the device in the compute dtype) for every tensor.
  static Expected<SdarModel> Build(const SdarConfig& config, const SdarModelOptions& options,
                                   const std::function<Expected<torch::Tensor>(const std::string&)>& get);
  /// The host-side checks of Forward (shape, dtype, cache batch/capacity,
  /// commit rules); `check_ids` adds the token range check, which reads the
  /// ids back (a device synchronisation when they live on a GPU).
  /// `check_context` = false skips the cache-less length check (ForwardPacked
  /// checks its positions against the context instead).
  Status CheckForward(const torch::Tensor& ids, const KvCache* cache, bool commit, bool check_ids,
                      bool check_context = true) const;
  torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight) const;
  // Forward's body (checks done). The first `commit_len` of the L new tokens
  // become committed (cache length += commit_len; a multiple of block_size,
  // 0 = none): the decoder's merged commit passes [finished block ; next
  // block] with commit_len = block_size. `logit_rows` (int64 [B, m], values
  // in [0, L)), when defined, limits the LM head to those rows: the result
  // is then float32 [B, m, vocab_size], row j the logits of new token
  // logit_rows[b][j]. `positions`/`mask`: ForwardPacked's layout.
  torch::Tensor ForwardImpl(const torch::Tensor& ids, KvCache* cache, int64_t commit_len, bool compute_logits,
                            const torch::Tensor& logit_rows = {}, const torch::Tensor& positions = {},
                            const torch::Tensor& mask = {}) const;

  // The layer stack over embedded tokens x [B, L, hidden] with RoPE tables
  // cos/sin [L, head_dim] (model dtype) and an optional bool attention mask
  // [L, key_len] (none = every query sees every key). With a cache the new
  // keys/values are written into the cache's slots `start .. start+L-1`
  // (or, when `slots` is defined, the int64 device index [L] `slots`, which
  // needs no host value: the CUDA-graph form) and attention reads cache
  // positions [0, key_len). Returns the hidden states [B, L, hidden].
  // `split_kv`: the graph (slots) form's attention on the split-KV kernels
  // where they take the shape; SdarStepGraph, the only caller with slots,
  // passes DICE_SDAR_SPLIT_KV=1 or its measured choice; false: SDPA.
  torch::Tensor RunLayers(torch::Tensor x, const torch::Tensor& cos, const torch::Tensor& sin,
                          const std::optional<torch::Tensor>& mask, KvCache* cache, int64_t start,
                          const torch::Tensor& slots, int64_t key_len, bool split_kv = false) const;
  // Final RMSNorm + LM head over hidden states x [B, L, hidden]: float32
  // logits [B, L, vocab_size]; with `rows` (int64 [B, m], values in [0, L))
  // only at those rows, [B, m, vocab_size] (the LM head is the largest GEMM
  // of a batch-1 step: the decoder asks only for the still-masked rows).
  torch::Tensor LmHead(const torch::Tensor& x, const torch::Tensor& rows = {}) const;

  SdarConfig config_;
  SdarModelOptions options_;
  torch::Tensor embed_, final_norm_, lm_head_, inv_freq_;
  std::vector<Layer> layers_;
  std::shared_ptr<const SdarFusedKernels> fused_;  // null: the LibTorch elementwise path
  std::shared_ptr<SdarServedGroups> served_;       // null: no served groups (hand-written kernels)
  std::string fused_note_;
};

}  // namespace dice::generator
