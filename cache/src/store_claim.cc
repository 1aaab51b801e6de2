// Tuning claims: Store::ClaimTuning, ReleaseTuningClaim, GetTuningClaim
// (dice/cache/store.h) and the owner helpers of dice/cache/tuning_claim.h.
// Notes:
//  - ClaimTuning reads and writes in one BEGIN IMMEDIATE transaction: the
//    write lock is held from the read on, so of two processes that both see
//    no claim, the second sees the first's row.
//  - A claim whose owner is gone is taken over before it expires only when
//    its host string (hostname + pid namespace) is ours: a pid from another
//    machine or container says nothing here.
#include <sqlite3.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <mutex>
#include <optional>
#include <string>

#include "dice/cache/store.h"
#include "sqlite_util.h"
#include "store_impl.h"

namespace dice::cache {
namespace {

using sqlite::BindText;
using sqlite::ColumnText;
using sqlite::NowUnixSeconds;
using sqlite::Transaction;

constexpr const char* kClaimColumns = "task_key, owner_pid, owner_host, owner_token, claimed_at, expires_at";

TuningClaim ReadClaimRow(sqlite3_stmt* s) {
  TuningClaim c;
  c.task_key = ColumnText(s, 0);
  c.owner.pid = sqlite3_column_int64(s, 1);
  c.owner.host = ColumnText(s, 2);
  c.owner.token = ColumnText(s, 3);
  c.claimed_at = sqlite3_column_int64(s, 4);
  c.expires_at = sqlite3_column_int64(s, 5);
  return c;
}

// The helpers take the Store's Impl (store_impl.h) as a template parameter:
// the member functions below pass it; Store::Impl itself is private.

// The claim row of `key`; REQUIRES: impl.mu held.
template <class Impl>
Expected<std::optional<TuningClaim>> ReadClaim(Impl& impl, const std::string& key) {
  auto stmt = impl.Prepare(std::string("SELECT ") + kClaimColumns + " FROM tuning_claims WHERE task_key = ?1");
  if (!stmt.ok()) return stmt.status();
  BindText(*stmt, 1, key);
  int rc = sqlite3_step(*stmt);
  std::optional<TuningClaim> out;
  if (rc == SQLITE_ROW) out = ReadClaimRow(*stmt);
  sqlite3_reset(*stmt);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return impl.Error(rc, "read tuning claim " + key);
  return out;
}

// Inserts or replaces the claim row; REQUIRES: impl.mu held, a transaction open.
template <class Impl>
Status WriteClaim(Impl& impl, const TuningClaim& c) {
  auto stmt = impl.Prepare(std::string("INSERT OR REPLACE INTO tuning_claims(") + kClaimColumns +
                           ") VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  if (!stmt.ok()) return stmt.status();
  BindText(*stmt, 1, c.task_key);
  sqlite3_bind_int64(*stmt, 2, c.owner.pid);
  BindText(*stmt, 3, c.owner.host);
  BindText(*stmt, 4, c.owner.token);
  sqlite3_bind_int64(*stmt, 5, c.claimed_at);
  sqlite3_bind_int64(*stmt, 6, c.expires_at);
  int rc = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (rc != SQLITE_DONE) return impl.Error(rc, "write tuning claim " + c.task_key);
  return Status::Ok();
}

std::string PidNamespace() {
  char buf[64];
  ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace

std::string ClaimOwner::Describe() const {
  std::string out = "pid " + std::to_string(pid) + " on host " + host;
  if (!token.empty()) out += " (" + token + ")";
  return out;
}

ClaimOwner ThisProcessOwner(const std::string& token) {
  static const std::string host = [] {
    char name[HOST_NAME_MAX + 1] = {0};
    if (::gethostname(name, sizeof(name) - 1) != 0) name[0] = '\0';
    return std::string(name) + "/" + PidNamespace();
  }();
  ClaimOwner o;
  o.pid = static_cast<int64_t>(::getpid());
  o.host = host;
  o.token = token;
  return o;
}

bool OwnerIsGone(const ClaimOwner& owner) {
  if (owner.pid <= 0 || owner.pid > INT_MAX || owner.host != ThisProcessOwner("").host) return false;
  return ::kill(static_cast<pid_t>(owner.pid), 0) != 0 && errno == ESRCH;
}

Expected<ClaimResult> Store::ClaimTuning(const std::string& task_key, const ClaimOwner& owner, int64_t ttl_s,
                                         int64_t now) {
  if (task_key.empty()) return Status(StatusCode::kInvalidArgument, "ClaimTuning: empty task key");
  if (ttl_s <= 0) {
    return Status(StatusCode::kInvalidArgument, "ClaimTuning " + task_key + ": ttl must be > 0 s, got " +
                                                    std::to_string(ttl_s));
  }
  if (now == 0) now = NowUnixSeconds();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Transaction txn(impl_->db, impl_->path);
  DICE_RETURN_IF_ERROR(txn.Begin());
  auto current = ReadClaim(*impl_, task_key);
  if (!current.ok()) return current.status();
  ClaimResult r;
  if (current->has_value()) {
    const TuningClaim& c = **current;
    const bool ours = c.owner == owner;
    if (!ours && c.expires_at > now && !OwnerIsGone(c.owner)) {
      r.holder = c;
      return r;  // rolled back: nothing written
    }
    r.took_over = !ours;
  }
  r.claimed = true;
  r.holder.task_key = task_key;
  r.holder.owner = owner;
  r.holder.claimed_at = now;
  r.holder.expires_at = now + ttl_s;
  DICE_RETURN_IF_ERROR(WriteClaim(*impl_, r.holder));
  DICE_RETURN_IF_ERROR(txn.Commit());
  return r;
}

Expected<bool> Store::ReleaseTuningClaim(const std::string& task_key, const ClaimOwner& owner) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto stmt = impl_->Prepare(
      "DELETE FROM tuning_claims WHERE task_key = ?1 AND owner_pid = ?2 AND owner_host = ?3 AND owner_token = ?4");
  if (!stmt.ok()) return stmt.status();
  BindText(*stmt, 1, task_key);
  sqlite3_bind_int64(*stmt, 2, owner.pid);
  BindText(*stmt, 3, owner.host);
  BindText(*stmt, 4, owner.token);
  int rc = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (rc != SQLITE_DONE) return impl_->Error(rc, "release tuning claim " + task_key);
  return sqlite3_changes(impl_->db) > 0;
}

Expected<std::optional<TuningClaim>> Store::GetTuningClaim(const std::string& task_key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return ReadClaim(*impl_, task_key);
}

}  // namespace dice::cache
