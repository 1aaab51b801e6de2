// dice/training/split.h — the train / validation / held-out split of CuKe
// tasks (issue 21 item 1: held-out sets with power). Torch-free.
//
// A task's split is fixed before training by a hash, never by a random draw:
// the split key's sha256, its first 8 hex digits read as a fraction x of
// 2^32, gives
//   x * 100 <  heldout_percent                        -> "heldout"
//   x * 100 <  heldout_percent + validation_percent   -> "validation"
//   otherwise                                         -> "train".
// The split key of a task made from a fusion group (kinds device,
// device_infill; sweep catalog entries) is its op-chain (OpChainKey): every
// shape, dtype and attribute variant of the same ops goes to one split, so
// the held-out set measures op-chains the model never saw, not only unseen
// shapes. Other tasks (corpus items, no IR) are keyed by their task hash
// (the normalised reference's sha256). Checkpoints and settings are chosen
// on "validation"; "heldout" is only reported.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dice/core/ir.h"
#include "dice/core/status.h"

namespace dice::training {

struct SweepEntry;

/// The split percentages; each in [0, 100] and their sum <= 100.
struct SplitOptions {
  double heldout_percent = 30.0;     ///< share of split keys held out (reported, never trained on or tuned on)
  double validation_percent = 20.0;  ///< share of split keys for choosing checkpoints and settings
};

/// kInvalidArgument naming the flag (--heldout-percent, --validation-percent)
/// when a share is outside [0, 100] or both together exceed 100.
Status CheckSplitOptions(const SplitOptions& options);

/// The op-chain of a fusion group: the sorted multiset of its non-constant
/// op names joined by '+' ("add+gelu+mul" for bias + GELU + scale, in any
/// order; "relu" for a lone ReLU). Attributes (dims, GELU approximation,
/// scalars), dtypes and shapes are not part of it, so a held-out group's op
/// multiset appears in no training task (issue 21's runtime goal counts such
/// groups). A graph of constants only gives "".
std::string OpChainKey(const ir::Graph& graph);

/// The split ("train" | "validation" | "heldout") of split key `key` (an
/// op-chain, or "task:<task hash>"); see the file comment. Deterministic.
/// REQUIRES: CheckSplitOptions(options).ok().
const char* SplitOfKey(const std::string& key, const SplitOptions& options);

/// True when an example of split `example_split` belongs to the wanted split
/// `wanted` ("train", "validation", "heldout" or "all"). Datasets written
/// before splits existed have "" for train.
bool InSplit(const std::string& example_split, const std::string& wanted);

/// Tasks and op-chains per split of a sweep catalog (one task per entry and
/// shape set), as `dice train sweep` and `dice train dataset` print them.
struct CatalogSplit {
  struct Part {
    int64_t tasks = 0;
    int64_t level1_tasks = 0;  ///< tasks of single-op groups
    std::vector<std::string> op_chains;  ///< sorted, unique
  };
  std::map<std::string, Part> parts;  ///< by split name; all three present
};

/// Splits a catalog's tasks by op-chain. REQUIRES: CheckSplitOptions(options).ok().
CatalogSplit SplitCatalog(const std::vector<SweepEntry>& catalog, const SplitOptions& options);

/// "train 240 tasks (60 op-chains), validation 60 (15), heldout 100 (25)".
std::string DescribeCatalogSplit(const CatalogSplit& split);

}  // namespace dice::training
