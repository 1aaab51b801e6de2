// dice/torch_ext/group_table.h — the process-wide table of fusion groups.
//
// Every fusion group a frontend forms (the TorchScript pass, fusion_pass.h;
// the FX frontend through dice::register_group, run_group.h) is registered
// once and gets a process-wide id (1, 2, ...; the dice_group_id attribute of
// a dice::FusionGroup node). Groups are never unregistered. The per-group
// run-time statistics (group_stats.h) are kept by id. No torch types.
// Thread-safe (one mutex; no call here is on a kernel launch's path).
#pragma once

#include "dice/core/status.h"
#include "dice/torch_ext/capture_result.h"

namespace dice::torch_ext {

/// Registers `group` and returns its new id (the first group gets 1). The
/// same IR registered twice gets two ids (run_group.h deduplicates by text).
int RegisterGroup(const CapturedGroup& group);

/// The group registered with `id`. Errors: kNotFound naming the id.
Expected<CapturedGroup> GetRegisteredGroup(int id);

}  // namespace dice::torch_ext
