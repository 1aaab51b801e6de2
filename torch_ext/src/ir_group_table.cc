// dice::run_group's groups by IR text (ir_group_table.h).
#include "ir_group_table.h"

#include <deque>
#include <shared_mutex>
#include <unordered_map>

#include "dice/torch_ext/group_table.h"
#include "group_record.h"

namespace dice::torch_ext {
namespace {

struct IrGroupTable {
  std::shared_mutex mu;
  std::deque<std::string> texts;  // owns the keys below (deque: stable addresses)
  std::unordered_map<std::string_view, std::shared_ptr<GroupOp>> by_text;  // given text and canonical text
};

IrGroupTable& IrGroups() {
  static IrGroupTable* t = new IrGroupTable;  // leaked like the rest of the process state
  return *t;
}

}  // namespace

Expected<std::shared_ptr<GroupOp>> FindOrAddIrGroup(std::string_view ir_text, const std::vector<std::string>* torch_ops,
                                                    GroupOpFactory make) {
  IrGroupTable& t = IrGroups();
  {
    // Hot path (every call): no allocation, a reader lock.
    std::shared_lock<std::shared_mutex> lock(t.mu);
    auto it = t.by_text.find(ir_text);
    if (it != t.by_text.end()) return it->second;
  }
  auto g = ir::Parse(ir_text);
  if (!g.ok()) return g.status().WithContext("dice IR");
  CapturedGroup group;
  group.canonical = ir::Canonical(*g);
  group.summary = ir::Summary(*g);
  if (torch_ops) group.torch_ops = *torch_ops;
  group.graph = *g;
  std::unique_lock<std::shared_mutex> lock(t.mu);
  auto it = t.by_text.find(group.canonical);
  if (it == t.by_text.end()) {
    t.texts.push_back(group.canonical);
    int id = RegisterGroup(group);
    it = t.by_text.emplace(std::string_view(t.texts.back()), make(std::move(group.graph), FindGroupRecord(id))).first;
  }
  std::shared_ptr<GroupOp> op = it->second;
  if (t.by_text.find(ir_text) == t.by_text.end()) {
    t.texts.emplace_back(ir_text);
    t.by_text.emplace(std::string_view(t.texts.back()), op);
  }
  return op;
}

}  // namespace dice::torch_ext
