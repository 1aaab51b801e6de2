// dice/training/model_init.h — a fresh SDAR-architecture model for
// training from scratch (no pretrained weights needed), and a byte-level
// tokenizer for tiny models. Torch-free interface (the implementation in
// checkpoint_io.cc uses LibTorch).
#pragma once

#include <cstdint>
#include <string>

#include "dice/generator/checkpoint.h"
#include "dice/core/status.h"

namespace dice::training {

/// A config.json text for an SDAR-architecture model (Qwen3 fields plus
/// block_size and mask_token_id), tied embeddings.
std::string SdarConfigJson(const generator::SdarConfig& config);

/// Writes a randomly initialised SDAR checkpoint of shape `config` to
/// `out_dir` (config.json + model.safetensors, F32): linear weights
/// N(0, 0.02^2) (Qwen3's initializer_range), norms 1. Deterministic in
/// `seed`. Errors: kInvalidArgument for a config that fails
/// SdarConfig::Parse's checks; kIoError naming a file that cannot be written.
Status InitRandomCheckpoint(const generator::SdarConfig& config, const std::string& out_dir, uint64_t seed);

/// Writes a byte-level tokenizer for tiny models to `dir`: vocab.json with
/// the 256 GPT-2 byte-alphabet tokens (ids 0..255), empty merges.txt, and
/// tokenizer_config.json adding <|endoftext|> 256, <|im_start|> 257,
/// <|im_end|> 258, <|MASK|> 259 (so vocab_size >= 260, mask_token_id 259).
/// Loadable by dice::generator::Tokenizer. Errors: kIoError naming the file.
Status WriteByteTokenizer(const std::string& dir);

}  // namespace dice::training
