// template_generator.cc — TemplateGenerator (templates.h): lowers the group
// and dispatches to the elementwise or row family.
#include <string>

#include "dice/generator/templates.h"
#include "families.h"
#include "lowering.h"

namespace dice::generator {

Expected<std::vector<Candidate>> TemplateGenerator::Generate(const Task& task, int max_candidates) {
  if (max_candidates <= 0) return std::vector<Candidate>{};
  auto lowered = tmpl::Lower(task);
  if (!lowered.ok()) return lowered.status();
  if (tmpl::Numel(lowered->F) == 0) {
    return Status(StatusCode::kUnsupported, "templates: empty iteration space (a zero-sized tensor)");
  }
  if (lowered->num_reduces == 0) return tmpl::ElementwiseCandidates(*lowered, max_candidates, task.target);
  return tmpl::RowCandidates(*lowered, max_candidates, task.target);
}

namespace tmpl {

int ArchNumber(const std::string& arch) {
  int sm = 0;
  if (arch.rfind("sm_", 0) == 0) {
    for (size_t i = 3; i < arch.size() && arch[i] >= '0' && arch[i] <= '9'; ++i) sm = sm * 10 + (arch[i] - '0');
  }
  return sm;
}

}  // namespace tmpl

}  // namespace dice::generator
