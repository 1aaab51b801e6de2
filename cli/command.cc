// cli/command.h: the pieces every command shares.
#include "command.h"

#include <cstdio>

namespace dice::cli {

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "dice: error: %s\n", message.c_str());
  return code;
}

}  // namespace dice::cli
