// sdar_decode_bench — block-diffusion decode throughput of the C++ SDAR
// decoder (dice/generator/diffusion_decoder.h) with random weights at real
// shapes (issue 3 "Benchmark"): per config.json and batch size, one decode
// of --new tokens after a --prompt-token prompt, static low-confidence
// remasking revealing one token a step (--steps = block size), EOS off so
// every sample runs to --new tokens (random weights then cost what real ones
// do). Reports tokens/s = batch x new tokens / decode wall time (prefill
// included; "decode tok/s" leaves the prefill out), after one short warm-up
// decode per batch size.
//
//   sdar_decode_bench --config bench/configs/sdar-1.7b-like.json --config .deps/sdar/config-4b.json
//       --batch 1,16,128 [--prompt 512] [--new 256] [--steps 4] [--device cuda] [--dtype bf16] [--json out.jsonl]
//       [--cuda-graphs off|on|off,on] [--path new|old|new,old] [--fused on|off|on,off] [--gemv on|off|on,off]
//       [--profile]
//   sdar_decode_bench --tiny      (CPU, bench/configs/sdar-tiny.json-like shape, seconds)
//   sdar_decode_bench --tiny --dry-run   (parse, build the rows' options, print them; no model)
//
// --cuda-graphs runs each (config, batch) once per listed mode (DecodeOptions::
// cuda_graphs; "on" captures the step/commit forwards as CUDA graphs, see
// sdar_step_graph.h). --path runs each row once per listed decoder path:
// "new" (default) commits each block inside the next block's first step
// and runs the LM head only on still-masked positions (DecodeOptions::
// merge_commit, masked_logits_only; issue 19 item 3), "old" is the decoder
// before that (a separate commit forward per block, logits over the whole
// block). --fused runs each row once per listed model build: "on" (default)
// merges the Q/K/V and gate/up GEMMs and, on CUDA, runs the fused
// elementwise kernels (SdarModelOptions::fuse_projections and
// fuse_elementwise; sdar_fused_kernels.h), "off" is the model without
// either (the LibTorch ops one by one); the same seed gives both the same
// weights. --gemv runs each --fused on build once per listed mode: "on"
// lets the skinny GEMMs (the gemv template family's stream form,
// sdar_fused_kernels.h SdarGemv) serve the projections of step forwards of
// at most 16 rows in bf16/f16, "off" (default, as the model's) keeps them
// on cuBLAS (the bench sets
// DICE_SDAR_GEMV=1/0 before building the model). --profile adds a second, profiled decode per row
// (DecodeOptions::profile: a device synchronisation at every phase
// boundary) and prints where its time went: prefill, graph capture, step
// forwards, sampling/remasking, read-back, batch select, commits — total
// seconds, calls, ms a call and share of the profiled decode. The tokens/s
// column always comes from the unprofiled decode.
//
// Output: one table row per (config, batch, graphs mode, path); with --json
// one JSON line each ({"impl":"dice-cpp" or "dice-cpp-graphs", with "-old"
// appended for --path old, "-unfused" for --fused off and "-gemv" for
// --gemv on (since session 14; before, the default was on and "-nogemv"
// marked off), "gemv":.., "config":.., "batch":.., "tokens_per_s":..,
// "path":"new"|"old", "fused":.., "fused_elementwise":.., "merge_commit":.., "masked_logits_only":..,
// "forwards_per_block":.., "peak_gib":.., "prefill_seconds":..,
// "decode_tokens_per_s":.., "profile":{..},...}). decode_tokens_per_s (the
// table's "decode tok/s") leaves the prompt's prefill out: generated tokens
// / (seconds - prefill_seconds), the rate issue 19's goals are derived from;
// tokens_per_s counts the whole decode.
// forwards_per_block = (denoising-step forwards + separate commit forwards)
// / blocks decoded, prefill excluded: 4 for the new path at 4 steps a block,
// 5 - 1/blocks for the old one (the last block is never committed).
// peak_gib is the CUDA caching allocator's peak allocation during the row
// (0 on a CPU).
// Exit status: 0 ok, 2 bad input (unreadable config, bad flag), 3 no GPU for
// --device cuda, 1 a decode failed (its error on stderr; the other rows
// still run).
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "dice/generator/checkpoint.h"
#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/sdar_model.h"
#include "dice/generator/tiny_sdar_config.h"

namespace {

std::vector<int64_t> ParseList(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(std::stoll(item));
  }
  return out;
}

// Prints the phase table of one profiled decode.
void PrintProfile(const dice::generator::DecodeResult& r) {
  const dice::generator::DecodeProfile& p = r.profile;
  struct Row {
    const char* name;
    double s;
    int64_t calls;
  };
  const Row rows[] = {{"setup (cache, prompt upload)", p.setup_s, 1},
                      {"prefill", p.prefill_s, 1},
                      {"graph capture", p.graph_capture_s, p.captures},
                      {"step forward", p.step_forward_s, p.step_forwards},
                      {"sampling + remasking", p.sampling_s, p.step_forwards},
                      {"read-back + EOS + trace", p.readback_s, static_cast<int64_t>(r.steps_per_block.size())},
                      {"batch select", p.batch_select_s, 0},
                      {"commit forward", p.commit_s, p.commits}};
  double booked = 0;
  for (const auto& row : rows) booked += row.s;
  std::printf("  %-30s %10s %7s %10s %7s\n", "phase", "seconds", "calls", "ms/call", "share");
  for (const auto& row : rows) {
    std::printf("  %-30s %10.4f %7lld %10.3f %6.1f%%\n", row.name, row.s, static_cast<long long>(row.calls),
                row.calls > 0 ? 1e3 * row.s / row.calls : 0.0, r.seconds > 0 ? 100.0 * row.s / r.seconds : 0.0);
  }
  std::printf("  %-30s %10.4f %7s %10s %6.1f%%\n", "(unbooked)", r.seconds - booked, "", "",
              r.seconds > 0 ? 100.0 * (r.seconds - booked) / r.seconds : 0.0);
  std::printf("  %-30s %10.4f\n", "profiled decode total", r.seconds);
}

nlohmann::json ProfileJson(const dice::generator::DecodeResult& r) {
  const dice::generator::DecodeProfile& p = r.profile;
  return nlohmann::json{{"seconds", r.seconds},          {"setup_s", p.setup_s},
                        {"prefill_s", p.prefill_s},      {"graph_capture_s", p.graph_capture_s},
                        {"step_forward_s", p.step_forward_s}, {"sampling_s", p.sampling_s},
                        {"readback_s", p.readback_s},    {"batch_select_s", p.batch_select_s},
                        {"commit_s", p.commit_s},        {"step_forwards", p.step_forwards},
                        {"commits", p.commits},          {"captures", p.captures}};
}

// Parses `text`, a comma-separated list of the words `a` and `b` (the
// --cuda-graphs, --path, --fused and --gemv modes), into `out`: true for
// `yes`, false for the other; an empty list is {empty_default}. Any other
// word: prints the error (naming `flag`) and returns false.
bool ParseTwoWordList(const std::string& text, const char* flag, const char* a, const char* b, const char* yes,
                      bool empty_default, std::vector<bool>* out) {
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == a || item == b) {
      out->push_back(item == yes);
    } else {
      std::fprintf(stderr, "sdar_decode_bench: error: %s '%s': each item must be %s or %s\n", flag, text.c_str(), a,
                   b);
      return false;
    }
  }
  if (out->empty()) out->push_back(empty_default);
  return true;
}

// The flags every row shares.
struct RowSettings {
  int64_t prompt_len, new_tokens, steps;
  std::string dtype;
  bool profile;
};

// --dry-run: the line of one row that would run.
void PrintDryRunRow(const std::string& name, const RowSettings& s, int64_t batch, bool graphs, bool old_path,
                    bool fuse, bool gemv) {
  std::printf("dry run: %s batch %lld prompt %lld new %lld steps %lld graphs %s path %s fused %s "
              "gemv %s (merge_commit %d, masked_logits_only %d)\n",
              name.c_str(), static_cast<long long>(batch), static_cast<long long>(s.prompt_len),
              static_cast<long long>(s.new_tokens), static_cast<long long>(s.steps), graphs ? "on" : "off",
              old_path ? "old" : "new", fuse ? "on" : "off", gemv ? "on" : "off", old_path ? 0 : 1,
              old_path ? 0 : 1);
}

// One row: a short warm-up decode, the timed decode (peak memory on CUDA),
// its table line and JSON line (when `json_out` is open), and with
// --profile a profiled decode's phase table. Returns false when a decode
// failed (its error printed; a failed warm-up or timed decode ends the row).
bool RunRow(const dice::generator::SdarModel& model, const std::string& name,
            const dice::generator::SdarConfig& config, const std::vector<int32_t>& prompt, const torch::Device& dev,
            const RowSettings& s, int64_t batch, bool graphs, bool old_path, bool fuse, bool gemv,
            std::ofstream& json_out) {
  bool ok = true;
  dice::generator::DecodeOptions o;
  o.remasking = dice::generator::Remasking::kStatic;
  o.denoising_steps = s.steps;
  o.eos_ids.clear();
  o.num_samples = batch;
  o.cuda_graphs = graphs;
  o.merge_commit = !old_path;
  o.masked_logits_only = !old_path;
  o.max_new_tokens = std::min<int64_t>(s.new_tokens, 2 * config.block_size);  // warm-up
  auto warm = dice::generator::Decode(model, prompt, o);
  if (!warm.ok()) {
    std::fprintf(stderr, "sdar_decode_bench: error: %s batch %lld: %s\n", name.c_str(),
                 static_cast<long long>(batch), warm.status().ToString().c_str());
    return false;
  }
  o.max_new_tokens = s.new_tokens;
  if (dev.is_cuda()) {
    torch::cuda::synchronize();
    c10::cuda::CUDACachingAllocator::resetPeakStats(dev.index() < 0 ? 0 : dev.index());
  }
  auto r = dice::generator::Decode(model, prompt, o);
  if (dev.is_cuda()) torch::cuda::synchronize();
  if (!r.ok()) {
    std::fprintf(stderr, "sdar_decode_bench: error: %s batch %lld: %s\n", name.c_str(),
                 static_cast<long long>(batch), r.status().ToString().c_str());
    return false;
  }
  double peak_gib = 0;
  if (dev.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(dev.index() < 0 ? 0 : dev.index());
    peak_gib = static_cast<double>(
                   stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak) /
               (1024.0 * 1024.0 * 1024.0);
  }
  int64_t generated = 0;
  for (const auto& t : r->tokens) generated += static_cast<int64_t>(t.size());
  const double tps = r->seconds > 0 ? generated / r->seconds : 0.0;
  // The decoding proper (prefill left out): what issue 19's goals count.
  const double decode_s = r->seconds - r->prefill_seconds;
  const double decode_tps = decode_s > 0 ? generated / decode_s : 0.0;
  const int64_t blocks = static_cast<int64_t>(r->steps_per_block.size());
  const double forwards_per_block =
      blocks > 0 ? static_cast<double>(r->denoising_steps + r->commit_forwards) / blocks : 0.0;
  std::printf("%-40s %6lld %8lld %6lld %10.3f %12.1f %12.1f %9lld %7.3f %6s %5s %5s %9.2f\n", name.c_str(),
              static_cast<long long>(batch), static_cast<long long>(s.prompt_len),
              static_cast<long long>(s.new_tokens), r->seconds, tps, decode_tps,
              static_cast<long long>(r->forward_passes),
              forwards_per_block, graphs ? "on" : "off", old_path ? "old" : "new",
              fuse ? (gemv ? "gemv" : "on") : "off", peak_gib);
  std::fflush(stdout);
  const std::string impl = std::string(graphs ? "dice-cpp-graphs" : "dice-cpp") + (old_path ? "-old" : "") +
                           (fuse ? (gemv ? "-gemv" : "") : "-unfused");
  nlohmann::json row{{"impl", impl},
                     {"config", name},
                     {"batch", batch},
                     {"prompt", s.prompt_len},
                     {"new_tokens", s.new_tokens},
                     {"steps", s.steps},
                     {"dtype", s.dtype},
                     {"device", dev.str()},
                     {"cuda_graphs", graphs},
                     {"seconds", r->seconds},
                     {"generated_tokens", generated},
                     {"tokens_per_s", tps},
                     {"prefill_seconds", r->prefill_seconds},
                     {"decode_tokens_per_s", decode_tps},
                     {"step_attention", r->step_attention},
                     {"sdpa_step_us", r->sdpa_step_us},
                     {"split_kv_step_us", r->split_kv_step_us},
                     {"forward_passes", r->forward_passes},
                     {"path", old_path ? "old" : "new"},
                     {"fused", fuse},
                     {"gemv", fuse && gemv},
                     {"fused_elementwise", model.fused_elementwise()},
                     {"fused_note", model.fused_elementwise_note()},
                     {"merge_commit", o.merge_commit},
                     {"masked_logits_only", o.masked_logits_only},
                     {"forwards_per_block", forwards_per_block},
                     {"commit_forwards", r->commit_forwards},
                     {"merged_commits", r->merged_commits},
                     {"peak_gib", peak_gib}};
  if (s.profile) {
    o.profile = true;
    auto p = dice::generator::Decode(model, prompt, o);
    if (!p.ok()) {
      std::fprintf(stderr, "sdar_decode_bench: error: %s batch %lld (profiled): %s\n", name.c_str(),
                   static_cast<long long>(batch), p.status().ToString().c_str());
      ok = false;
    } else {
      std::printf("profile: %s batch %lld graphs %s path %s\n", name.c_str(), static_cast<long long>(batch),
                  graphs ? "on" : "off", old_path ? "old" : "new");
      PrintProfile(*p);
      std::fflush(stdout);
      row["profile"] = ProfileJson(*p);
    }
  }
  if (json_out.is_open()) json_out << row.dump() << "\n";
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"SDAR block-diffusion decode throughput (random weights)"};
  std::vector<std::string> configs;
  std::string batches = "1,16,128", device = "cuda", dtype = "bf16", json_path;
  int64_t prompt_len = 512, new_tokens = 256, steps = 4;
  uint64_t seed = 0;
  std::string graphs_modes = "off", paths = "new", fused_modes = "on", gemv_modes = "off";
  bool failed = false;
  bool tiny = false, profile = false, dry_run = false;
  app.add_option("--config", configs, "SDAR config.json (repeat for several)");
  app.add_option("--batch", batches, "comma-separated batch sizes");
  app.add_option("--prompt", prompt_len, "prompt tokens")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--new", new_tokens, "new tokens per sample")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--steps", steps, "denoising steps per block")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_option("--device", device, "cuda, cuda:N or cpu");
  app.add_option("--dtype", dtype, "bf16, f16 or f32")->check(CLI::IsMember({"bf16", "f16", "f32"}));
  app.add_option("--seed", seed, "weights and prompt seed");
  app.add_option("--json", json_path, "append one JSON line per row to this file");
  app.add_option("--cuda-graphs", graphs_modes, "off, on, or off,on (each row once per mode)");
  app.add_option("--path", paths,
                 "new (merged commit, logits at masked positions only), old (separate commit forward, "
                 "logits over the block), or new,old (each row once per path)");
  app.add_option("--fused", fused_modes,
                 "on (merged QKV and gate/up GEMMs, fused elementwise kernels on CUDA), off, or on,off "
                 "(each row once per model build)");
  app.add_option("--gemv", gemv_modes,
                 "on (the skinny GEMMs of templates/gemv.h serve the step forward's projections of <= 16 rows, "
                 "bf16/f16, with --fused on), off (cuBLAS; default), or on,off (each --fused on row once per mode; sets "
                 "DICE_SDAR_GEMV for the model build)");
  app.add_flag("--profile", profile, "also run a profiled decode per row and print its phase table");
  app.add_flag("--dry-run", dry_run, "check the flags and print the rows that would run, without decoding");
  app.add_flag("--tiny", tiny, "CPU smoke run: tiny built-in shape, prompt 16, 8 new tokens, batch 1,2, f32");
  CLI11_PARSE(app, argc, argv);

  std::vector<std::pair<std::string, dice::generator::SdarConfig>> shapes;
  if (tiny) {
    // The --tiny shape (bench/configs/sdar-tiny.json-like): hidden 64, 512 tokens, 1024 positions.
    shapes.emplace_back("tiny", dice::generator::TinySdarConfig(/*vocab=*/512, /*max_positions=*/1024,
                                                                /*tie_word_embeddings=*/false, /*hidden_size=*/64));
    device = "cpu";
    dtype = "f32";
    prompt_len = 16;
    new_tokens = 8;
    batches = "1,2";
  }
  for (const auto& path : configs) {
    auto c = dice::generator::SdarConfig::Load(path);
    if (!c.ok()) {
      std::fprintf(stderr, "sdar_decode_bench: error: %s\n", c.status().ToString().c_str());
      return 2;
    }
    shapes.emplace_back(path, *c);
  }
  if (shapes.empty()) {
    std::fprintf(stderr, "sdar_decode_bench: error: give --config FILE (repeatable) or --tiny\n");
    return 2;
  }
  std::vector<int64_t> batch_sizes;
  try {
    batch_sizes = ParseList(batches);
  } catch (const std::exception&) {
    std::fprintf(stderr, "sdar_decode_bench: error: --batch '%s' is not a comma-separated list\n", batches.c_str());
    return 2;
  }
  std::vector<bool> graph_modes, old_paths, fuse_list, gemv_list;
  // old_paths: true = the decoder before issue 19 item 3; fuse_list: true =
  // SdarModelOptions::fuse_projections and fuse_elementwise; gemv_list:
  // DICE_SDAR_GEMV for a --fused on build (sdar_fused_kernels.h skinny_gemv).
  if (!ParseTwoWordList(graphs_modes, "--cuda-graphs", "on", "off", "on", false, &graph_modes) ||
      !ParseTwoWordList(paths, "--path", "new", "old", "old", false, &old_paths) ||
      !ParseTwoWordList(fused_modes, "--fused", "on", "off", "on", true, &fuse_list) ||
      !ParseTwoWordList(gemv_modes, "--gemv", "on", "off", "on", true, &gemv_list)) {
    return 2;
  }
  // (fuse, gemv) model builds in order; gemv only varies for fused builds.
  std::vector<std::pair<bool, bool>> builds;
  for (bool fuse : fuse_list) {
    if (!fuse) {
      builds.emplace_back(false, false);
      continue;
    }
    for (bool gemv : gemv_list) builds.emplace_back(true, gemv);
  }
  dice::generator::SdarModelOptions mo;
  try {
    mo.device = torch::Device(device);
  } catch (const c10::Error&) {
    std::fprintf(stderr, "sdar_decode_bench: error: --device '%s' is not a device\n", device.c_str());
    return 2;
  }
  const RowSettings settings{prompt_len, new_tokens, steps, dtype, profile};
  if (dry_run) {
    for (const auto& [name, config] : shapes) {
      for (const auto& [fuse, gemv] : builds) {
        for (int64_t batch : batch_sizes) {
          for (bool graphs : graph_modes) {
            for (bool old_path : old_paths) PrintDryRunRow(name, settings, batch, graphs, old_path, fuse, gemv);
          }
        }
      }
    }
    return 0;
  }
  if (mo.device.is_cuda() && !torch::cuda::is_available()) {
    std::fprintf(stderr, "sdar_decode_bench: error: --device %s but no CUDA device is present\n", device.c_str());
    return 3;
  }
  mo.dtype = dtype == "bf16" ? torch::kBFloat16 : dtype == "f16" ? torch::kFloat16 : torch::kFloat32;

  std::printf("%-40s %6s %8s %6s %10s %12s %12s %9s %7s %6s %5s %5s %9s\n", "config", "batch", "prompt", "new",
              "seconds", "tokens/s", "decode tok/s", "forwards", "fwd/blk", "graphs", "path", "fused", "peak GiB");
  std::ofstream json_out;
  if (!json_path.empty()) json_out.open(json_path, std::ios::app);
  for (const auto& [name, config] : shapes) {
    for (const auto& [fuse, gemv] : builds) {
      mo.fuse_projections = fuse;
      mo.fuse_elementwise = fuse;
      ::setenv("DICE_SDAR_GEMV", gemv ? "1" : "0", 1);  // read when the fused kernels build
      auto model = dice::generator::SdarModel::Random(config, mo, seed);
      if (!model.ok()) {
        std::fprintf(stderr, "sdar_decode_bench: error: %s: %s\n", name.c_str(), model.status().ToString().c_str());
        return 1;
      }
      if (fuse && mo.device.is_cuda() && !model->fused_elementwise()) {
        std::fprintf(stderr, "sdar_decode_bench: %s: %s\n", name.c_str(), model->fused_elementwise_note().c_str());
      }
      // A prompt of random ordinary tokens (never the mask token).
      std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
      for (int64_t i = 0; i < prompt_len; ++i) {
        prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 17) % (config.mask_token_id > 0 ? config.mask_token_id : config.vocab_size - 1));
      }
      for (int64_t batch : batch_sizes) {
        for (bool graphs : graph_modes) {
          for (bool old_path : old_paths) {
            if (!RunRow(*model, name, config, prompt, mo.device, settings, batch, graphs, old_path, fuse, gemv,
                        json_out)) {
              failed = true;  // the other rows still run (a graph capture may fail alone)
            }
          }
        }
      }
    }
  }
  return failed ? 1 : 0;
}
