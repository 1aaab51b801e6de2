// The kernel cache's schema and migrations (schema.h).
#include "schema.h"

#include "sqlite_util.h"

namespace dice::cache {

constexpr MigrationStep kMigrationSteps[kSchemaVersion] = {
    {0, "the initial tables: winners, attempts, meta",
     "CREATE TABLE winners ("
     "  task_key TEXT PRIMARY KEY NOT NULL,"
     "  graph_canonical TEXT NOT NULL,"
     "  input_specs TEXT NOT NULL,"
     "  arch TEXT NOT NULL,"
     "  gpu_name TEXT NOT NULL,"
     "  origin TEXT NOT NULL,"
     "  candidate_hash TEXT NOT NULL,"
     "  source TEXT NOT NULL,"
     "  cubin BLOB NOT NULL,"
     "  launch_plan_json TEXT NOT NULL,"
     "  baseline_us REAL NOT NULL,"
     "  best_us REAL NOT NULL,"
     "  speedup REAL NOT NULL,"
     "  reduced_precision INTEGER NOT NULL,"
     "  versions_json TEXT NOT NULL,"
     "  created_at INTEGER NOT NULL,"
     "  content_hash TEXT NOT NULL);"
     "CREATE TABLE attempts ("
     "  task_key TEXT NOT NULL,"
     "  candidate_hash TEXT NOT NULL,"
     "  origin TEXT NOT NULL,"
     "  outcome TEXT NOT NULL,"
     "  error TEXT NOT NULL,"
     "  time_us REAL NOT NULL,"
     "  created_at INTEGER NOT NULL,"
     "  PRIMARY KEY (task_key, candidate_hash));"
     "CREATE TABLE meta ("
     "  key TEXT PRIMARY KEY NOT NULL,"
     "  value TEXT NOT NULL);"
     "INSERT INTO meta(key, value) VALUES ('created_by', 'dice');"},
    // Rows written by v1 were tuned and verified locally, never used as far
    // as anyone counted: verified 1, local, 0 hits, never used.
    {1, "provenance and use of each winner: verified, pulled_from, hits, last_used_at",
     "ALTER TABLE winners ADD COLUMN verified INTEGER NOT NULL DEFAULT 1;"
     "ALTER TABLE winners ADD COLUMN pulled_from TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE winners ADD COLUMN hits INTEGER NOT NULL DEFAULT 0;"
     "ALTER TABLE winners ADD COLUMN last_used_at INTEGER NOT NULL DEFAULT 0;"},
    // Store::ListWinnerPage picks a page's rows on one of these, never by
    // sorting the table: columns after the cubin (created_at, speedup,
    // hits, verified) are only reachable through its overflow pages, so a
    // sort or filter on the table reads every payload. Each index carries
    // the filter columns (arch, verified) so a filtered page stays in the
    // index, and nothing wider (an entry is ~20 bytes: a deep page skips
    // few index pages). Building them reads every row once.
    {2, "indexes for the paged summary queries: newest, arch + newest, speedup, hits",
     "CREATE INDEX winners_newest ON winners(created_at DESC, arch, verified);"
     "CREATE INDEX winners_arch_newest ON winners(arch, created_at DESC, verified);"
     "CREATE INDEX winners_speedup ON winners(speedup DESC, arch, verified);"
     "CREATE INDEX winners_hits ON winners(hits DESC, arch, verified);"},
    // Processes sharing one cache dir (torchrun ranks) meet the same untuned
    // key at once: one claims it (Store::ClaimTuning, tuning_claim.h) and
    // tunes, the others serve the fallback. A row lives from the claim until
    // the owner stores its result (or the claim expires). No other table
    // changes, so a v3 file migrates by adding this one.
    {3, "tuning claims: which process tunes a task key, until when",
     "CREATE TABLE tuning_claims ("
     "  task_key TEXT PRIMARY KEY NOT NULL,"
     "  owner_pid INTEGER NOT NULL,"
     "  owner_host TEXT NOT NULL,"
     "  owner_token TEXT NOT NULL,"
     "  claimed_at INTEGER NOT NULL,"
     "  expires_at INTEGER NOT NULL);"},
    // The list route (Store::ListWinnerPage, store_page.cc) reads a page's
    // rows' summaries, and until v5 every summary column but the first
    // seven lay after source and cubin: each row walked the cubin's
    // overflow chain, one page read per 4 KiB (~17 at the 100k benchmark's
    // mean of 66 KB; docs/PERF.md, 2026-12-06). So winners is rebuilt with
    // the small fixed-size and short columns first, then the IR, the
    // launch plan, the source and the cubin. SQLite keeps a row's columns
    // in declared order and cannot move one in place, so the rows are
    // moved to a new table, 64 at a time, each batch deleted from the old
    // one as it is copied: the pages a batch frees hold the next, so the
    // file does not grow by the table's size (the WAL does, until the
    // checkpoint after the migration). Rowids are kept (a page's order
    // ends in the rowid), as are the primary key and the v3 indexes
    // (dropped first: keeping them up to date during the move is wasted).
    //
    // And the list's total comes from winner_counts, rows per (arch,
    // verified) kept by triggers, instead of counting an index (3-5 ms at
    // 100k entries, again after every write). The triggers count what
    // INSERT, INSERT OR REPLACE, UPDATE and DELETE do; a REPLACE that
    // removes a row fires no delete trigger (with recursive_triggers off,
    // SQLite's default), so winners_count_replaced takes the replaced row
    // off before the insert. INSERT OR IGNORE and UPSERT over an existing
    // key would miscount; nothing in DICE writes them, and
    // Store::CheckIntegrity compares the counts with the table.
    {4, "winners with the summary columns before the payload; rows per (arch, verified) kept by triggers",
     "DROP INDEX winners_newest;"
     "DROP INDEX winners_arch_newest;"
     "DROP INDEX winners_speedup;"
     "DROP INDEX winners_hits;"
     "CREATE TABLE winners_v5 ("
     "  task_key TEXT PRIMARY KEY NOT NULL,"
     "  arch TEXT NOT NULL,"
     "  verified INTEGER NOT NULL DEFAULT 1,"
     "  created_at INTEGER NOT NULL,"
     "  speedup REAL NOT NULL,"
     "  hits INTEGER NOT NULL DEFAULT 0,"
     "  last_used_at INTEGER NOT NULL DEFAULT 0,"
     "  baseline_us REAL NOT NULL,"
     "  best_us REAL NOT NULL,"
     "  reduced_precision INTEGER NOT NULL,"
     "  gpu_name TEXT NOT NULL,"
     "  origin TEXT NOT NULL,"
     "  candidate_hash TEXT NOT NULL,"
     "  input_specs TEXT NOT NULL,"
     "  content_hash TEXT NOT NULL,"
     "  pulled_from TEXT NOT NULL DEFAULT '',"
     "  versions_json TEXT NOT NULL,"
     "  graph_canonical TEXT NOT NULL,"
     "  launch_plan_json TEXT NOT NULL,"
     "  source TEXT NOT NULL,"
     "  cubin BLOB NOT NULL);",
     // One batch: the 64 lowest rowids left, copied then deleted (the same
     // 64: nothing else writes inside the transaction).
     "INSERT INTO winners_v5 (rowid, task_key, arch, verified, created_at, speedup, hits, last_used_at,"
     "  baseline_us, best_us, reduced_precision, gpu_name, origin, candidate_hash, input_specs, content_hash,"
     "  pulled_from, versions_json, graph_canonical, launch_plan_json, source, cubin)"
     " SELECT rowid, task_key, arch, verified, created_at, speedup, hits, last_used_at,"
     "  baseline_us, best_us, reduced_precision, gpu_name, origin, candidate_hash, input_specs, content_hash,"
     "  pulled_from, versions_json, graph_canonical, launch_plan_json, source, cubin"
     " FROM winners ORDER BY rowid LIMIT 64;"
     "DELETE FROM winners WHERE rowid IN (SELECT rowid FROM winners ORDER BY rowid LIMIT 64);",
     "DROP TABLE winners;"
     "ALTER TABLE winners_v5 RENAME TO winners;"
     "CREATE INDEX winners_newest ON winners(created_at DESC, arch, verified);"
     "CREATE INDEX winners_arch_newest ON winners(arch, created_at DESC, verified);"
     "CREATE INDEX winners_speedup ON winners(speedup DESC, arch, verified);"
     "CREATE INDEX winners_hits ON winners(hits DESC, arch, verified);"
     "CREATE TABLE winner_counts ("
     "  arch TEXT NOT NULL,"
     "  verified INTEGER NOT NULL,"
     "  n INTEGER NOT NULL,"
     "  PRIMARY KEY (arch, verified)) WITHOUT ROWID;"
     "INSERT INTO winner_counts (arch, verified, n)"
     " SELECT arch, verified, count(*) FROM winners GROUP BY arch, verified;"
     "CREATE TRIGGER winners_count_replaced BEFORE INSERT ON winners BEGIN"
     "  UPDATE winner_counts SET n = n - 1"
     "   WHERE (arch, verified) IN (SELECT arch, verified FROM winners WHERE task_key = NEW.task_key);"
     " END;"
     "CREATE TRIGGER winners_count_insert AFTER INSERT ON winners BEGIN"
     "  INSERT INTO winner_counts (arch, verified, n) VALUES (NEW.arch, NEW.verified, 1)"
     "   ON CONFLICT (arch, verified) DO UPDATE SET n = n + 1;"
     " END;"
     "CREATE TRIGGER winners_count_delete AFTER DELETE ON winners BEGIN"
     "  UPDATE winner_counts SET n = n - 1 WHERE arch = OLD.arch AND verified = OLD.verified;"
     " END;"
     "CREATE TRIGGER winners_count_update AFTER UPDATE OF arch, verified ON winners"
     " WHEN OLD.arch IS NOT NEW.arch OR OLD.verified IS NOT NEW.verified BEGIN"
     "  UPDATE winner_counts SET n = n - 1 WHERE arch = OLD.arch AND verified = OLD.verified;"
     "  INSERT INTO winner_counts (arch, verified, n) VALUES (NEW.arch, NEW.verified, 1)"
     "   ON CONFLICT (arch, verified) DO UPDATE SET n = n + 1;"
     " END;"},
};

namespace {

constexpr bool StepsAreInOrder() {
  for (int v = 0; v < kSchemaVersion; ++v) {
    if (kMigrationSteps[v].from_version != v) return false;
  }
  return true;
}
static_assert(StepsAreInOrder(), "kMigrationSteps[v] takes the schema from v to v + 1");

Status NewerSchemaError(const std::string& path, int64_t version) {
  return Status(StatusCode::kCorrupt,
                "cache database " + path + " has schema version " + std::to_string(version) +
                    ", newer than this build's " + std::to_string(kSchemaVersion) +
                    " (left untouched; use a newer DICE or another DICE_CACHE_DIR)");
}

Status ForeignDatabaseError(const std::string& path) {
  return Status(StatusCode::kCorrupt, "cache database " + path +
                                          " is a SQLite database but not a DICE cache "
                                          "(user_version 0 with existing tables); left untouched");
}

// meta('schema_version') = kSchemaVersion.
Status WriteMetaVersion(sqlite3* db, const std::string& path) {
  sqlite3_stmt* stmt = nullptr;
  const char* sql = "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?1)";
  int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return sqlite::Error(db, rc, path, std::string("prepare '") + sql + "'");
  sqlite::BindText(stmt, 1, std::to_string(kSchemaVersion));
  rc = sqlite3_step(stmt);
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) return sqlite::Error(db, rc, path, "write meta schema_version");
  return Status::Ok();
}

}  // namespace

Expected<int64_t> ReadSchemaVersion(sqlite3* db, const std::string& path) {
  sqlite3_stmt* stmt = nullptr;
  const char* sql =
      "SELECT (SELECT user_version FROM pragma_user_version),"
      " (SELECT count(*) FROM sqlite_master)";
  int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return sqlite::Error(db, rc, path, "read schema version");
  rc = sqlite3_step(stmt);
  int64_t version = 0, tables = 0;
  if (rc == SQLITE_ROW) {
    version = sqlite3_column_int64(stmt, 0);
    tables = sqlite3_column_int64(stmt, 1);
  }
  sqlite3_finalize(stmt);
  if (rc != SQLITE_ROW) return sqlite::Error(db, rc, path, "read schema version");
  if (version > kSchemaVersion) return NewerSchemaError(path, version);
  if (version == 0 && tables > 0) return ForeignDatabaseError(path);
  return version;
}

Status MigrateSchema(sqlite3* db, const std::string& path) {
  sqlite::Transaction txn(db, path);
  DICE_RETURN_IF_ERROR(txn.Begin());
  auto version = ReadSchemaVersion(db, path);
  if (!version.ok()) return version.status();
  if (*version == kSchemaVersion) return Status::Ok();  // rolled back: nothing written
  for (int64_t v = *version; v < kSchemaVersion; ++v) {
    const MigrationStep& step = kMigrationSteps[v];
    DICE_RETURN_IF_ERROR(sqlite::Exec(db, path, step.sql));
    if (step.batch_sql != nullptr) {
      do {
        DICE_RETURN_IF_ERROR(sqlite::Exec(db, path, step.batch_sql));
      } while (sqlite3_changes(db) > 0);
    }
    if (step.finish_sql != nullptr) DICE_RETURN_IF_ERROR(sqlite::Exec(db, path, step.finish_sql));
  }
  const std::string set_version = "PRAGMA user_version = " + std::to_string(kSchemaVersion);
  DICE_RETURN_IF_ERROR(sqlite::Exec(db, path, set_version.c_str()));
  DICE_RETURN_IF_ERROR(WriteMetaVersion(db, path));
  DICE_RETURN_IF_ERROR(txn.Commit());
  // Give the WAL's space back (the v5 step wrote the whole winners table
  // through it). Best effort: a reader of another process may hold it.
  sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
  return Status::Ok();
}

}  // namespace dice::cache
