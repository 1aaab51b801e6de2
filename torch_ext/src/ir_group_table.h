// Private: the groups of dice::run_group (run_group.h), keyed by IR text.
//
// A graph frontend passes a group's IR text on every call; the table maps
// that text (as given, and canonical) to the group's op, registering the
// group (group_table.h) and making its op on first sight. Two texts with the
// same canonical form share one group and op. Entries are never removed. No
// torch types: the op is opaque here (defined in run_group.cc). Thread-safe;
// the lookup of a known text takes a reader lock and allocates nothing.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dice/core/ir.h"
#include "dice/core/status.h"

namespace dice::torch_ext {

class GroupOp;  // run_group.cc
struct GroupRecord;

/// Makes the op of a newly registered group.
using GroupOpFactory = std::shared_ptr<GroupOp> (*)(ir::Graph graph, GroupRecord* record);

/// The op of the group `ir_text`, registering the group (with `torch_ops`,
/// when given, as its framework op names) and making its op with `make` on
/// first sight of its canonical text. Errors: kInvalidArgument with the IR
/// parser's message, context "dice IR".
Expected<std::shared_ptr<GroupOp>> FindOrAddIrGroup(std::string_view ir_text, const std::vector<std::string>* torch_ops,
                                                    GroupOpFactory make);

}  // namespace dice::torch_ext
