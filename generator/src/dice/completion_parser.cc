// completion_parser.cc — model answer -> extension-form candidate
// (completion_parser.h).
#include "dice/generator/completion_parser.h"

#include "dice/generator/prompts.h"

namespace dice::generator {
namespace {

bool Blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// Position of the opening triple quote of the string assigned to `source`
// (`source = """`, any spacing, optional r/R prefix), else of the first
// triple-quoted string; npos when there is none. Sets *quote to the quote.
size_t FindSourceString(const std::string& code, std::string* quote) {
  size_t first = std::string::npos;
  for (const char* q : {"\"\"\"", "'''"}) {
    size_t p = code.find(q);
    if (p < first) {
      first = p;
      *quote = q;
    }
  }
  size_t at = 0;
  while ((at = code.find("source", at)) != std::string::npos) {
    size_t p = at + 6;
    while (p < code.size() && (code[p] == ' ' || code[p] == '\t')) ++p;
    if (p < code.size() && code[p] == '=') {
      ++p;
      while (p < code.size() && (code[p] == ' ' || code[p] == '\t')) ++p;
      if (p < code.size() && (code[p] == 'r' || code[p] == 'R')) ++p;
      if (code.compare(p, 3, "\"\"\"") == 0 || code.compare(p, 3, "'''") == 0) {
        *quote = code.substr(p, 3);
        return p;
      }
    }
    at += 6;
  }
  return first;
}

}  // namespace

Expected<std::string> ParseExtensionSource(const std::string& generated) {
  auto code = ExtractCodeBlock(generated);
  if (!code.ok()) return code.status();
  std::string source;
  std::string quote;
  const size_t open = FindSourceString(*code, &quote);
  if (open != std::string::npos) {
    const size_t body = open + 3;
    const size_t close = code->find(quote, body);
    if (close == std::string::npos) {
      return Status(StatusCode::kInvalidArgument,
                    "the CUDA source string is cut off (an opening " + quote + " with no closing one)");
    }
    source = code->substr(body, close - body);
  } else {
    source = *code;
  }
  if (Blank(source)) return Status(StatusCode::kInvalidArgument, "the CUDA source in the answer is empty");
  if (source.find("dice_forward") == std::string::npos) {
    return Status(StatusCode::kInvalidArgument,
                  "the CUDA source does not define dice_forward (the host function the skeleton declares)");
  }
  return source;
}

Expected<Candidate> ParseExtensionCandidate(const std::string& generated, const std::string& origin) {
  auto source = ParseExtensionSource(generated);
  if (!source.ok()) return source.status();
  Candidate c;
  c.origin = origin;
  c.form = CandidateForm::kExtension;
  c.source = std::move(*source);
  return c;
}

}  // namespace dice::generator
