// The process-wide fusion-group table (group_table.h, group_record.h).
#include "dice/torch_ext/group_table.h"

#include <memory>
#include <string>

#include "group_record.h"

namespace dice::torch_ext {
namespace {

struct GroupTable {
  std::mutex mu;  // guards groups
  std::vector<std::unique_ptr<GroupRecord>> groups;  // id = index + 1
};

GroupTable& Table() {
  static GroupTable* t = new GroupTable;  // leaked: the tuner thread may outlive static destruction
  return *t;
}

}  // namespace

int RegisterGroup(const CapturedGroup& group) {
  GroupTable& t = Table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto rec = std::make_unique<GroupRecord>();
  rec->id = static_cast<int>(t.groups.size()) + 1;
  rec->group = group;
  t.groups.push_back(std::move(rec));
  return t.groups.back()->id;
}

Expected<CapturedGroup> GetRegisteredGroup(int id) {
  GroupRecord* rec = FindGroupRecord(id);
  if (!rec) return Status(StatusCode::kNotFound, "no fusion group with id " + std::to_string(id));
  return rec->group;
}

GroupRecord* FindGroupRecord(int id) {
  GroupTable& t = Table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (id < 1 || static_cast<size_t>(id) > t.groups.size()) return nullptr;
  return t.groups[id - 1].get();
}

void NoteWinnerTimes(GroupRecord* rec, const std::string& task_key, double baseline_us, double best_us) {
  if (rec == nullptr) return;
  std::lock_guard<std::mutex> lock(rec->mu);
  rec->winner_times[task_key] = {baseline_us, best_us};
}

std::vector<GroupRecord*> AllGroupRecords() {
  GroupTable& t = Table();
  std::lock_guard<std::mutex> lock(t.mu);
  std::vector<GroupRecord*> out;
  out.reserve(t.groups.size());
  for (auto& g : t.groups) out.push_back(g.get());
  return out;
}

}  // namespace dice::torch_ext
