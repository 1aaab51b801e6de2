// Links the installed dice::core alone (torch-free): the IR's input specs and task keys.
#include <cstdio>

#include "dice/core/ir.h"

int main() {
  auto spec = dice::ir::ParseInputSpec("8x8:f32");
  if (!spec.ok()) return 1;
  std::printf("core_consumer: %s\n", spec->ToString().c_str());
  return spec->ToString() == "f32[8,8]" ? 0 : 1;
}
