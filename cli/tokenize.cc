// `dice tokenize` (cli/tokenize.h).
#include "tokenize.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include "dice/generator/tokenizer.h"

namespace dice::cli {
namespace {

/// `dice tokenize --model DIR`: stdin -> token ids as one JSON array (the
/// Qwen2/SDAR byte-level BPE of generator/tokenizer.h), so anyone can compare
/// it with another tokenizer.
int CmdTokenize(const std::string& model_dir) {
  auto tok = dice::generator::Tokenizer::Load(model_dir);
  if (!tok.ok()) return Fail(kExitBadInput, tok.status().message());
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  std::printf("%s\n", nlohmann::json(tok->Encode(text)).dump().c_str());
  return kExitOk;
}

}  // namespace

void RegisterTokenize(CLI::App& app, CommandTable& table) {
  auto model_dir = std::make_shared<std::string>();
  auto* tokenize = app.add_subcommand("tokenize", "print the token ids of stdin as a JSON array");
  tokenize->add_option("--model", *model_dir, "checkpoint or tokenizer directory (vocab.json, merges.txt, "
                                              "tokenizer_config.json)")->required();
  table.Add(tokenize, [model_dir] { return CmdTokenize(*model_dir); });
}

}  // namespace dice::cli
