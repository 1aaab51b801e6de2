// error_headline.cc — ErrorHeadline (dice/runtime/error_headline.h).
#include "dice/runtime/error_headline.h"

namespace dice::runtime {

std::string ErrorHeadline(const std::string& error, size_t max_chars) {
  const size_t end = error.find('\n');
  std::string line = error.substr(0, end);
  if (end != std::string::npos && !line.empty() && line.back() == ':') {
    size_t at = end + 1;
    while (at < error.size()) {
      const size_t next = error.find('\n', at);
      std::string cause = error.substr(at, next == std::string::npos ? std::string::npos : next - at);
      const size_t first = cause.find_first_not_of(" \t\r");
      if (first != std::string::npos) {
        line += " " + cause.substr(first);
        break;
      }
      if (next == std::string::npos) break;
      at = next + 1;
    }
  }
  if (max_chars > 0 && line.size() > max_chars) line = line.substr(0, max_chars) + "...";
  return line;
}

}  // namespace dice::runtime
