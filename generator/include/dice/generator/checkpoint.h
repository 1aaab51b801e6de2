// dice/generator/checkpoint.h — torch-free loader for Hugging Face SDAR/DICE
// checkpoint directories.
//
// A checkpoint directory holds
//   config.json                      the SDAR (Qwen3 + block diffusion) shape
//   model.safetensors                all weights in one file, or
//   model.safetensors.index.json     {"weight_map": {tensor name -> shard file}}
//     + model-0000x-of-0000y.safetensors shards named by that index.
// Weight files are memory-mapped read-only (POSIX mmap); a TensorView points
// into the mapping, so it stays valid as long as the SafetensorsFile or
// Checkpoint that produced it is alive (moving the owner keeps it valid).
//
// The safetensors format (https://huggingface.co/docs/safetensors): 8 bytes
// little-endian u64 N, then N bytes of UTF-8 JSON header
//   {"name": {"dtype": "BF16", "shape": [d0, d1], "data_offsets": [begin, end]},
//    ..., "__metadata__": {string: string}}
// then the byte buffer; offsets are relative to the start of the buffer
// (byte 8 + N of the file), `end` exclusive, tensors row-major.
//
// This layer only reads and checks bytes; converting to torch tensors is the
// model's job. Thread-safety: all loaded objects are immutable; concurrent
// const calls are safe. Owners are movable, not copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dice/core/status.h"

namespace dice::generator {

/// Element type of a checkpoint tensor. Only the float types SDAR/DICE
/// checkpoints use are supported; any other safetensors dtype ("I64", "F64",
/// "F8_E4M3", ...) is rejected with kUnsupported when the file is opened.
enum class WeightDtype { kF32, kF16, kBF16 };

/// Safetensors spelling of a dtype: "F32", "F16", "BF16".
const char* WeightDtypeName(WeightDtype dtype);
/// Size of one element in bytes (4, 2, 2).
size_t WeightDtypeSize(WeightDtype dtype);

/// One tensor inside a mapped file: name, dtype, shape (row-major, element
/// counts; [] is a scalar) and `nbytes` = numel * WeightDtypeSize bytes at
/// `data`. `data` is not copied and may be only 1-byte aligned when a writer
/// did not pad the header (the reference writer pads to 8 bytes).
struct TensorView {
  std::string name;
  WeightDtype dtype = WeightDtype::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;

  /// Product of `shape` (1 for a scalar).
  int64_t numel() const;
};

/// A tensor the architecture requires: name and shape.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

/// The SDAR/Qwen3 fields of config.json the generator needs.
///
/// Required: hidden_size, num_hidden_layers, num_attention_heads,
/// num_key_value_heads, intermediate_size, vocab_size (JSON integers > 0).
/// Optional, with the default used when absent (null counts as absent):
///   head_dim                 hidden_size / num_attention_heads (must divide)
///   rope_theta               10000.0 (Qwen3Config's default)
///   rms_norm_eps             1e-6
///   tie_word_embeddings      false (Qwen3Config's default)
///   max_position_embeddings  32768
///   block_size               4 — SDAR's block diffusion block (tokens); the
///                            released SDAR/DICE configs all say 4
///   mask_token_id            151669 (`<|MASK|>` of the SDAR tokenizer)
struct SdarConfig {
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 32768;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  int64_t block_size = 4;
  int64_t mask_token_id = 151669;

  /// Parses config.json text. `source` names the file in error messages.
  /// Errors: kCorrupt for malformed JSON, a non-object document, or a field of
  /// the wrong JSON type (an integer field given as a float or string, a
  /// boolean given as a number); kInvalidArgument for a missing required
  /// field, a size <= 0, rope_theta or rms_norm_eps <= 0, num_attention_heads
  /// not a multiple of num_key_value_heads, hidden_size not divisible by the
  /// heads when head_dim is absent, or mask_token_id outside [0, vocab_size).
  /// Every message names `source` and the field.
  static Expected<SdarConfig> Parse(const std::string& json_text,
                                    const std::string& source = "config.json");

  /// Reads and parses the file at `path`. Errors: kNotFound when it does not
  /// exist, kIoError when it cannot be read, then as Parse.
  static Expected<SdarConfig> Load(const std::string& path);

  /// Every tensor of the Qwen3 decoder in Hugging Face naming, in this order:
  ///   model.embed_tokens.weight                       [vocab, hidden]
  ///   per layer i, prefix model.layers.{i}.:
  ///     input_layernorm.weight                        [hidden]
  ///     self_attn.q_proj.weight                       [heads*head_dim, hidden]
  ///     self_attn.k_proj.weight, self_attn.v_proj.weight [kv*head_dim, hidden]
  ///     self_attn.o_proj.weight                       [hidden, heads*head_dim]
  ///     self_attn.q_norm.weight, self_attn.k_norm.weight [head_dim]
  ///     post_attention_layernorm.weight               [hidden]
  ///     mlp.gate_proj.weight, mlp.up_proj.weight      [inter, hidden]
  ///     mlp.down_proj.weight                          [hidden, inter]
  ///   model.norm.weight                               [hidden]
  ///   lm_head.weight                                  [vocab, hidden], only
  ///                                                   when not tied
  /// i.e. 11 * layers + 2 (+1 untied) entries. No biases (attention_bias is
  /// false in every SDAR config).
  std::vector<TensorSpec> ExpectedTensors() const;
};

/// One memory-mapped .safetensors file with a validated header.
class SafetensorsFile {
 public:
  /// Maps `path` read-only and checks the header: file at least 8 bytes;
  /// header length within the file; header a JSON object whose entries
  /// (other than "__metadata__", which must be an object) each have a dtype
  /// string, a shape of non-negative integers and data_offsets [begin, end]
  /// with begin <= end <= buffer size; end - begin == numel * dtype size; no
  /// two non-empty tensors overlap. Gaps between tensors are tolerated.
  /// Errors: kNotFound (no such file), kIoError (open/fstat/mmap failed, errno
  /// text), kCorrupt (any check above, naming the file and the tensor; a
  /// truncated file shows up as a tensor whose end lies past the buffer),
  /// kUnsupported (a dtype other than F32/F16/BF16, naming file and tensor).
  static Expected<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  /// Tensor names in the header, sorted.
  std::vector<std::string> TensorNames() const;
  bool Contains(const std::string& name) const { return entries_.count(name) != 0; }
  /// "__metadata__" string entries (empty when absent; non-string values are
  /// kept as their JSON text).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  /// The tensor `name`. Errors: kNotFound naming the file and the tensor.
  Expected<TensorView> Get(const std::string& name) const;

 private:
  struct Entry {
    WeightDtype dtype;
    std::vector<int64_t> shape;
    size_t begin;  // byte offset into the mapping (file offset)
    size_t nbytes;
  };
  SafetensorsFile() = default;
  void Unmap();

  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

/// A whole checkpoint directory: config plus the weights of every shard.
class Checkpoint {
 public:
  /// Reads `dir`/config.json (SdarConfig::Load), then the weights:
  /// `dir`/model.safetensors when it exists (as transformers prefers it),
  /// else `dir`/model.safetensors.index.json, whose "weight_map" maps each
  /// tensor name to a shard file name in `dir`; each shard is opened once.
  /// Errors: those of SdarConfig::Load and SafetensorsFile::Open; kNotFound
  /// when neither weights file exists (naming both) or when the index names a
  /// shard that does not exist (naming the index, the shard and a tensor in
  /// it); kCorrupt for a malformed index (not JSON, no weight_map object, a
  /// non-string file name or one with a path separator) or when a shard lacks
  /// a tensor the index maps to it (naming shard and tensor).
  static Expected<Checkpoint> Open(const std::string& dir);

  Checkpoint(Checkpoint&&) = default;
  Checkpoint& operator=(Checkpoint&&) = default;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const std::string& dir() const { return dir_; }
  const SdarConfig& config() const { return config_; }
  /// All tensor names reachable (the index's weight_map, or the single file's
  /// header), sorted.
  std::vector<std::string> TensorNames() const;
  /// The file holding `name`, or "" when there is none.
  std::string FileOf(const std::string& name) const;

  /// The tensor `name`. Errors: kNotFound naming the checkpoint (directory or
  /// index file) and the tensor.
  Expected<TensorView> Get(const std::string& name) const;

  /// Checks every SdarConfig::ExpectedTensors() entry: present (kNotFound
  /// naming the tensor and where it was looked for) and of the expected shape
  /// (kCorrupt naming file, tensor, expected and actual shape). Dtypes are
  /// float by construction (Open rejects others). Extra tensors are allowed.
  /// Stops at the first problem.
  Status Validate() const;

 private:
  Checkpoint() = default;

  std::string dir_;
  std::string source_;  // "dir/model.safetensors" or "dir/model.safetensors.index.json"
  SdarConfig config_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

}  // namespace dice::generator
