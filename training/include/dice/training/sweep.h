// dice/training/sweep.h — `dice train sweep`: template sweeps as a CuKe
// source (issue 4, CuKe builder source (b)). Each fusion group of a catalog,
// at each of its shape sets, is tuned with the parametric templates by the
// runtime's Tuner (compile with NVRTC, verify against the reference
// executor, time against PyTorch on this GPU); winners go into a cache
// SQLite file, which `dice train dataset --cache-db FILE` turns into device
// examples (kept when their measured speedup passes --min-speedup). Without
// a GPU the sweep compiles every candidate and stores nothing (compile-only),
// as `dice tune` does. Torch-free.
//
// Catalog (JSON): [{"name": "softmax_last", "ir": "<dice-ir v1 canonical
// text>", "shapes": [["4096x4096:f32"], ["1024x16384:f32"]]}, ...]; one
// shape set per tuned task, one spec per graph input ("RxC:dtype", as
// `dice tune --input`). training/sweeps/templates.json is the default.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dice/core/ir.h"
#include "dice/core/status.h"

namespace dice::training {

/// One catalog entry: a fusion group and the shape sets it is tuned at.
struct SweepEntry {
  std::string name;
  ir::Graph graph;  ///< parsed and validated from the entry's "ir" (ir::Canonical text)
  std::vector<std::vector<ir::TensorSpec>> shapes;
};

/// Reads a catalog file. Errors: kNotFound / kIoError for the file;
/// kCorrupt naming the file and the entry (index and name) for bad JSON, a
/// missing field, IR that does not parse or validate, a bad spec, or a
/// shape set whose count or ranks do not match the graph's inputs.
Expected<std::vector<SweepEntry>> ReadSweepCatalog(const std::string& path);

struct SweepOptions {
  std::string catalog_path;     ///< JSON catalog (see above)
  std::string cache_db;         ///< SQLite cache the winners go to (created when absent)
  std::string only;             ///< "" = every entry; else a comma-separated list of names
  double budget_s = 60;         ///< per task, seconds
  int max_candidates = 16;      ///< template candidates per task
  int device = 0;               ///< CUDA ordinal
  bool compile_only = false;    ///< forced compile-only (also when there is no GPU)
};

/// One tuned task of the sweep.
struct SweepRow {
  std::string name;
  std::string shapes;       ///< "f32[4096,4096]"; ';' between inputs
  int tried = 0, compiled = 0, verified = 0;
  double baseline_us = 0;   ///< PyTorch on the same group, median µs (0 compile-only)
  double best_us = 0;       ///< winner, median µs (0 when none)
  double speedup = 0;       ///< baseline_us / best_us (0 when none)
  std::string winner_origin;
  bool from_cache = false;  ///< the cache already held a verified winner: not re-tuned
};

struct SweepReport {
  std::vector<SweepRow> rows;
  int tasks = 0, winners = 0, compiled = 0;
  bool compile_only = false;
  std::string gpu;          ///< device name ("" compile-only)
  double seconds = 0;
};

/// Runs the sweep; a task whose tuning fails is logged and counted, the
/// sweep goes on. Errors: those of ReadSweepCatalog; kInvalidArgument for
/// an --only name not in the catalog; the cache's errors opening cache_db.
Expected<SweepReport> RunSweep(const SweepOptions& options, const std::function<void(const std::string&)>& log);

}  // namespace dice::training
