// dice/training/checkpoint_io.h — writing SDAR checkpoints that the
// generator's loader (dice/generator/checkpoint.h, SdarModel::Load) reads,
// random initialisation of a small SDAR-architecture model, a byte-level
// tokenizer for tiny models, and the trainer's resume files.
//
// A checkpoint directory written here holds
//   config.json             copied from the run's source checkpoint (or
//                           written by InitRandomCheckpoint)
//   model.safetensors       every SdarModel::NamedWeights() tensor, F32 or
//                           BF16, header padded to 8 bytes
//   vocab.json, merges.txt, tokenizer_config.json, tokenizer.json,
//   added_tokens.json, special_tokens_map.json, generation_config.json
//                           copied from the source when present
// and, for `dice train` resume only,
//   optimizer.pt            torch::optim::AdamW state (torch::save)
//   trainer_state.json      {"step": N, "kind": "sft"|"rl", ...}
// Files are written to a temporary name and renamed, so a crash mid-save
// leaves the previous checkpoint intact.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "dice/generator/checkpoint.h"
#include "dice/generator/sdar_model.h"
#include "dice/runtime/status.h"

namespace dice::training {

/// Writes `model`'s weights to `out_dir`/model.safetensors in `dtype`
/// (kFloat32 or kBFloat16) and copies config.json and the tokenizer files
/// from `source_dir` (the checkpoint the run started from). Creates
/// `out_dir` (and parents). Errors: kInvalidArgument for another dtype;
/// kNotFound when source_dir has no config.json; kIoError naming the file
/// that could not be written or copied.
Status SaveCheckpoint(const SdarModel& model, const std::string& source_dir, const std::string& out_dir,
                      torch::ScalarType dtype = torch::kFloat32);

/// A config.json text for an SDAR-architecture model (Qwen3 fields plus
/// block_size and mask_token_id), tied embeddings.
std::string SdarConfigJson(const SdarConfig& config);

/// Writes a randomly initialised SDAR checkpoint of shape `config` to
/// `out_dir` (config.json + model.safetensors, F32): linear weights
/// N(0, 0.02^2) (Qwen3's initializer_range), norms 1. Deterministic in
/// `seed`. Errors: kInvalidArgument for a config that fails
/// SdarConfig::Parse's checks; kIoError naming a file that cannot be written.
Status InitRandomCheckpoint(const SdarConfig& config, const std::string& out_dir, uint64_t seed);

/// Writes a byte-level tokenizer for tiny models to `dir`: vocab.json with
/// the 256 GPT-2 byte-alphabet tokens (ids 0..255), empty merges.txt, and
/// tokenizer_config.json adding <|endoftext|> 256, <|im_start|> 257,
/// <|im_end|> 258, <|MASK|> 259 (so vocab_size >= 260, mask_token_id 259).
/// Loadable by dice::Tokenizer. Errors: kIoError naming the file.
Status WriteByteTokenizer(const std::string& dir);

/// Creates `dir` and its parents. Errors: kIoError with the errno text.
Status MakeDirs(const std::string& dir);

/// Writes `text` to `path` through a temporary file and rename.
/// Errors: kIoError naming the path.
Status WriteFileAtomic(const std::string& path, const std::string& text);

/// Reads a whole file. Errors: kNotFound / kIoError naming the path.
Expected<std::string> ReadFile(const std::string& path);

}  // namespace dice::training
