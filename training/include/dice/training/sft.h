// dice/training/sft.h — `dice train sft`: supervised fine-tuning of an SDAR
// checkpoint on CuKe examples with the block-diffusion masked-token loss
// (dice/training/losses.h; DICE arXiv 2602.11715 / SDAR).
//
// Optimiser: torch::optim::AdamW over SdarModel::NamedWeights() (float32
// master weights). Learning rate: linear warm-up from 0 over warmup_steps,
// then cosine decay to lr * min_lr_ratio at `steps`. Gradient accumulation
// over grad_accum micro-batches of batch_size examples; gradients clipped to
// grad_clip (global L2 norm). On CUDA the forward runs under autocast to
// bfloat16 (weights stay float32); on the CPU everything is float32.
// Checkpoints (dice/training/checkpoint_io.h) are written every save_every
// steps and at the end to out_dir, with optimizer.pt and trainer_state.json
// so `resume` continues the same run (same step, schedule and data order).
// Only examples of split "train" (or without a split) are used: the held-out
// split is never trained on.
//
// Data parallel (dice/training/distributed.h): launched as WORLD_SIZE
// processes with the torchrun variables, each rank takes batch_size
// examples of a global micro-batch of batch_size * WORLD_SIZE (rank r the
// r-th slice), with noise drawn per example from (seed, global index); the
// loss is normalised by the global micro-batch's response tokens and the
// gradients are averaged over ranks before clipping and the AdamW step. So N
// ranks at batch B follow 1 rank at batch N * B up to float summation
// order. Rank 0 alone prints progress, writes the CSV and checkpoints; the
// logged loss and tokens/s are over all ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dice/core/status.h"

namespace dice::training {

struct SftOptions {
  std::string model_dir;       ///< checkpoint to start from (config, weights, tokenizer)
  std::string data_path;       ///< CuKe JSONL (examples.h)
  std::string out_dir;         ///< where checkpoints go
  std::string resume_dir;      ///< a checkpoint written by a previous run (with optimizer.pt); "" = fresh
  std::string templates_path;  ///< prompt templates JSON (PromptTemplates::Load); "" = built-in wording
  std::string csv_path;        ///< per-step CSV; "" = out_dir/sft_log.csv
  std::string device = "cpu";  ///< "cpu" or "cuda[:N]"
  int64_t steps = 100;         ///< optimiser steps
  int64_t batch_size = 4;      ///< examples per micro-batch
  int64_t grad_accum = 1;      ///< micro-batches per optimiser step
  int64_t max_length = 2048;   ///< tokens per example (prompt + answer + EOS); longer answers are cut
  int64_t warmup_steps = 10;
  int64_t save_every = 0;      ///< 0 = only at the end
  double lr = 1e-4;
  double min_lr_ratio = 0.1;
  double weight_decay = 0.0;
  double grad_clip = 1.0;      ///< <= 0 = off
  uint64_t seed = 0;
  bool bf16 = true;            ///< CUDA only: autocast to bfloat16
  int64_t dist_timeout_s = 60;         ///< data parallel: rendezvous timeout, seconds
  int64_t collective_timeout_s = 1800; ///< data parallel: wait for the other ranks per collective, seconds
};

struct SftReport {
  std::vector<double> losses;  ///< per optimiser step (mean over its micro-batches)
  int64_t first_step = 0;      ///< 0, or the resumed step
  int64_t examples = 0;        ///< training examples used
  int64_t skipped_lines = 0;   ///< malformed dataset lines skipped
  double tokens_per_s = 0;     ///< packed tokens (2 x sequence) per second of training
  std::string checkpoint;      ///< the last checkpoint written ("" on ranks other than 0)
  int rank = 0;                ///< this process's data-parallel rank
  int world_size = 1;          ///< data-parallel world size
  std::string parameter_digest;  ///< ParameterDigest of the final weights (distributed.h): equal on all ranks
};

/// Learning rate at optimiser step `step` (1-based): lr * step / warmup for
/// step <= warmup, then lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 +
/// cos(pi * (step - warmup) / (steps - warmup)))).
double ScheduledLr(int64_t step, int64_t steps, int64_t warmup, double lr, double min_ratio);

/// Runs SFT. `log` receives one human-readable line per event (may be null).
/// Errors: kInvalidArgument for bad options (naming the option) or a dataset
/// with no usable example; those of Checkpoint/SdarModel::Load (missing or
/// other-architecture checkpoint), ReadExamples, Tokenizer::Load; kNoDevice
/// for cuda without a GPU; kInternal when LibTorch fails (the last
/// checkpoint written stays intact); data parallel: those of
/// DataParallel::Join (bad torchrun variables, rendezvous timeout) and of
/// its collectives (another rank stopped or died), the message prefixed
/// with "rank R of N".
Expected<SftReport> RunSft(const SftOptions& options, const std::function<void(const std::string&)>& log);

}  // namespace dice::training
