// template_generator.cc — TemplateGenerator (templates.h): lowers the group
// and dispatches to the elementwise or row family.
#include <string>

#include "dice/generator/templates.h"
#include "families.h"
#include "lowering.h"

namespace dice {

Expected<std::vector<Candidate>> TemplateGenerator::Generate(const Task& task, int max_candidates) {
  if (max_candidates <= 0) return std::vector<Candidate>{};
  auto lowered = tmpl::Lower(task);
  if (!lowered.ok()) return lowered.status();
  if (tmpl::Numel(lowered->F) == 0) {
    return Status(StatusCode::kUnsupported, "templates: empty iteration space (a zero-sized tensor)");
  }
  if (lowered->num_reduces == 0) return tmpl::ElementwiseCandidates(*lowered, max_candidates);
  return tmpl::RowCandidates(*lowered, max_candidates);
}

}  // namespace dice
