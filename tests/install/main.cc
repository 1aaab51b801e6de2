// Links the installed dice::torch_ext and uses each layer's public headers.
#include <cstdio>
#include <string>

#include "dice/cache/store.h"
#include "dice/generator/templates.h"
#include "dice/core/ir.h"
#include "dice/runtime/worker_pool.h"
#include "dice/torch_ext/optimize.h"

int main() {
  dice::torch_ext::EnsureRegistered();
  auto spec = dice::ir::ParseInputSpec("8x8:f32");
  if (!spec.ok()) return 1;
  dice::TemplateGenerator gen;
  std::printf("consumer: %s %s %s worker=%s\n", spec->ToString().c_str(), gen.name().c_str(),
              dice::torch_ext::ModeName(dice::torch_ext::Mode::kCache), dice::ResolveWorkerPath("").c_str());
  return gen.name() == "templates" ? 0 : 1;
}
