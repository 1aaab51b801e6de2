// Known-good injection schedule: see dice/training/injection.h. Torch-free.
#include "dice/training/injection.h"

namespace dice::training {

Expected<InjectionSchedule::Mode> InjectionSchedule::ParseMode(const std::string& name) {
  if (name == "always") return Mode::kAlways;
  if (name == "task-earned") return Mode::kUntilTaskEarned;
  if (name == "any-earned") return Mode::kUntilAnyEarned;
  return Status(StatusCode::kInvalidArgument,
                "--inject-until must be always, task-earned or any-earned, got '" + name + "'");
}

const char* InjectionSchedule::ModeName(Mode mode) {
  switch (mode) {
    case Mode::kAlways:
      return "always";
    case Mode::kUntilTaskEarned:
      return "task-earned";
    case Mode::kUntilAnyEarned:
      return "any-earned";
  }
  return "?";
}

InjectionSchedule::InjectionSchedule(Mode mode, int64_t threshold)
    : mode_(mode), threshold_(threshold < 1 ? 1 : threshold) {}

bool InjectionSchedule::ShouldInject(const std::string& task_id) const {
  switch (mode_) {
    case Mode::kAlways:
      return true;
    case Mode::kUntilAnyEarned:
      return total_ < threshold_;
    case Mode::kUntilTaskEarned: {
      auto it = earned_.find(task_id);
      return it == earned_.end() || it->second < threshold_;
    }
  }
  return true;
}

void InjectionSchedule::Report(const std::string& task_id, int64_t own_rewarded) {
  if (own_rewarded <= 0) return;
  earned_[task_id] += own_rewarded;
  total_ += own_rewarded;
}

int64_t InjectionSchedule::tasks_earned() const {
  int64_t n = 0;
  for (const auto& [id, count] : earned_) n += count >= threshold_;
  return n;
}

}  // namespace dice::training
