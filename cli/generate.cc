// `dice generate --model DIR --task task.py [--mode e2e|infill] [-n N] [--seed S] ...`
//
// Loads a DICE/SDAR checkpoint directory (config.json, safetensors weights,
// tokenizer files), builds the end-to-end or infilling prompt for the task
// (dice/generator/prompts.h), decodes n samples with block diffusion
// (dice/generator/diffusion_decoder.h; progress on stderr after each block)
// and prints each sample's code block, or the reason it has none.
// No spdlog/fmt here: this file includes LibTorch.
#include "generate.h"

#include <torch/cuda.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/prompts.h"
#include "dice/generator/sdar_model.h"
#include "dice/generator/tokenizer.h"

namespace dice::cli {
namespace {

struct GenerateArgs {
  std::string model_dir, task_path, mode = "e2e", prefix_path, suffix_path, templates_path, json_path;
  std::string device = "cpu", dtype = "f32", remasking = "dynamic", cuda_graphs = "auto";
  int64_t num_samples = 1, max_new_tokens = 256, steps = 4, top_k = 0;
  uint64_t seed = 0;
  double threshold = 0.9, temperature = 0.0, top_p = 1.0;
  bool quiet = false;
};

bool ReadFile(const std::string& path, const std::string& what, std::string* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read " + what + " '" + path + "'";
    return false;
  }
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

// Exit codes in generate.h.
int RunGenerate(const GenerateArgs& a) {
  std::string error, task, prefix, suffix;
  if (!ReadFile(a.task_path, "task file", &task, &error)) return Fail(kExitBadInput, error);
  if (a.mode == "infill") {
    if (a.prefix_path.empty() || a.suffix_path.empty()) {
      return Fail(kExitBadInput, "--mode infill needs --prefix FILE and --suffix FILE");
    }
    if (!ReadFile(a.prefix_path, "prefix file", &prefix, &error) ||
        !ReadFile(a.suffix_path, "suffix file", &suffix, &error)) {
      return Fail(kExitBadInput, error);
    }
  }
  generator::PromptTemplates templates = generator::PromptTemplates::Default();
  if (!a.templates_path.empty()) {
    auto t = generator::PromptTemplates::Load(a.templates_path);
    if (!t.ok()) return Fail(kExitBadInput, t.status().message());
    templates = std::move(*t);
  }
  auto prompt = a.mode == "e2e" ? generator::BuildEndToEndPrompt(templates, task)
                                : generator::BuildInfillingPrompt(templates, task, prefix, suffix);
  if (!prompt.ok()) return Fail(kExitBadInput, prompt.status().message());

  generator::SdarModelOptions mopts;
  try {
    mopts.device = torch::Device(a.device);
  } catch (const c10::Error&) {
    return Fail(kExitBadInput, "--device '" + a.device + "' is not a device (cpu, cuda, cuda:N)");
  }
  if (mopts.device.is_cuda() && !torch::cuda::is_available()) {
    return Fail(kExitNoGpu, "--device " + a.device + " asked for but no CUDA device is present");
  }
  mopts.dtype = a.dtype == "bf16" ? torch::kBFloat16 : a.dtype == "f16" ? torch::kFloat16 : torch::kFloat32;
  auto tok = generator::Tokenizer::Load(a.model_dir);
  if (!tok.ok()) return Fail(kExitBadInput, tok.status().message());
  auto model = generator::SdarModel::Load(a.model_dir, mopts);
  if (!model.ok()) {
    return Fail(model.status().code() == StatusCode::kInternal ? kExitFailure : kExitBadInput,
                model.status().message());
  }
  const std::vector<int32_t> ids = tok->Encode(*prompt);
  if (tok->vocab_size() > model->config().vocab_size) {
    for (int32_t id : ids) {
      if (id >= model->config().vocab_size) {
        return Fail(kExitBadInput, "the tokenizer in " + a.model_dir + " gives id " + std::to_string(id) +
                                       " but the model's vocabulary has " +
                                       std::to_string(model->config().vocab_size) + " entries");
      }
    }
  }

  generator::DecodeOptions o;
  o.max_new_tokens = a.max_new_tokens;
  o.denoising_steps = a.steps;
  o.remasking = *generator::ParseRemasking(a.remasking);
  o.confidence_threshold = a.threshold;
  o.temperature = a.temperature;
  o.top_k = a.top_k;
  o.top_p = a.top_p;
  o.num_samples = a.num_samples;
  o.seed = a.seed;
  o.cuda_graphs = a.cuda_graphs == "on" || (a.cuda_graphs == "auto" && mopts.device.is_cuda());
  o.eos_ids.clear();
  for (int32_t id : tok->eos_ids()) o.eos_ids.push_back(id);
  if (!a.quiet) {
    // One line rewritten in place on a terminal; a line per block in a log.
    const bool tty = ::isatty(STDERR_FILENO) != 0;
    o.on_block = [&a, tty](const generator::DecodeProgress& p) {
      std::fprintf(stderr, "%sdice: block %lld, %lld/%lld tokens, %lld sample(s) active, %.1f s%s", tty ? "\r" : "",
                   static_cast<long long>(p.blocks), static_cast<long long>(p.generated_tokens),
                   static_cast<long long>(a.max_new_tokens), static_cast<long long>(p.active_samples), p.elapsed_s,
                   !tty || p.active_samples == 0 ? "\n" : "");
    };
  }
  std::printf("dice: %s prompt of %zu tokens; %lld sample(s) on %s (%s), %s remasking, %lld steps a block of %lld\n",
              a.mode.c_str(), ids.size(), static_cast<long long>(a.num_samples), mopts.device.str().c_str(),
              a.dtype.c_str(), a.remasking.c_str(), static_cast<long long>(a.steps),
              static_cast<long long>(model->config().block_size));
  std::fflush(stdout);
  auto result = generator::Decode(*model, ids, o);
  if (!result.ok()) {
    return Fail(result.status().code() == StatusCode::kInvalidArgument ? kExitBadInput : kExitFailure,
                result.status().message());
  }
  int64_t total = 0;
  nlohmann::json samples = nlohmann::json::array();
  for (size_t i = 0; i < result->tokens.size(); ++i) {
    const auto& t = result->tokens[i];
    total += static_cast<int64_t>(t.size());
    const std::string text = tok->Decode(t);
    auto code = generator::ExtractCodeBlock(text);
    std::printf("\n=== sample %zu: %zu tokens, %s ===\n", i, t.size(),
                result->stopped_at_eos[i] ? "ended at EOS" : "reached --max-new-tokens");
    if (code.ok()) {
      std::printf("%s%s", code->c_str(), !code->empty() && code->back() == '\n' ? "" : "\n");
    } else {
      std::printf("(no candidate: %s)\n", code.status().message().c_str());
    }
    samples.push_back({{"tokens", t}, {"text", text}, {"stopped_at_eos", static_cast<bool>(result->stopped_at_eos[i])},
                       {"code", code.ok() ? nlohmann::json(*code) : nlohmann::json(nullptr)},
                       {"error", code.ok() ? "" : code.status().message()}});
  }
  std::printf("\ndice: %lld tokens in %.2f s (%.1f tokens/s), %lld denoising steps, %lld forward passes\n",
              static_cast<long long>(total), result->seconds, result->seconds > 0 ? total / result->seconds : 0.0,
              static_cast<long long>(result->denoising_steps), static_cast<long long>(result->forward_passes));
  if (!a.json_path.empty()) {
    std::ofstream out(a.json_path);
    out << nlohmann::json{{"prompt", *prompt},
                          {"prompt_tokens", ids.size()},
                          {"samples", samples},
                          {"seconds", result->seconds},
                          {"denoising_steps", result->denoising_steps},
                          {"forward_passes", result->forward_passes},
                          {"cuda_graphs", o.cuda_graphs}}
               .dump(2)
        << "\n";
    if (!out) return Fail(kExitFailure, "cannot write --json file '" + a.json_path + "'");
  }
  return kExitOk;
}

}  // namespace

void RegisterGenerate(CLI::App& app, CommandTable& table) {
  auto args = std::make_shared<GenerateArgs>();
  GenerateArgs& a = *args;
  auto* cmd = app.add_subcommand("generate", "decode CUDA kernel candidates for a task with a DICE/SDAR checkpoint");
  cmd->add_option("--model", a.model_dir, "checkpoint directory (config.json, *.safetensors, tokenizer files)")
      ->required();
  cmd->add_option("--task", a.task_path, "reference PyTorch program (KernelBench style Model)")->required();
  cmd->add_option("--mode", a.mode, "e2e (whole ModelNew program) or infill (the CUDA middle)")
      ->check(CLI::IsMember({"e2e", "infill"}));
  cmd->add_option("--prefix", a.prefix_path, "infill: file with the program's beginning");
  cmd->add_option("--suffix", a.suffix_path, "infill: file with the program's end (declares the kernels)");
  cmd->add_option("--templates", a.templates_path, "JSON file overriding the prompt templates");
  cmd->add_option("-n,--num-samples", a.num_samples, "samples decoded as one batch")->check(CLI::Range(1, 4096));
  cmd->add_option("--seed", a.seed, "sampling seed");
  cmd->add_option("--max-new-tokens", a.max_new_tokens, "tokens to generate at most")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--steps", a.steps, "denoising steps per block")->check(CLI::Range(1, 4096));
  cmd->add_option("--remasking", a.remasking, "static or dynamic low-confidence remasking")
      ->check(CLI::IsMember({"static", "dynamic"}));
  cmd->add_option("--threshold", a.threshold, "dynamic remasking confidence threshold")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--temperature", a.temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", a.top_k, "0 = off")->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--top-p", a.top_p, "1 = off")->check(CLI::Range(1e-9, 1.0));
  cmd->add_option("--device", a.device, "cpu, cuda or cuda:N");
  cmd->add_option("--dtype", a.dtype, "compute dtype")->check(CLI::IsMember({"f32", "bf16", "f16"}));
  cmd->add_option("--cuda-graphs", a.cuda_graphs,
                  "on: replay the per-step and commit forwards as CUDA graphs (fixed-shape form); "
                  "auto (default): on when --device is cuda")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_option("--json", a.json_path, "also write prompt, samples and timings as JSON to this file");
  cmd->add_flag("--quiet", a.quiet, "no progress lines on stderr");
  table.Add(cmd, [args] { return RunGenerate(*args); });
}

}  // namespace dice::cli
