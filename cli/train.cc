// `dice train ...`: see cli/train.h. Torch-free (the training library's
// public headers used here do not include LibTorch).
#include "train.h"

#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dice/generator/tokenizer.h"
#include "dice/training/dataset.h"
#include "dice/training/eval.h"
#include "dice/training/eval_report.h"
#include "dice/training/files.h"
#include "dice/training/model_init.h"
#include "dice/training/rl.h"
#include "dice/training/sft.h"
#include "dice/training/split.h"
#include "dice/training/sweep.h"
#include "progress.h"

namespace dice::cli {
namespace {

struct TrainArgs {
  // init
  std::string init_out, init_tokenizer;
  bool byte_tokenizer = false;
  int64_t hidden = 64, layers = 2, heads = 4, kv_heads = 2, head_dim = 16, intermediate = 128, vocab = 0,
          context = 4096;
  uint64_t init_seed = 0;
  // dataset
  training::DatasetOptions data;
  training::SftOptions sft_opts;
  training::RlOptions rl_opts;
  training::EvalOptions eval_opts;
  training::SweepOptions sweep_opts;
  // compare
  std::string compare_base, compare_new;
  training::BootstrapOptions compare_bootstrap;
};

int ExitFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kNoDevice:
      return kExitNoGpu;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kCorrupt:
    case StatusCode::kUnsupported:
      return kExitBadInput;
    default:
      return kExitFailure;
  }
}

int Fail(const Status& s) {
  std::fprintf(stderr, "dice train: %s\n", s.message().c_str());
  return ExitFor(s);
}

void Log(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Log for sft / rl: their step lines ("sft step 12/100 loss ...") are
// progress, shown at log level info with an ETA (cli/progress.h StepEta);
// every other line as Log.
void LogWithEta(StepEta& eta, const std::string& line) {
  int64_t k = 0, n = 0;
  if (!StepEta::ParseStep(line, &k, &n)) return Log(line);
  if (LogEnabled(LogLevel::kInfo)) Log(eta.Annotate(line));
}

int RunInit(const TrainArgs& a) {
  if (a.byte_tokenizer == !a.init_tokenizer.empty()) {
    return Fail(Status(StatusCode::kInvalidArgument, "train init: give exactly one of --byte-tokenizer or --tokenizer DIR"));
  }
  generator::SdarConfig c;
  c.hidden_size = a.hidden;
  c.num_hidden_layers = a.layers;
  c.num_attention_heads = a.heads;
  c.num_key_value_heads = a.kv_heads;
  c.head_dim = a.head_dim;
  c.intermediate_size = a.intermediate;
  c.max_position_embeddings = a.context;
  c.tie_word_embeddings = true;
  c.block_size = 4;
  if (a.byte_tokenizer) {
    c.vocab_size = a.vocab > 0 ? a.vocab : 260;
    c.mask_token_id = 259;
    if (c.vocab_size < 260) {
      return Fail(Status(StatusCode::kInvalidArgument, "train init: the byte tokenizer needs --vocab >= 260"));
    }
  } else {
    // The mask id is the tokenizer's (151669 for SDAR's files). The table
    // size: Qwen's 151936 for the full files; for a trimmed copy
    // (training/scripts/trim_tokenizer.py writes trim.json) its ids rounded
    // up to a multiple of 64.
    auto tok = generator::Tokenizer::Load(a.init_tokenizer);
    if (!tok.ok()) return Fail(tok.status());
    if (tok->mask_id() < 0) {
      return Fail(Status(StatusCode::kInvalidArgument, "train init: the tokenizer in " + a.init_tokenizer +
                                                           " has no mask_token (tokenizer_config.json)"));
    }
    c.mask_token_id = tok->mask_id();
    const bool trimmed = training::ReadFile(a.init_tokenizer + "/trim.json").ok();
    c.vocab_size = a.vocab > 0 ? a.vocab : trimmed ? (tok->vocab_size() + 63) / 64 * 64 : 151936;
    if (c.vocab_size < tok->vocab_size()) {
      return Fail(Status(StatusCode::kInvalidArgument, "train init: --vocab " + std::to_string(c.vocab_size) +
                                                           " is below the tokenizer's " +
                                                           std::to_string(tok->vocab_size()) + " ids"));
    }
  }
  auto s = training::InitRandomCheckpoint(c, a.init_out, a.init_seed);
  if (!s.ok()) return Fail(s);
  if (a.byte_tokenizer) {
    s = training::WriteByteTokenizer(a.init_out);
  } else {
    struct File {
      const char* name;
      bool required;
    };
    for (const File f : {File{"vocab.json", true}, File{"merges.txt", true}, File{"tokenizer_config.json", true},
                         File{"tokenizer.json", false}, File{"added_tokens.json", false}, File{"trim.json", false}}) {
      const std::string name = f.name;
      auto text = training::ReadFile(a.init_tokenizer + "/" + name);
      if (!text.ok()) {
        if (!f.required) continue;
        return Fail(text.status());
      }
      s = training::WriteFileAtomic(a.init_out + "/" + name, *text);
      if (!s.ok()) return Fail(s);
    }
  }
  if (!s.ok()) return Fail(s);
  Log("train init: wrote a random SDAR model (hidden " + std::to_string(c.hidden_size) + ", " +
      std::to_string(c.num_hidden_layers) + " layers, vocab " + std::to_string(c.vocab_size) + ") to " + a.init_out);
  return kExitOk;
}

// The split sizes of a written dataset, one line per split: examples by
// kind and the op-chains they cover (split.h).
void PrintSplitSizes(const training::DatasetReport& r, const training::DatasetOptions& o) {
  std::printf("dataset: split by op-chain (device kinds) or task hash (corpus items): heldout %.0f%%, validation "
              "%.0f%%, train the rest\n",
              o.heldout_percent, o.validation_percent);
  for (const char* split : {"train", "validation", "heldout"}) {
    auto kinds = r.split_kinds.count(split) ? r.split_kinds.at(split) : std::map<std::string, int64_t>{};
    int64_t total = 0;
    for (const auto& [kind, n] : kinds) total += n;
    auto n = [&](const char* kind) { return static_cast<long long>(kinds.count(kind) ? kinds.at(kind) : 0); };
    const int64_t chains = r.split_op_chains.count(split) ? r.split_op_chains.at(split) : 0;
    std::printf("dataset: split %s: %lld examples (device %lld, device_infill %lld, infill %lld, e2e %lld, task %lld; "
                "%lld op-chains)\n",
                split, static_cast<long long>(total), n("device"), n("device_infill"), n("infill"), n("e2e"),
                n("task"), static_cast<long long>(chains));
  }
}

int RunDataset(const TrainArgs& a) {
  auto r = training::BuildDataset(a.data, Log);
  if (!r.ok()) return Fail(r.status());
  std::printf(
      "dataset: read %lld items; dropped: malformed %lld, no answer %lld%s, unverified winner %lld, failed "
      "verification %lld, speedup < %.2fx %lld, duplicate %lld; of the examples kept: verified here %lld, "
      "without timing (unverified-here) %lld\n",
      static_cast<long long>(r->read), static_cast<long long>(r->malformed),
      static_cast<long long>(a.data.keep_tasks ? 0 : r->no_answer),
      a.data.keep_tasks ? (" (" + std::to_string(r->no_answer) + " answer-less items kept as tasks)").c_str() : "",
      static_cast<long long>(r->unverified_winner), static_cast<long long>(r->failed_verification),
      a.data.min_speedup, static_cast<long long>(r->below_speedup), static_cast<long long>(r->duplicates),
      static_cast<long long>(r->verified), static_cast<long long>(r->not_timed));
  std::printf("dataset: wrote %lld examples to %s (infill %lld, e2e %lld, device %lld, device_infill %lld, task %lld; "
              "level 1/2/3: %lld/%lld/%lld; held out %lld)\n",
              static_cast<long long>(r->written), a.data.out_path.c_str(), static_cast<long long>(r->infill),
              static_cast<long long>(r->e2e), static_cast<long long>(r->device), static_cast<long long>(r->device_infill),
              static_cast<long long>(r->task),
              static_cast<long long>(r->level_counts[0]), static_cast<long long>(r->level_counts[1]),
              static_cast<long long>(r->level_counts[2]), static_cast<long long>(r->heldout));
  PrintSplitSizes(*r, a.data);
  return kExitOk;
}

int RunSft(const TrainArgs& a) {
  StepEta eta;
  auto r = training::RunSft(a.sft_opts, [&eta](const std::string& line) { LogWithEta(eta, line); });
  if (!r.ok()) return Fail(r.status());
  if (r->world_size > 1) {
    std::printf("sft: rank %d of %d finished, parameter digest %s\n", r->rank, r->world_size,
                r->parameter_digest.c_str());
  }
  if (r->rank != 0) return kExitOk;  // data parallel: rank 0 reports
  double first = 0, last = 0;
  const size_t n = r->losses.size(), k = std::min<size_t>(10, n);
  for (size_t i = 0; i < k; ++i) {
    first += r->losses[i] / k;
    last += r->losses[n - k + i] / k;
  }
  std::printf("sft: done, %zu steps, first-%zu mean loss %.4f, last-%zu mean loss %.4f, %.0f tokens/s, checkpoint %s\n",
              n, k, first, k, last, r->tokens_per_s, r->checkpoint.c_str());
  return kExitOk;
}

int RunRl(const TrainArgs& a) {
  StepEta eta;
  auto r = training::RunRl(a.rl_opts, [&eta](const std::string& line) { LogWithEta(eta, line); });
  if (!r.ok()) return Fail(r.status());
  if (r->world_size > 1) {
    std::printf("rl: rank %d of %d finished, parameter digest %s\n", r->rank, r->world_size,
                r->parameter_digest.c_str());
  }
  if (r->rank != 0) return kExitOk;  // data parallel: rank 0 reports
  std::printf("rl: done, %zu steps, parameter change (L2) %.6g, checkpoint %s\n", r->steps.size(), r->parameter_change,
              r->checkpoint.c_str());
  return kExitOk;
}

constexpr char kDefaultSweepCatalog[] = "training/sweeps/templates.json";

int RunSweep(const TrainArgs& a) {
  training::SweepOptions o = a.sweep_opts;
  // The default catalog is relative to the checkout: outside it, use the
  // checkout this binary was built from.
  if (o.catalog_path == kDefaultSweepCatalog && ::access(o.catalog_path.c_str(), R_OK) != 0) {
    const std::string built_from = std::string(DICE_SOURCE_DIR) + "/" + kDefaultSweepCatalog;
    if (::access(built_from.c_str(), R_OK) == 0) {
      o.catalog_path = built_from;
    } else {
      std::fprintf(stderr, "dice train sweep: no %s here or in %s: run from the checkout or pass --catalog FILE\n",
                   kDefaultSweepCatalog, DICE_SOURCE_DIR);
      return kExitBadInput;
    }
  }
  auto catalog = training::ReadSweepCatalog(o.catalog_path);
  if (!catalog.ok()) return Fail(catalog.status());
  Log("sweep: catalog split by op-chain (dice train dataset's default split): " +
      training::DescribeCatalogSplit(training::SplitCatalog(*catalog, training::SplitOptions{})));
  auto r = training::RunSweep(o, Log);
  if (!r.ok()) return Fail(r.status());
  return kExitOk;
}

// `dice train compare`: a stage against another on the same tasks.
int RunCompare(const TrainArgs& a) {
  auto c = training::CompareEvalFiles(a.compare_base, a.compare_new, a.compare_bootstrap);
  if (!c.ok()) return Fail(c.status());
  char head[200];
  std::snprintf(head, sizeof head,
                "compare: %lld tasks in both (%lld only in --base, %lld only in --new, left out); paired "
                "bootstrap, %lld draws, %.0f%% intervals, seed %llu",
                static_cast<long long>(c->tasks), static_cast<long long>(c->base_only),
                static_cast<long long>(c->new_only), static_cast<long long>(a.compare_bootstrap.resamples),
                a.compare_bootstrap.confidence * 100, static_cast<unsigned long long>(a.compare_bootstrap.seed));
  Log(head);
  for (const auto& line : training::FormatComparison(*c)) Log("compare: " + line);
  return kExitOk;
}

int RunEval(const TrainArgs& a) {
  auto r = training::RunEval(a.eval_opts, Log);
  if (!r.ok()) return Fail(r.status());
  return kExitOk;
}

// `dice train init`: a randomly initialised checkpoint.
CLI::App* AddInit(CLI::App& train, TrainArgs& a) {
  auto* cmd = train.add_subcommand("init", "write a randomly initialised SDAR-architecture checkpoint");
  cmd->option_defaults()->always_capture_default();  // --help shows every default
  cmd->add_option("--out", a.init_out, "checkpoint directory to write")->required();
  cmd->add_flag("--byte-tokenizer", a.byte_tokenizer, "write a 260-token byte-level tokenizer (tiny models)");
  cmd->add_option("--tokenizer", a.init_tokenizer, "copy vocab.json/merges.txt/tokenizer_config.json from DIR");
  cmd->add_option("--hidden", a.hidden, "hidden_size")->check(CLI::Range(8, 16384));
  cmd->add_option("--layers", a.layers, "num_hidden_layers")->check(CLI::Range(1, 256));
  cmd->add_option("--heads", a.heads, "num_attention_heads")->check(CLI::Range(1, 256));
  cmd->add_option("--kv-heads", a.kv_heads, "num_key_value_heads")->check(CLI::Range(1, 256));
  cmd->add_option("--head-dim", a.head_dim, "head_dim")->check(CLI::Range(2, 1024));
  cmd->add_option("--intermediate", a.intermediate, "intermediate_size")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--vocab", a.vocab, "vocab_size (default 260 byte / 151936 Qwen / a trimmed tokenizer's ids rounded up to 64)");
  cmd->add_option("--context", a.context, "max_position_embeddings")->check(CLI::Range(16, 1 << 20));
  cmd->add_option("--seed", a.init_seed, "initialisation seed");
  return cmd;
}

// `dice train dataset`: a CuKe JSONL dataset.
CLI::App* AddDataset(CLI::App& train, TrainArgs& a) {
  auto* cmd = train.add_subcommand("dataset", "build a CuKe JSONL dataset (training/README.md schema)");
  cmd->option_defaults()->always_capture_default();  // --help shows every default
  cmd->add_option("--cache-db", a.data.cache_dbs, "dice cache SQLite file (repeatable)");
  cmd->add_option("--corpus", a.data.corpora, "KernelBench-format JSON/JSONL corpus (repeatable)");
  cmd->add_option("--out", a.data.out_path, "output JSONL")->required();
  cmd->add_option("--min-speedup", a.data.min_speedup, "keep pairs at least this much faster than eager");
  cmd->add_option("--heldout-percent", a.data.heldout_percent,
                  "share of split keys (op-chains; corpus items: task hashes) held out")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--validation-percent", a.data.validation_percent,
                  "share of split keys for validation (checkpoint and setting choice)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_flag("--keep-tasks", a.data.keep_tasks, "write answer-less corpus items as stage-2 RL tasks (kind task)");
  cmd->add_option("--verify", a.data.verify, "corpus pairs: judge = re-verify and time each here (KernelBench "
                                             "protocol, dice judge); none = keep unverified; auto = judge on a GPU")
      ->check(CLI::IsMember({"auto", "judge", "none"}));
  cmd->add_option("--device-infill-spans", a.data.device_infill_spans,
                  "kernel infilling examples (kind device_infill) per cache winner; 0 = none")
      ->check(CLI::Range(int64_t{0}, int64_t{64}))
      ->capture_default_str();
  cmd->add_option("--device-infill-max-bytes", a.data.device_infill_max_bytes,
                  "longest middle of a device_infill example, bytes")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--verify-device", a.data.verify_device, "judge on cuda (default), cuda:N or cpu");
  cmd->add_option("--verify-jobs", a.data.verify_jobs, "programs judged at once")
      ->check(CLI::Range(int64_t{1}, int64_t{256}));
  cmd->add_option("--verify-timeout", a.data.verify_timeout_s, "limit per judged program, seconds")
      ->check(CLI::Range(1.0, 86400.0));
  return cmd;
}

// `dice train sft`: supervised fine-tuning.
CLI::App* AddSft(CLI::App& train, TrainArgs& a) {
  auto& s = a.sft_opts;
  auto* cmd = train.add_subcommand("sft", "supervised fine-tuning with the block-diffusion masked-token loss");
  cmd->option_defaults()->always_capture_default();  // --help shows every default
  cmd->add_option("--model", s.model_dir, "starting checkpoint directory")->required();
  cmd->add_option("--data", s.data_path, "CuKe JSONL")->required();
  cmd->add_option("--out", s.out_dir, "checkpoint directory to write")->required();
  cmd->add_option("--resume", s.resume_dir, "continue from a checkpoint written by dice train sft");
  cmd->add_option("--templates", s.templates_path, "prompt templates JSON");
  cmd->add_option("--csv", s.csv_path, "per-step CSV (default OUT/sft_log.csv)");
  cmd->add_option("--device", s.device, "cpu | cuda | cuda:N");
  cmd->add_option("--steps", s.steps, "optimiser steps");
  cmd->add_option("--batch-size", s.batch_size, "examples per micro-batch");
  cmd->add_option("--grad-accum", s.grad_accum, "micro-batches per step");
  cmd->add_option("--max-length", s.max_length, "tokens per example");
  cmd->add_option("--warmup-steps", s.warmup_steps, "linear warm-up steps");
  cmd->add_option("--save-every", s.save_every, "checkpoint every N steps (0 = at the end)");
  cmd->add_option("--lr", s.lr, "peak learning rate");
  cmd->add_option("--min-lr-ratio", s.min_lr_ratio, "cosine floor as a fraction of --lr");
  cmd->add_option("--weight-decay", s.weight_decay, "AdamW weight decay");
  cmd->add_option("--grad-clip", s.grad_clip, "global gradient norm clip (<= 0 off)");
  cmd->add_option("--seed", s.seed, "noise and data-order seed");
  cmd->add_flag("!--no-bf16", s.bf16, "CUDA: compute in float32 instead of bf16 autocast");
  cmd->add_option("--dist-timeout", s.dist_timeout_s, "data parallel: rendezvous timeout, seconds")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  cmd->add_option("--collective-timeout", s.collective_timeout_s,
                  "data parallel: seconds to wait for the other ranks at each all-reduce")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  return cmd;
}

// `dice train rl`: BiC-RL.
CLI::App* AddRl(CLI::App& train, TrainArgs& a) {
  auto& r = a.rl_opts;
  auto* cmd = train.add_subcommand("rl", "BiC-RL: TraceRL on decoder rollouts; reward judged (compiles AND correct) on "
                                         "CUDA, NVRTC compile only on a CPU (--reward)");
  cmd->option_defaults()->always_capture_default();  // --help shows every default
  cmd->add_option("--model", r.model_dir, "starting checkpoint (the SFT model; also the KL reference)")->required();
  cmd->add_option("--resume", r.resume_dir,
                  "an RL checkpoint (with optimizer.pt) to continue from, up to --steps in all; --model stays the KL reference");
  cmd->add_option("--tasks", r.tasks_path, "CuKe JSONL of tasks")->required();
  cmd->add_option("--out", r.out_dir, "checkpoint directory to write")->required();
  cmd->add_option("--stage", r.stage, "infill (stage 1) | e2e (stage 2)");
  cmd->add_option("--inject-known-good", r.inject_path, "JSONL of known-good answers put into each group");
  cmd->add_option("--inject-per-group", r.inject_per_group, "known-good rollouts per group");
  cmd->add_option("--inject-until", r.inject_until,
                  "task-earned = inject into a task's groups until the policy's own rollouts earn reward on it; "
                  "any-earned = until they earn reward on any task; always")
      ->check(CLI::IsMember({"task-earned", "any-earned", "always"}));
  cmd->add_option("--inject-earn-threshold", r.inject_earn_threshold,
                  "own rewarded rollouts that end injection (per task, or in all for any-earned)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--templates", r.templates_path, "prompt templates JSON");
  cmd->add_option("--csv", r.csv_path, "per-step CSV (default OUT/rl_log.csv)");
  cmd->add_option("--device", r.device, "cpu | cuda | cuda:N");
  cmd->add_option("--arch", r.arch, "NVRTC target of the reward compile");
  cmd->add_option("--schedule", r.schedule, "ordered | adaptive");
  cmd->add_option("--advance-at", r.advance_at, "adaptive: success rate that advances the level");
  cmd->add_option("--steps", r.steps, "RL steps");
  cmd->add_option("--tasks-per-step", r.tasks_per_step, "tasks per step");
  cmd->add_option("--group-size", r.group_size, "rollouts per task (G)");
  cmd->add_option("--max-new-tokens", r.max_new_tokens, "rollout length cap");
  cmd->add_option("--denoising-steps", r.denoising_steps, "denoising steps per block");
  cmd->add_option("--threshold", r.confidence_threshold, "dynamic remasking confidence threshold");
  cmd->add_option("--temperature", r.temperature, "rollout sampling temperature");
  cmd->add_option("--rollout-graphs", r.rollout_graphs,
                  "CUDA: rollouts replay CUDA graphs kept across tasks and steps (on) or decode eagerly (off)")
      ->capture_default_str();
  cmd->add_option("--inner-epochs", r.inner_epochs, "updates per batch of rollouts");
  cmd->add_option("--max-trace-tokens", r.max_trace_tokens,
                  "packed tokens per TraceRL forward; longer rollouts are split (0 = no cap)")
      ->capture_default_str();
  cmd->add_option("--save-every", r.save_every, "checkpoint every N steps (0 = at the end)");
  cmd->add_option("--lr", r.lr, "learning rate");
  cmd->add_option("--clip-eps", r.clip_eps, "PPO clip epsilon");
  cmd->add_option("--beta", r.beta, "k3 KL coefficient");
  cmd->add_option("--grad-clip", r.grad_clip, "global gradient norm clip (<= 0 off)");
  cmd->add_option("--speedup-bonus", r.speedup_bonus, "reward bonus per log2 speedup (0 = off, as in the paper)");
  cmd->add_option("--reward", r.reward, "judge = compiles AND correct (KernelBench protocol vs the task's reference, "
                                        "dice judge); compile = NVRTC compile only; auto = judge on CUDA")
      ->check(CLI::IsMember({"auto", "judge", "compile"}));
  cmd->add_option("--judge-jobs", r.judge_jobs, "rollouts judged at once (each a child process)")
      ->check(CLI::Range(int64_t{1}, int64_t{256}));
  cmd->add_option("--judge-timeout", r.judge_timeout_s, "limit per judged rollout, seconds")
      ->check(CLI::Range(1.0, 86400.0));
  cmd->add_option("--seed", r.seed, "rollout seed");
  cmd->add_option("--dist-timeout", r.dist_timeout_s, "data parallel: rendezvous timeout, seconds")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  cmd->add_option("--collective-timeout", r.collective_timeout_s,
                  "data parallel: seconds to wait for the other ranks at each all-reduce")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  return cmd;
}

// `dice train eval`: pass@k on held-out tasks; -k defaults to 1.
CLI::App* AddEval(CLI::App& train, TrainArgs& a) {
  auto& e = a.eval_opts;
  e.ks.clear();
  auto* cmd = train.add_subcommand("eval", "pass@k of a checkpoint on the held-out tasks (same reward as dice train rl)");
  cmd->option_defaults()->always_capture_default();  // --help shows every default
  cmd->add_option("--model", e.model_dir, "checkpoint directory")->required();
  cmd->add_option("--tasks", e.tasks_path, "CuKe JSONL (dice train dataset)")->required();
  cmd->add_option("--json", e.out_json, "write the report (per task and mean pass@k) to this file");
  cmd->add_option("--stage", e.stage, "infill (kinds infill, device, device_infill) | e2e (kinds e2e, task)")
      ->check(CLI::IsMember({"infill", "e2e"}));
  cmd->add_option("--split", e.split, "heldout (default) | validation | train | all")
      ->check(CLI::IsMember({"heldout", "validation", "train", "all"}));
  cmd->add_option("--templates", e.templates_path, "prompt templates JSON");
  cmd->add_option("--device", e.device, "cpu | cuda | cuda:N");
  cmd->add_option("--arch", e.arch, "NVRTC target of the compile reward");
  cmd->add_option("--reward", e.reward, "judge = compiles AND correct; compile = NVRTC only; auto = judge on CUDA")
      ->check(CLI::IsMember({"auto", "judge", "compile"}));
  cmd->add_option("-n,--samples", e.samples, "answers decoded per task")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("-k", e.ks, "pass@k for each k (repeatable or comma separated; default 1)")->delimiter(',');
  cmd->add_option("--max-tasks", e.max_tasks, "evaluate only the first N tasks of the split (0 = all)");
  cmd->add_option("--max-new-tokens", e.max_new_tokens, "answer length cap");
  cmd->add_option("--denoising-steps", e.denoising_steps, "denoising steps per block");
  cmd->add_option("--threshold", e.confidence_threshold, "dynamic remasking confidence threshold");
  cmd->add_option("--temperature", e.temperature, "sampling temperature");
  cmd->add_option("--judge-jobs", e.judge_jobs, "answers judged at once (each a child process)")
      ->check(CLI::Range(int64_t{1}, int64_t{256}));
  cmd->add_option("--judge-timeout", e.judge_timeout_s, "limit per judged answer, seconds")
      ->check(CLI::Range(1.0, 86400.0));
  cmd->add_option("--seed", e.seed, "sampling seed (also seeds the pass@k bootstrap)");
  cmd->add_option("--bootstrap-resamples", e.bootstrap_resamples, "draws of the 95% pass@k interval over tasks")
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}));
  cmd->callback([&e] {
    if (e.ks.empty()) e.ks = {1};
  });
  return cmd;
}

// `dice train sweep`: the template sweep into a cache.
CLI::App* AddSweep(CLI::App& train, TrainArgs& a) {
  auto& w = a.sweep_opts;
  w.catalog_path = kDefaultSweepCatalog;
  auto* cmd = train.add_subcommand("sweep", "tune a catalog of fusion groups with the templates into a cache "
                                            "(CuKe source: then dice train dataset --cache-db)");
  cmd->option_defaults()->always_capture_default();  // --help shows every default
  cmd->add_option("--catalog", w.catalog_path, "JSON catalog of groups and shape sets")->capture_default_str();
  cmd->add_option("--cache-db", w.cache_db, "cache SQLite file the winners go to")->required();
  cmd->add_option("--only", w.only, "comma-separated catalog names (default: all)");
  cmd->add_option("--budget-s", w.budget_s, "tuning budget per task, seconds")->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--max-candidates", w.max_candidates, "template candidates per task")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--gpu", w.device, "CUDA ordinal")->check(CLI::Range(0, 1024));
  cmd->add_flag("--compile-only", w.compile_only, "generate and compile only, store nothing (automatic without a GPU)");
  return cmd;
}

// `dice train compare`: paired bootstrap of two eval reports.
CLI::App* AddCompare(CLI::App& train, TrainArgs& a) {
  auto* cmd = train.add_subcommand("compare", "a stage against another on the same tasks: pass@k of both and the "
                                              "paired bootstrap interval of the difference (new - base)");
  cmd->option_defaults()->always_capture_default();  // --help shows every default
  cmd->add_option("--base", a.compare_base, "eval report of the earlier stage (dice train eval --json)")->required();
  cmd->add_option("--new", a.compare_new, "eval report of the later stage, same tasks and k")->required();
  cmd->add_option("--resamples", a.compare_bootstrap.resamples, "bootstrap draws")
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}));
  cmd->add_option("--confidence", a.compare_bootstrap.confidence, "interval level")->check(CLI::Range(0.5, 0.999));
  cmd->add_option("--seed", a.compare_bootstrap.seed, "bootstrap seed");
  return cmd;
}

}  // namespace

void RegisterTrain(CLI::App& app, CommandTable& table) {
  auto a = std::make_shared<TrainArgs>();
  auto* train = app.add_subcommand("train", "build the DICE generator: CuKe dataset, block-diffusion SFT, BiC-RL");
  train->require_subcommand(1);
  table.Add(AddInit(*train, *a), [a] { return RunInit(*a); });
  table.Add(AddDataset(*train, *a), [a] { return RunDataset(*a); });
  table.Add(AddSft(*train, *a), [a] { return RunSft(*a); });
  table.Add(AddRl(*train, *a), [a] { return RunRl(*a); });
  table.Add(AddEval(*train, *a), [a] { return RunEval(*a); });
  table.Add(AddSweep(*train, *a), [a] { return RunSweep(*a); });
  table.Add(AddCompare(*train, *a), [a] { return RunCompare(*a); });
}

}  // namespace dice::cli
