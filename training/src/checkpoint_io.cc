// Checkpoint writing for dice::training: see dice/training/checkpoint_io.h.
// No spdlog/fmt here: LibTorch bundles its own fmt.
#include "dice/training/checkpoint_io.h"

#include <ATen/CPUGeneratorImpl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

namespace dice::training {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The safetensors bytes of named tensors (see dice/generator/checkpoint.h for
// the format): 8-byte header length, JSON header padded with spaces to a
// multiple of 8, then the row-major buffers in order.
Expected<std::string> SafetensorsBytes(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                       torch::ScalarType dtype) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<torch::Tensor> host;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    auto h = t.detach().to(torch::kCPU, dtype).contiguous();
    const size_t nbytes = static_cast<size_t>(h.numel()) * h.element_size();
    header[name] = {{"dtype", dtype == torch::kFloat32 ? "F32" : "BF16"},
                    {"shape", h.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    host.push_back(h);
  }
  header["__metadata__"] = {{"format", "pt"}, {"writer", "dice train"}};
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += text;
  out.reserve(out.size() + offset);
  for (const auto& h : host) {
    out.append(static_cast<const char*>(h.data_ptr()), static_cast<size_t>(h.numel()) * h.element_size());
  }
  return out;
}

}  // namespace

Status SaveCheckpoint(const generator::SdarModel& model, const std::string& source_dir, const std::string& out_dir,
                      torch::ScalarType dtype) {
  if (dtype != torch::kFloat32 && dtype != torch::kBFloat16) {
    return Status(StatusCode::kInvalidArgument, "checkpoint dtype must be float32 or bfloat16");
  }
  auto config = ReadFile(source_dir + "/config.json");
  if (!config.ok()) return Status(StatusCode::kNotFound, "source checkpoint " + source_dir + " has no config.json");
  DICE_RETURN_IF_ERROR(MakeDirs(out_dir));
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  try {
    weights = model.NamedWeights();
    auto bytes = SafetensorsBytes(weights, dtype);
    if (!bytes.ok()) return bytes.status();
    DICE_RETURN_IF_ERROR(WriteFileAtomic(out_dir + "/model.safetensors", *bytes));
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, std::string("SaveCheckpoint: ") + e.what_without_backtrace());
  }
  if (source_dir != out_dir) {
    DICE_RETURN_IF_ERROR(WriteFileAtomic(out_dir + "/config.json", *config));
    for (const char* name : {"vocab.json", "merges.txt", "tokenizer_config.json", "tokenizer.json", "added_tokens.json",
                             "special_tokens_map.json", "generation_config.json"}) {
      const std::string src = source_dir + "/" + name;
      if (!Exists(src)) continue;
      auto text = ReadFile(src);
      if (!text.ok()) return text.status();
      DICE_RETURN_IF_ERROR(WriteFileAtomic(out_dir + "/" + name, *text));
    }
  }
  return Status::Ok();
}

std::string SdarConfigJson(const generator::SdarConfig& c) {
  nlohmann::json j = {{"architectures", {"SDARForCausalLM"}},
                      {"model_type", "sdar"},
                      {"hidden_size", c.hidden_size},
                      {"num_hidden_layers", c.num_hidden_layers},
                      {"num_attention_heads", c.num_attention_heads},
                      {"num_key_value_heads", c.num_key_value_heads},
                      {"head_dim", c.head_dim},
                      {"intermediate_size", c.intermediate_size},
                      {"vocab_size", c.vocab_size},
                      {"max_position_embeddings", c.max_position_embeddings},
                      {"rope_theta", c.rope_theta},
                      {"rms_norm_eps", c.rms_norm_eps},
                      {"tie_word_embeddings", c.tie_word_embeddings},
                      {"block_size", c.block_size},
                      {"mask_token_id", c.mask_token_id},
                      {"hidden_act", "silu"},
                      {"attention_bias", false},
                      {"torch_dtype", "float32"}};
  return j.dump(2) + "\n";
}

Status InitRandomCheckpoint(const generator::SdarConfig& config, const std::string& out_dir, uint64_t seed) {
  const std::string text = SdarConfigJson(config);
  auto parsed = generator::SdarConfig::Parse(text, "generated config.json");
  if (!parsed.ok()) return parsed.status();
  DICE_RETURN_IF_ERROR(MakeDirs(out_dir));
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  try {
    torch::NoGradGuard no_grad;
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    for (const auto& spec : parsed->ExpectedTensors()) {
      const bool norm = spec.shape.size() == 1;
      weights.emplace_back(spec.name, norm ? torch::ones(spec.shape)
                                           : torch::normal(0.0, 0.02, spec.shape, gen));
    }
    auto bytes = SafetensorsBytes(weights, torch::kFloat32);
    if (!bytes.ok()) return bytes.status();
    DICE_RETURN_IF_ERROR(WriteFileAtomic(out_dir + "/model.safetensors", *bytes));
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, std::string("InitRandomCheckpoint: ") + e.what_without_backtrace());
  }
  return WriteFileAtomic(out_dir + "/config.json", text);
}

Status WriteByteTokenizer(const std::string& dir) {
  DICE_RETURN_IF_ERROR(MakeDirs(dir));
  // GPT-2's byte alphabet: printable bytes map to themselves, the rest to
  // U+0100 upwards in byte order.
  nlohmann::json vocab = nlohmann::json::object();
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(extra++);
    std::string utf8;
    if (cp < 0x80) {
      utf8.push_back(static_cast<char>(cp));
    } else {
      utf8.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      utf8.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    vocab[utf8] = b;
  }
  nlohmann::json added = nlohmann::json::object();
  const char* names[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>"};
  for (int i = 0; i < 4; ++i) {
    added[std::to_string(256 + i)] = {{"content", names[i]}, {"lstrip", false}, {"rstrip", false},
                                      {"single_word", false}, {"normalized", false}, {"special", true}};
  }
  nlohmann::json config = {{"added_tokens_decoder", added}, {"eos_token", "<|im_end|>"},
                           {"pad_token", "<|endoftext|>"}, {"mask_token", "<|MASK|>"}};
  DICE_RETURN_IF_ERROR(WriteFileAtomic(dir + "/vocab.json", vocab.dump()));
  DICE_RETURN_IF_ERROR(WriteFileAtomic(dir + "/merges.txt", "#version: 0.2\n"));
  return WriteFileAtomic(dir + "/tokenizer_config.json", config.dump(2));
}

}  // namespace dice::training
