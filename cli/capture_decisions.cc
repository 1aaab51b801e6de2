// cli/capture_decisions.cc — the capture's decisions as notices and report fields (capture_decisions.h).
#include "capture_decisions.h"

#include <string>

#include "dice/core/log.h"
#include "progress.h"

namespace dice::cli {

// The header says what each line shows.
void NoticeCaptureDecisions(const dice::torch_ext::OptimizeReport& layout) {
  const bool no_conv = layout.memory_format_reason.rfind("no conv region", 0) == 0;  // memory_format_pass.cc
  Notice(no_conv ? dice::LogLevel::kDebug : dice::LogLevel::kInfo, "dice: memory format: %s (%s)",
         layout.memory_format.c_str(), layout.memory_format_reason.c_str());
  auto line = [](bool shown, const char* what, const std::string& choice, const std::string& reason) {
    if (shown) Notice(dice::LogLevel::kInfo, "dice: %s: %s (%s)", what, choice.c_str(), reason.c_str());
  };
  line(layout.attention == "sdpa" || layout.attention_reason.rfind("no attention chain", 0) != 0, "attention",
       layout.attention, layout.attention_reason);
  line(!layout.conv_algorithm_reason.empty() && layout.conv_algorithm_reason.rfind("no conv", 0) != 0,
       "conv algorithm", layout.conv_algorithm, layout.conv_algorithm_reason);
  line(!layout.attention_backends.empty(), "attention backend", layout.attention_backend,
       layout.attention_backend_reason);
  if (layout.batch_norms_folded > 0 || layout.functional || layout.global_pools_as_mean > 0 ||
      layout.identity_copies_removed > 0) {
    Notice(dice::LogLevel::kInfo,
           "dice: capture: %d batch_norm(s) made a per-channel multiply-add, %d global pool(s) a mean, "
           "%d clone/detach copy(ies) removed%s",
           layout.batch_norms_folded, layout.global_pools_as_mean, layout.identity_copies_removed,
           layout.functional ? ", in-place ops made functional" : "");
  }
}

void CopyCaptureDecisions(const dice::torch_ext::OptimizeReport& layout, EndToEnd* e2e) {
  e2e->memory_format = layout.memory_format;
  e2e->memory_format_reason = layout.memory_format_reason;
  e2e->memory_format_us = layout.memory_format_us;
  e2e->attention = layout.attention;
  e2e->attention_reason = layout.attention_reason;
  e2e->attention_us = layout.attention_us;
  e2e->conv_algorithm = layout.conv_algorithm;
  e2e->conv_algorithm_reason = layout.conv_algorithm_reason;
  e2e->conv_algorithm_us = layout.conv_algorithm_us;
  e2e->attention_backend = layout.attention_backend;
  e2e->attention_backend_reason = layout.attention_backend_reason;
  e2e->attention_backends.clear();
  for (const auto& c : layout.attention_backends) e2e->attention_backends.push_back({c.backend, c.us, c.error});
  e2e->batch_norms_folded = layout.batch_norms_folded;
  e2e->functional = layout.functional;
  e2e->global_pools_as_mean = layout.global_pools_as_mean;
  e2e->identity_copies_removed = layout.identity_copies_removed;
}

}  // namespace dice::cli
