// Paged winner summaries: Store::ListWinnerPage (dice/cache/store.h), the
// query behind the server's list route and its dashboard. Notes:
//  - Two statements. The first picks the page's rowids on an index named
//    with INDEXED BY (schema v3, schema.cc): the choice is ours, not the
//    planner's, so a page is never a sort of the table. Its filter columns
//    (arch, verified) are in every index, so a filtered page stays in the
//    index; only an op filter reads the table (the IR, which lies before
//    the launch plan, source and cubin in the row). The second reads each
//    picked row by rowid.
//  - Since schema v5 a winners row keeps its summary columns first and the
//    source and cubin last, so reading a summary stops before the payload
//    (length(cubin) comes from the record header); before, every summary
//    walked the cubin's overflow pages.
//  - With WinnerQuery::after (keyset pages) the pick seeks the index
//    right after that key's row (PickAfter) instead of stepping over
//    `offset` entries: at 100k entries a uniform page=P walked 50,000 index
//    entries on average, the largest cost of a page (docs/PERF.md).
//  - The count is a third statement on the same filters: a sum over
//    winner_counts (rows per arch and verified, kept by triggers, schema
//    v5) unless a key or an op filter is set; then it counts the primary
//    key (at most one row) or the table. The three run in one read
//    transaction on a read connection of the Store's pool
//    (store_readers.h), so they see one snapshot and wait for no writer.
#include <sqlite3.h>

#include <string>
#include <utility>
#include <vector>

#include "dice/cache/store.h"
#include "sqlite_util.h"
#include "store_impl.h"

namespace dice::cache {
namespace {

bool IsOpName(const std::string& op) {
  if (op.empty() || op.size() > 32) return false;
  for (char c : op) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

Status CheckQuery(const WinnerQuery& q) {
  if (q.offset < 0) return Status(StatusCode::kInvalidArgument, "ListWinnerPage: negative offset");
  if (q.limit < 0 || q.limit > kMaxWinnerPageLimit) {
    return Status(StatusCode::kInvalidArgument, "ListWinnerPage: limit " + std::to_string(q.limit) +
                                                    " outside 0.." + std::to_string(kMaxWinnerPageLimit));
  }
  if (!q.op.empty() && !IsOpName(q.op)) {
    return Status(StatusCode::kInvalidArgument,
                  "ListWinnerPage: op '" + q.op + "' is not an op name (1 to 32 of a-z, 0-9, _)");
  }
  if (q.verified < -1 || q.verified > 1) {
    return Status(StatusCode::kInvalidArgument, "ListWinnerPage: verified must be -1, 0 or 1");
  }
  if (!q.after.empty()) {
    bool hex = q.after.size() == 64;
    for (char c : q.after) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    if (!hex) return Status(StatusCode::kInvalidArgument, "ListWinnerPage: after is not a task key (64 lowercase hex)");
    if (q.offset != 0 || q.order != WinnerOrder::kNewest || !q.task_key.empty()) {
      return Status(StatusCode::kInvalidArgument,
                    "ListWinnerPage: after goes with the newest order only, without an offset or a key filter");
    }
  }
  return Status::Ok();
}

// " WHERE ..." over the query's filters, with named parameters, or "".
std::string FilterSql(const WinnerQuery& q) {
  std::string where;
  auto add = [&where](const char* term) {
    where += where.empty() ? " WHERE " : " AND ";
    where += term;
  };
  if (!q.task_key.empty()) add("task_key = :key");
  if (!q.arch.empty()) add("arch = :arch");
  if (q.verified >= 0) add("verified = :verified");
  if (!q.op.empty()) add("instr(graph_canonical, :op) > 0");
  return where;
}

// The index a page's rows are picked on, and the ORDER BY it serves: the
// index's columns in its order, then rowid (an index entry ends in it), less
// the leading arch of winners_arch_newest when that is fixed. So the order
// is total (ties: arch, verified, then insertion order) and, without an
// arch or verified filter on a non-leading column, needs no sort at all;
// with one SQLite sorts only runs of equal sort keys ("TEMP B-TREE FOR
// RIGHT PART OF ORDER BY"), never the table.
std::pair<std::string, std::string> IndexAndOrder(const WinnerQuery& q) {
  if (!q.task_key.empty()) return {"", " ORDER BY rowid"};  // at most one row: the primary key
  switch (q.order) {
    case WinnerOrder::kSpeedup: return {" INDEXED BY winners_speedup", " ORDER BY speedup DESC, arch, verified, rowid"};
    case WinnerOrder::kHits: return {" INDEXED BY winners_hits", " ORDER BY hits DESC, arch, verified, rowid"};
    case WinnerOrder::kNewest: break;
  }
  if (!q.arch.empty()) return {" INDEXED BY winners_arch_newest", " ORDER BY created_at DESC, verified, rowid"};
  return {" INDEXED BY winners_newest", " ORDER BY created_at DESC, arch, verified, rowid"};
}

// Whether the query's total is a sum over winner_counts (its filters are
// among arch and verified, the counts' key) rather than a count of rows.
bool CountedByTriggers(const WinnerQuery& q) { return q.task_key.empty() && q.op.empty(); }

// The statement counting the matching rows (`where`: FilterSql, whose arch
// and verified terms name winner_counts' columns too). A key filter counts
// on the primary key, an op filter reads every row's IR.
std::string CountSql(const WinnerQuery& q, const std::string& where) {
  if (CountedByTriggers(q)) return "SELECT coalesce(sum(n), 0) FROM winner_counts" + where;
  return "SELECT count(*) FROM winners" + where;
}

// Binds the filter parameters FilterSql used.
void BindFilters(sqlite3_stmt* s, const WinnerQuery& q) {
  if (int i = sqlite3_bind_parameter_index(s, ":key"); i > 0) sqlite::BindText(s, i, q.task_key);
  if (int i = sqlite3_bind_parameter_index(s, ":arch"); i > 0) sqlite::BindText(s, i, q.arch);
  if (int i = sqlite3_bind_parameter_index(s, ":verified"); i > 0) sqlite3_bind_int(s, i, q.verified);
  if (int i = sqlite3_bind_parameter_index(s, ":op"); i > 0) sqlite::BindText(s, i, "= " + q.op + "(");
}

// The summary columns in ReadWinnerRow's order, then length(cubin) (21).
// Source and cubin are read only when asked for (the cubin only to check
// the content hash).
std::string RowSql(bool source, bool cubin) {
  return std::string("SELECT task_key, graph_canonical, input_specs, arch, gpu_name, origin, candidate_hash, ") +
         (source ? "source" : "''") + ", " + (cubin ? "cubin" : "''") +
         ", launch_plan_json, baseline_us, best_us, speedup, reduced_precision, versions_json, created_at,"
         " content_hash, verified, pulled_from, hits, last_used_at, length(cubin) FROM winners WHERE rowid = ?1";
}

// One read transaction around the count, the pick and the row reads, so
// the three see the same snapshot (the total matches the rows a page
// holds). Ended on every path: a connection left inside a read
// transaction would keep its snapshot, and the WAL behind it, forever.
class ReadTransaction {
 public:
  explicit ReadTransaction(Connection& c) : c_(c) {}
  ~ReadTransaction() {
    if (open_) sqlite3_exec(c_.db, "COMMIT", nullptr, nullptr, nullptr);
  }
  ReadTransaction(const ReadTransaction&) = delete;
  ReadTransaction& operator=(const ReadTransaction&) = delete;
  Status Begin() {
    DICE_RETURN_IF_ERROR(c_.Exec("BEGIN"));
    open_ = true;
    return Status::Ok();
  }

 private:
  Connection& c_;
  bool open_ = false;
};

// PRAGMA data_version of connection `c`'s current snapshot, or -1 on error.
// Inside a read transaction, after a read opened its snapshot.
int64_t DataVersion(Connection& c) {
  auto v = c.Prepare("PRAGMA data_version");
  if (!v.ok()) return -1;
  const int64_t out = sqlite3_step(*v) == SQLITE_ROW ? sqlite3_column_int64(*v, 0) : -1;
  sqlite3_reset(*v);
  return out;
}

// The rows matching `query`'s filters (`where`: FilterSql), inside the
// page's read transaction. A count of the table (an op filter) is
// remembered on a read connection while the file is unchanged
// (Connection::counts, PRAGMA data_version); the sum over winner_counts
// and the key lookup are cheap and run every time, as does any count on
// the write connection.
Expected<int64_t> CountRows(Connection& c, const WinnerQuery& query, const std::string& where) {
  const std::string sql = CountSql(query, where);
  const bool remember = c.read_only && !query.op.empty();
  std::string key;
  if (remember) {
    // Opens the snapshot (data_version is the pager's as of the last read).
    if (auto first = c.Prepare("SELECT 1 FROM meta LIMIT 1"); first.ok()) {
      sqlite3_step(*first);
      sqlite3_reset(*first);
    }
    const int64_t version = DataVersion(c);
    if (version < 0 || version != c.counts_version || c.counts.size() > 256) {
      c.counts.clear();
      c.counts_version = version;
    }
    key = sql + '\n' + query.task_key + '\n' + query.arch + '\n' + std::to_string(query.verified) + '\n' + query.op;
    if (auto it = c.counts.find(key); version >= 0 && it != c.counts.end()) return it->second;
  }
  auto count = c.Prepare(sql);
  if (!count.ok()) return count.status();
  BindFilters(*count, query);
  int rc = sqlite3_step(*count);
  const int64_t total = rc == SQLITE_ROW ? sqlite3_column_int64(*count, 0) : 0;
  sqlite3_reset(*count);
  if (rc != SQLITE_ROW) return c.Error(rc, "count winners");
  if (remember && c.counts_version >= 0) c.counts.emplace(std::move(key), total);
  return total;
}

// The rowids of a keyset page (query.after set; newest order): the rows
// after the `after` row in the order of IndexAndOrder, picked on the same
// index by two seeks: the rest of the after row's created_at (its ties,
// ordered by the index's remaining columns and rowid), then the older
// rows. kNotFound when no row has the after key.
Status PickAfter(Connection& c, const WinnerQuery& query, const std::string& where, std::vector<int64_t>* rowids) {
  auto anchor = c.Prepare("SELECT created_at, arch, verified, rowid FROM winners WHERE task_key = ?1");
  if (!anchor.ok()) return anchor.status();
  sqlite::BindText(*anchor, 1, query.after);
  int rc = sqlite3_step(*anchor);
  if (rc != SQLITE_ROW) {
    sqlite3_reset(*anchor);
    if (rc == SQLITE_DONE) return Status(StatusCode::kNotFound, "no entry for the after key " + query.after);
    return c.Error(rc, "read the after row");
  }
  const int64_t created_at = sqlite3_column_int64(*anchor, 0);
  const std::string arch = sqlite::ColumnText(*anchor, 1);
  const int verified = sqlite3_column_int(*anchor, 2);
  const int64_t rowid = sqlite3_column_int64(*anchor, 3);
  sqlite3_reset(*anchor);

  const auto [index, order] = IndexAndOrder(query);
  const std::string ties = query.arch.empty() ? "(arch, verified, rowid) > (:aa, :av, :ar)" : "(verified, rowid) > (:av, :ar)";
  const std::string joint = where.empty() ? " WHERE " : where + " AND ";
  for (const std::string& term : {"created_at = :ac AND " + ties, std::string("created_at < :ac")}) {
    const int left = query.limit - static_cast<int>(rowids->size());
    if (left <= 0) break;
    auto pick = c.Prepare("SELECT rowid FROM winners" + index + joint + term + order + " LIMIT :limit");
    if (!pick.ok()) return pick.status();
    sqlite3_stmt* s = *pick;
    BindFilters(s, query);
    sqlite3_bind_int64(s, sqlite3_bind_parameter_index(s, ":ac"), created_at);
    if (int i = sqlite3_bind_parameter_index(s, ":aa"); i > 0) sqlite::BindText(s, i, arch);
    if (int i = sqlite3_bind_parameter_index(s, ":av"); i > 0) sqlite3_bind_int(s, i, verified);
    if (int i = sqlite3_bind_parameter_index(s, ":ar"); i > 0) sqlite3_bind_int64(s, i, rowid);
    sqlite3_bind_int(s, sqlite3_bind_parameter_index(s, ":limit"), left);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) rowids->push_back(sqlite3_column_int64(s, 0));
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) return c.Error(rc, "pick a keyset page of winners");
  }
  return Status::Ok();
}

// Store::ListWinnerPage's queries on connection `c` (a checked query).
Expected<WinnerPage> ReadPage(Connection& c, const WinnerQuery& query) {
  const std::string where = FilterSql(query);
  const auto [index, order] = IndexAndOrder(query);
  ReadTransaction txn(c);
  DICE_RETURN_IF_ERROR(txn.Begin());
  WinnerPage page;

  auto total = CountRows(c, query, where);
  if (!total.ok()) return total.status();
  page.total = *total;
  if (query.limit == 0 || page.total <= query.offset) return page;

  int rc;
  std::vector<int64_t> rowids;
  if (!query.after.empty()) {
    DICE_RETURN_IF_ERROR(PickAfter(c, query, where, &rowids));
  } else {
    auto pick = c.Prepare("SELECT rowid FROM winners" + index + where + order + " LIMIT :limit OFFSET :offset");
    if (!pick.ok()) return pick.status();
    BindFilters(*pick, query);
    sqlite3_bind_int(*pick, sqlite3_bind_parameter_index(*pick, ":limit"), query.limit);
    sqlite3_bind_int64(*pick, sqlite3_bind_parameter_index(*pick, ":offset"), query.offset);
    while ((rc = sqlite3_step(*pick)) == SQLITE_ROW) rowids.push_back(sqlite3_column_int64(*pick, 0));
    sqlite3_reset(*pick);
    if (rc != SQLITE_DONE) return c.Error(rc, "pick a page of winners");
  }

  const bool check = query.check_content;
  auto read = c.Prepare(RowSql(query.with_source || check, check));
  if (!read.ok()) return read.status();
  for (int64_t rowid : rowids) {
    sqlite3_reset(*read);
    sqlite3_bind_int64(*read, 1, rowid);
    rc = sqlite3_step(*read);
    if (rc == SQLITE_DONE) continue;  // removed since the pick (only without the transaction's snapshot)
    if (rc != SQLITE_ROW) {
      Status st = c.Error(rc, "read a page of winners");
      sqlite3_reset(*read);
      return st;
    }
    WinnerSummary row;
    row.record = ReadWinnerRow(*read);
    row.cubin_bytes = sqlite3_column_int64(*read, 21);
    if (check) {
      row.content_checked = true;
      row.content_ok = ContentHash(row.record) == row.record.content_hash;
      row.record.cubin.clear();
      row.record.cubin.shrink_to_fit();
      if (!query.with_source) row.record.source.clear();
    }
    page.entries.push_back(std::move(row));
  }
  sqlite3_reset(*read);
  return page;
}

}  // namespace

Expected<WinnerPage> Store::ListWinnerPage(const WinnerQuery& query) {
  DICE_RETURN_IF_ERROR(CheckQuery(query));
  return impl_->Read([&query](Connection& c) { return ReadPage(c, query); });
}

}  // namespace dice::cache
