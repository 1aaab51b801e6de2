// dice/cache/store.h — the local kernel cache: a SQLite database.
//
// Tables (DESIGN.md "Cache"): `winners` (one row per task key: the best
// verified kernel, its cubin, launch plan, times, speedup, provenance,
// versions), `attempts` (candidate hash + outcome + error, so failed
// candidates are not retried) and `meta` (schema version, created-by).
// WAL journal, busy timeout, schema version with forward migrations; safe
// with several processes writing at once and after a kill -9 (SQLite's
// atomic commit). Torch-free.
//
// Thread-safety: a Store object serialises its own calls with a mutex; use
// one Store per process (or several — SQLite locking keeps them consistent).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dice/runtime/status.h"

namespace dice::cache {

/// Current schema version written to meta('schema_version').
inline constexpr int kSchemaVersion = 1;

/// A verified winner for one task key.
struct WinnerRecord {
  std::string task_key;          ///< 64 hex (Task::Key)
  std::string graph_canonical;   ///< ir::Canonical text of the group
  std::string input_specs;       ///< "f32[1024,8192];f32[8192]" (TensorSpec::ToString joined by ';')
  std::string arch;              ///< "sm_90"
  std::string gpu_name;          ///< "NVIDIA H200"
  std::string origin;            ///< generator + variant, "template:elementwise/b256/v4"
  std::string candidate_hash;    ///< Candidate::Hash
  std::string source;            ///< CUDA source
  std::string cubin;             ///< ELF bytes
  std::string launch_plan_json;  ///< LaunchPlan::ToJson
  double baseline_us = 0;        ///< PyTorch running the same subgraph, median µs
  double best_us = 0;            ///< this kernel, median µs
  double speedup = 0;            ///< baseline_us / best_us
  bool reduced_precision = false;
  std::string versions_json;     ///< {"driver":..,"nvrtc":..,"abi":..,"dice":..}
  int64_t created_at = 0;        ///< unix seconds (set by PutWinner when 0)
  std::string content_hash;      ///< sha256 of source+cubin+plan (set by PutWinner)
};

/// One candidate attempt for a task key.
struct AttemptRecord {
  std::string task_key;
  std::string candidate_hash;
  std::string origin;
  std::string outcome;   ///< "compile_error" | "verify_failed" | "crashed" | "timeout" | "slower" | "winner"
  std::string error;     ///< first lines of the log / reason
  double time_us = 0;    ///< median µs when timed, else 0
  int64_t created_at = 0;
};

class Store {
 public:
  /// Opens (creating if needed) the database at `path`; creates the parent
  /// directory. Errors: kIoError when the directory cannot be created or the
  /// file opened (names the path and errno text); kCorrupt when the file is
  /// not a SQLite database or its schema version is newer than this build's
  /// (the file is left untouched).
  /// Also kCorrupt (file untouched) for a SQLite database that is not a DICE
  /// cache (user_version 0 but tables present); kIoError when the file or its
  /// directory is not writable (WAL needs <path>-wal and <path>-shm beside it);
  /// kInvalidArgument for an empty path. Older schema versions are migrated
  /// forward in one transaction. Busy timeout: 10 s.
  static Expected<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// The winner for `task_key`, or nullopt. Errors: kIoError/kCorrupt;
  /// kCorrupt also when the row's content_hash does not match its
  /// source/cubin/plan (a damaged row is never served).
  Expected<std::optional<WinnerRecord>> GetWinner(const std::string& task_key);

  /// Inserts or replaces the winner for rec.task_key, keeping the existing
  /// row when its speedup is >= rec.speedup (ties keep the earlier). Returns
  /// true when rec was stored. Runs in one BEGIN IMMEDIATE transaction (the
  /// compare and the write are atomic across processes). Sets created_at to
  /// now when 0 and always recomputes content_hash (ContentHash).
  /// Errors: kInvalidArgument for an empty task key; kIoError.
  Expected<bool> PutWinner(WinnerRecord rec);

  /// Removes the winner (and its attempts). Returns false when absent.
  Expected<bool> RemoveWinner(const std::string& task_key);

  /// All winners without source/cubin (for `dice cache ls`), newest first.
  Expected<std::vector<WinnerRecord>> ListWinners();

  /// Records one attempt (insert or replace by (task_key, candidate_hash));
  /// created_at is set to now when 0. Errors: kInvalidArgument for an empty
  /// key or hash; kIoError.
  Status RecordAttempt(AttemptRecord rec);
  /// Attempts made for `task_key`, oldest first.
  Expected<std::vector<AttemptRecord>> ListAttempts(const std::string& task_key);
  /// True when (task_key, candidate_hash) was already attempted.
  Expected<bool> WasAttempted(const std::string& task_key, const std::string& candidate_hash);

  /// meta table access.
  Expected<std::optional<std::string>> GetMeta(const std::string& key);
  Status SetMeta(const std::string& key, const std::string& value);

  const std::string& path() const { return path_; }

 private:
  struct Impl;
  explicit Store(std::string path, std::unique_ptr<Impl> impl);
  std::string path_;
  std::unique_ptr<Impl> impl_;
};

/// sha256 (64 lowercase hex) of "<len>:" + field for source, cubin and
/// launch_plan_json in that order (length-prefixed, so bytes cannot shift
/// between fields unnoticed): the value PutWinner stores in content_hash and
/// GetWinner checks. Shared with the HTTP cache so both sides agree.
std::string ContentHash(const WinnerRecord& rec);

/// Default cache directory: $DICE_CACHE_DIR when set and non-empty, else
/// $HOME/.cache/dice, else /tmp/dice-cache-<uid> when HOME is unset.
std::string DefaultCacheDir();
/// Database file inside a cache directory: <dir>/kernels.db.
std::string DatabasePath(const std::string& cache_dir);

}  // namespace dice::cache
