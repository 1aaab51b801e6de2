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
// Thread-safety: every method may be called from any thread. Writes (and
// the other calls not named below) are serialised on the Store's one write
// connection by a mutex; GetWinner, ListWinnerPage, ListWinners and
// ListAttempts run on read-only connections of their own (up to 4, opened
// on demand; WAL lets them read beside the writer), so they wait neither
// for a write nor for each other. A read that starts after a write returned
// sees it. Use one Store per process (or several — SQLite locking keeps
// them consistent).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dice/cache/tuning_claim.h"
#include "dice/core/status.h"

namespace dice::cache {

/// Current schema version written to meta('schema_version').
/// v1: winners, attempts, meta. v2: winners gain verified, pulled_from,
/// hits and last_used_at (old rows: verified, local, 0 hits, never used).
/// v3: indexes for the paged summary queries (Store::ListWinnerPage); no
/// column changes. v4: table tuning_claims (tuning_claim.h: who is tuning a
/// task key, until when); winners and attempts unchanged. v5: winners
/// rebuilt with its summary columns before the IR, launch plan, source and
/// cubin (same columns, rows, rowids and indexes; a page of summaries no
/// longer reads the payload), and table winner_counts (rows per arch and
/// verified, kept by triggers) for the list's total.
inline constexpr int kSchemaVersion = 5;

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
  /// True when this kernel was verified and timed on this machine's GPU (a
  /// local tune, or a pulled entry re-verified here) or explicitly trusted
  /// (`--trust-remote`). Pulled/imported entries arrive false and are never
  /// served until re-verified (DESIGN.md "HTTP sharing").
  bool verified = true;
  std::string pulled_from;       ///< "" = tuned here; else the server URL or bundle file it came from
  int64_t hits = 0;              ///< times the runtime loaded it (RecordHit); kept across PutWinner
  int64_t last_used_at = 0;      ///< unix seconds of the last RecordHit, 0 = never
};

/// What `Stats` reports about a cache (for `dice cache stats`).
struct CacheStats {
  int64_t entries = 0;
  int64_t unverified = 0;          ///< entries with verified == false (not served)
  int64_t pulled = 0;              ///< entries with a non-empty pulled_from
  int64_t hits = 0;                ///< sum of hits over all entries
  int64_t payload_bytes = 0;       ///< sum of source + cubin + launch plan + IR bytes
  int64_t file_bytes = 0;          ///< database file size (page_count * page_size), bytes
  double geomean_speedup = 0;      ///< geometric mean of speedup over entries with speedup > 0 (0 if none)
  double total_speedup = 0;        ///< sum(baseline_us) / sum(best_us): one call of every group, before/after
  std::vector<std::pair<std::string, int64_t>> archs;  ///< (arch, entries), sorted by arch
};

/// Bounds for `CollectGarbage`; a zero field means "no bound".
struct GcOptions {
  int64_t max_payload_bytes = 0;   ///< keep the summed payload (CacheStats::payload_bytes) at most this
  int64_t older_than_s = 0;        ///< drop entries neither created nor used within this many seconds
  int64_t now = 0;                 ///< unix seconds taken as "now" (0 = the clock)
};

/// What `CollectGarbage` removed.
struct GcResult {
  int64_t removed = 0;             ///< winners removed (their attempts too)
  int64_t removed_bytes = 0;       ///< their payload bytes
  int64_t remaining = 0;           ///< winners left
  int64_t remaining_bytes = 0;     ///< payload bytes left
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

/// Orders of Store::ListWinnerPage; each is served by its own index
/// (schema v3), so a page never sorts the table. Ties break on arch, then
/// verified, then insertion order: a total order, stable across pages while
/// the rows do not change.
enum class WinnerOrder {
  kNewest,   ///< created_at descending (the list route's order)
  kSpeedup,  ///< speedup descending
  kHits,     ///< hits descending (RecordHit: loads by clients)
};

/// Filters and window of Store::ListWinnerPage. Empty strings and -1 mean
/// "any".
struct WinnerQuery {
  std::string task_key;        ///< only this key (64 hex) when set
  std::string arch;            ///< exact arch, "sm_90"
  std::string op;              ///< an op name the group's IR uses ("relu": a line "%n = relu(");
                               ///< 1..32 characters of [a-z0-9_]
  int verified = -1;           ///< 1 verified only, 0 unverified only, -1 both
  WinnerOrder order = WinnerOrder::kNewest;
  int64_t offset = 0;          ///< matching rows skipped, >= 0
  std::string after;           ///< keyset page: the rows that follow this key's row in the order
                               ///< (64 hex; kNewest only; offset must be 0); "" = from the start
  int limit = 50;              ///< rows returned at most, 0..kMaxWinnerPageLimit (0: only count)
  bool with_source = false;    ///< also return the CUDA source (never the cubin)
  bool check_content = false;  ///< read each returned row's payload and check ContentHash
};

/// Largest WinnerQuery::limit.
inline constexpr int kMaxWinnerPageLimit = 10000;

/// One row of a WinnerPage.
struct WinnerSummary {
  WinnerRecord record;           ///< every field except cubin (empty); source only with with_source
  int64_t cubin_bytes = 0;       ///< length of the stored cubin, bytes
  bool content_checked = false;  ///< WinnerQuery::check_content was set
  bool content_ok = true;        ///< when checked: content_hash == ContentHash(source, cubin, plan)
};

/// What Store::ListWinnerPage returns.
struct WinnerPage {
  std::vector<WinnerSummary> entries;  ///< at most limit rows, in the query's order
  int64_t total = 0;                   ///< rows matching the filters on every page
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
  /// forward in one transaction. Busy timeout: 10 s. Migrating a file
  /// older than v5 copies every winner once, cubins included (81 s for the
  /// 100k-entry, 6.8 GB benchmark file on tmpfs and 2 cores; the file does
  /// not grow), and needs free space of about the winners' size for the WAL
  /// meanwhile (truncated afterwards); another process opening the file
  /// meanwhile waits up to the busy timeout, then fails with kIoError.
  static Expected<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// The winner for `task_key`, or nullopt. Errors: kIoError/kCorrupt;
  /// kCorrupt also when the row's content_hash does not match its
  /// source/cubin/plan (a damaged row is never served).
  Expected<std::optional<WinnerRecord>> GetWinner(const std::string& task_key);

  /// Inserts or replaces the winner for rec.task_key. A verified row is
  /// never replaced by an unverified one and an unverified row always gives
  /// way to a verified one; otherwise the existing row stays when its
  /// speedup is >= rec.speedup (ties keep the earlier). Returns true when
  /// rec was stored (its hits/last_used_at are carried over from the row it
  /// replaces when rec has none). Runs in one BEGIN IMMEDIATE transaction (the
  /// compare and the write are atomic across processes). Sets created_at to
  /// now when 0 and always recomputes content_hash (ContentHash).
  /// Errors: kInvalidArgument for an empty task key; kIoError.
  Expected<bool> PutWinner(WinnerRecord rec);

  /// Removes the winner (and its attempts). Returns false when absent.
  Expected<bool> RemoveWinner(const std::string& task_key);

  /// All winners without source/cubin (for `dice cache ls`), newest first.
  /// Reads every row: for a page, use ListWinnerPage.
  Expected<std::vector<WinnerRecord>> ListWinners();

  /// One page of winner summaries (no cubin) matching `query`'s filters, in
  /// its order, plus the number of matching rows. The rows are picked on an
  /// index (schema v3: created_at, arch + created_at, speedup, hits, each
  /// with arch and verified), so the cost is that of the rows skipped in the
  /// index plus the rows returned, not of the table; an `op` filter reads
  /// the IR of each row scanned (a table scan when no other filter narrows
  /// it). The pick and the read are two statements: a row removed between
  /// them (another process) is left out. With `after` set the page starts
  /// right after that key's row (its created_at, arch, verified and rowid:
  /// one index seek, however deep); the row need not match the filters.
  /// Errors: kInvalidArgument for a
  /// negative offset, a limit outside 0..kMaxWinnerPageLimit, a malformed
  /// op or verified not in {-1, 0, 1}, an `after` with an offset, another
  /// order than kNewest or a task key filter; kNotFound when no row has the
  /// `after` key; kIoError/kCorrupt from SQLite.
  Expected<WinnerPage> ListWinnerPage(const WinnerQuery& query);

  /// Counts one use of the winner: hits += 1, last_used_at = now. Called by
  /// the runtime when it loads a winner (once per process and key, never on
  /// the launch path). Returns false when the key is absent. Errors: kIoError.
  Expected<bool> RecordHit(const std::string& task_key);

  /// Marks the winner verified (after re-verification on this GPU) with the
  /// times measured here. Returns false when the key is absent.
  /// Errors: kInvalidArgument for best_us <= 0; kIoError.
  Expected<bool> MarkVerified(const std::string& task_key, double baseline_us, double best_us);

  /// Removes the winner only when it is unverified (a pulled kernel that
  /// failed re-verification), keeping the key's attempts so the failure is
  /// remembered. Returns false when absent or verified. Errors: kIoError.
  Expected<bool> RemoveUnverifiedWinner(const std::string& task_key);

  /// Entry counts, per-arch counts, hits, sizes and speedups (CacheStats).
  /// Errors: kIoError.
  Expected<CacheStats> Stats();

  /// Removes winners (and their attempts) in one transaction: first every
  /// winner whose max(created_at, last_used_at) is older than
  /// `older_than_s`, then least recently used first (max of the two times,
  /// then the smaller speedup) until the payload is within
  /// `max_payload_bytes`; then checkpoints the WAL and VACUUMs so the file
  /// shrinks. Errors: kInvalidArgument for a negative bound; kIoError.
  Expected<GcResult> CollectGarbage(const GcOptions& options);

  /// PRAGMA integrity_check, then the list's row counts (winner_counts,
  /// kept by triggers) against the winners table: OK, or kCorrupt with
  /// SQLite's first findings or the first (arch, verified) whose count is
  /// off (a write the triggers do not follow, such as INSERT OR IGNORE over
  /// an existing key by hand).
  Status CheckIntegrity();

  /// Records one attempt (insert or replace by (task_key, candidate_hash));
  /// created_at is set to now when 0. Errors: kInvalidArgument for an empty
  /// key or hash; kIoError.
  Status RecordAttempt(AttemptRecord rec);
  /// Attempts made for `task_key`, oldest first.
  Expected<std::vector<AttemptRecord>> ListAttempts(const std::string& task_key);
  /// True when (task_key, candidate_hash) was already attempted.
  Expected<bool> WasAttempted(const std::string& task_key, const std::string& candidate_hash);

  /// Claims the right to tune `task_key` for `ttl_s` seconds from `now`
  /// (unix seconds; 0 = the clock), in one BEGIN IMMEDIATE transaction
  /// (tuning_claim.h). The caller gets the claim when there is none, when it
  /// is its own (renewed: the expiry moves), when the claim has expired
  /// (expires_at <= now) or when OwnerIsGone says its owner process is gone
  /// (both: took_over). Otherwise holder is the other owner's claim and
  /// nothing is written. Errors: kInvalidArgument for an empty key or
  /// ttl_s <= 0; kIoError.
  Expected<ClaimResult> ClaimTuning(const std::string& task_key, const ClaimOwner& owner, int64_t ttl_s,
                                    int64_t now = 0);
  /// Drops `owner`'s claim on `task_key` (the winner or the failure is
  /// stored). Returns false when the key has no claim of that owner (never
  /// claimed, already released, or taken over by another). Errors: kIoError.
  Expected<bool> ReleaseTuningClaim(const std::string& task_key, const ClaimOwner& owner);
  /// The claim row of `task_key`, expired or not, or nullopt. Errors: kIoError.
  Expected<std::optional<TuningClaim>> GetTuningClaim(const std::string& task_key);

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
