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
#include "dice/core/status.h"
#include "dice/training/files.h"
#include "dice/training/model_init.h"

namespace dice::training {

/// Writes `model`'s weights to `out_dir`/model.safetensors in `dtype`
/// (kFloat32 or kBFloat16) and copies config.json and the tokenizer files
/// from `source_dir` (the checkpoint the run started from). Creates
/// `out_dir` (and parents). Errors: kInvalidArgument for another dtype;
/// kNotFound when source_dir has no config.json; kIoError naming the file
/// that could not be written or copied.
Status SaveCheckpoint(const generator::SdarModel& model, const std::string& source_dir, const std::string& out_dir,
                      torch::ScalarType dtype = torch::kFloat32);

}  // namespace dice::training
