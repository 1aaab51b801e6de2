// cache/src/schema.h — the kernel cache's versioned SQLite schema
// (DESIGN.md "Cache") and its forward migrations. Private to cache/src;
// the queries live in store.cc.
//
// The schema version is PRAGMA user_version (mirrored in
// meta('schema_version')). Version 0 is an empty file; each MigrationStep
// takes the schema from `from_version` to `from_version + 1`, and the steps
// run in order, inside one BEGIN IMMEDIATE transaction, so concurrent
// openers migrate exactly once and a crash leaves the old version intact.
// A file with a newer version, or a SQLite database that is not a DICE
// cache, is refused and never written.
//
// To change the schema: append one step, bump kSchemaVersion in
// dice/cache/store.h, and teach store.cc's queries the new columns; old rows
// get the new columns' defaults. Every query names the winners columns it
// reads or writes (kWinnerColumns, store_impl.h), never `SELECT *` or
// `INSERT ... VALUES` by position: v5 reordered them.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "dice/cache/store.h"
#include "dice/core/status.h"

namespace dice::cache {

/// One forward migration: SQL text (DDL, possibly several statements) that
/// takes the schema from `from_version` to `from_version + 1`. MigrateSchema
/// runs `sql` once, then `batch_sql` (when set) again and again until its
/// last statement changes no row, then `finish_sql` (when set) once, all in
/// the one migration transaction. The batch form moves a table's rows a few
/// at a time, deleting each batch from the old table as it is copied, so
/// the pages it frees hold the next batch and the file does not grow by
/// the table's size (v5, which rebuilds winners).
struct MigrationStep {
  int from_version;
  const char* what;  ///< one line for readers: what the step adds and why
  const char* sql;
  const char* batch_sql = nullptr;   ///< repeated until its last statement changes no row
  const char* finish_sql = nullptr;  ///< after the batches
};

/// The steps, one per version (kSchemaVersion of them), ordered by
/// from_version (0, 1, ...).
extern const MigrationStep kMigrationSteps[kSchemaVersion];

/// The schema version of the open database, read together with its table
/// count in one statement (one snapshot: a concurrent opener's migration is
/// seen whole or not at all). Reads only. Errors: kCorrupt for a version
/// newer than kSchemaVersion, or for version 0 with tables present (a SQLite
/// database that is not a DICE cache); kCorrupt (SQLITE_NOTADB) for a file
/// that is not a SQLite database; kIoError for locks and I/O.
Expected<int64_t> ReadSchemaVersion(sqlite3* db, const std::string& path);

/// Brings the schema from its current version up to kSchemaVersion: one
/// BEGIN IMMEDIATE transaction that re-reads the version (another process
/// may have migrated meanwhile), runs the missing steps, sets user_version
/// and meta('schema_version'). Writes nothing when already current. After
/// a migration that ran, the WAL is checkpointed and truncated (best
/// effort): the v5 step writes the whole winners table through it.
/// Errors: those of ReadSchemaVersion; kIoError when a step or the commit
/// fails (the transaction is rolled back), or when another process holds
/// the write lock for longer than the busy timeout (a concurrent opener
/// waiting for a long migration to finish).
Status MigrateSchema(sqlite3* db, const std::string& path);

}  // namespace dice::cache
