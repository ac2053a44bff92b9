#include "core/cache/chunk_journal.h"

#include <sqlite3.h>

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/sqlite/sqlite.h"
#include "core/status/status_macros.h"

namespace modelfs {

namespace {

constexpr int kFormatVersion = 1;

using sqlite::Statement;

}  // namespace

ChunkJournal::~ChunkJournal() {
  absl::MutexLock lock(&mu_);
  CloseLocked();
}

void ChunkJournal::CloseLocked() {
  if (db_ != nullptr) sqlite3_close(db_);
  db_ = nullptr;
}

absl::Status ChunkJournal::Open(const std::string& path) {
  absl::MutexLock lock(&mu_);
  CloseLocked();
  path_ = path;
  int rc =
      sqlite3_open_v2(path.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    CloseLocked();
    return absl::InternalError(absl::StrCat("cache: cannot open ", path, ": ", msg));
  }
  sqlite3_busy_timeout(db_, 5000);
  absl::Status s = ExecLocked("PRAGMA journal_mode=WAL");
  if (s.ok()) s = ExecLocked("PRAGMA synchronous=NORMAL");
  if (s.ok()) {
    s = ExecLocked(
        "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE IF NOT EXISTS layers(digest TEXT PRIMARY KEY, size INTEGER NOT NULL,"
        " chunk_size INTEGER NOT NULL, mode INTEGER NOT NULL, whole_verified INTEGER NOT NULL"
        " DEFAULT 0, local_index BLOB, last_used INTEGER NOT NULL DEFAULT 0, seal TEXT,"
        " audited INTEGER NOT NULL DEFAULT 0, verity TEXT);"
        "CREATE TABLE IF NOT EXISTS chunks(digest TEXT NOT NULL, chunk INTEGER NOT NULL,"
        " PRIMARY KEY(digest, chunk)) WITHOUT ROWID;"
        "CREATE TABLE IF NOT EXISTS decoded(source TEXT PRIMARY KEY, digest TEXT NOT NULL);"
        "CREATE TABLE IF NOT EXISTS members(digest TEXT NOT NULL, offset INTEGER NOT NULL,"
        " length INTEGER NOT NULL, PRIMARY KEY(digest, offset)) WITHOUT ROWID;");
  }
  if (s.ok() && !HasColumnLocked("layers", "seal")) {
    // Caches written before seals existed: their layers are re-hashed once, then sealed.
    s = ExecLocked("ALTER TABLE layers ADD COLUMN seal TEXT");
  }
  if (s.ok() && !HasColumnLocked("layers", "audited")) {
    // Caches written before the scrub: their sealed chunk-mode layers are audited first.
    s = ExecLocked("ALTER TABLE layers ADD COLUMN audited INTEGER NOT NULL DEFAULT 0");
  }
  if (s.ok() && !HasColumnLocked("layers", "verity")) {
    // Caches written before fs-verity was used: no file of theirs has it yet.
    s = ExecLocked("ALTER TABLE layers ADD COLUMN verity TEXT");
  }
  if (s.ok()) {
    s = ExecLocked(absl::StrCat("INSERT OR IGNORE INTO meta(key, value) VALUES('format_version', '",
                                kFormatVersion, "')"));
  }
  if (!s.ok()) CloseLocked();
  return s;
}

absl::Status ChunkJournal::ExecLocked(const std::string& sql) { return sqlite::Exec(db_, sql); }

bool ChunkJournal::HasColumnLocked(const std::string& table, const std::string& column) {
  Statement q(db_, absl::StrCat("PRAGMA table_info(", table, ")"));
  if (!q.status().ok()) return false;
  for (absl::StatusOr<bool> row = q.Step(); row.ok() && *row; row = q.Step()) {
    if (!q.IsNull(1) && q.Text(1) == column) return true;
  }
  return false;
}

absl::StatusOr<std::vector<LayerRecord>> ChunkJournal::LoadAll() {
  absl::MutexLock lock(&mu_);
  std::map<std::string, LayerRecord> rows;
  // A row that cannot be read ends the load early: what was read is kept, and what was not is
  // fetched and verified again, as after a lost journal write.
  {
    Statement q(db_,
                "SELECT digest, size, chunk_size, mode, whole_verified, local_index,"
                " last_used, seal, audited, verity FROM layers");
    RETURN_IF_ERROR(q.status());
    for (absl::StatusOr<bool> row = q.Step(); row.ok() && *row; row = q.Step()) {
      LayerRecord r;
      r.digest = q.Text(0);
      r.size = static_cast<uint64_t>(q.Int(1));
      r.chunk_size = static_cast<uint64_t>(q.Int(2));
      r.mode = static_cast<int>(q.Int(3));
      r.whole_verified = q.Int(4) != 0;
      r.local_index = q.Blob(5);
      r.last_used = q.Int(6);
      r.seal = q.Text(7);
      r.audited = q.Int(8) != 0;
      r.verity = q.IsNull(9) ? std::string() : q.Text(9);
      std::string key = r.digest;
      rows[std::move(key)] = std::move(r);
    }
  }
  {
    Statement q(db_, "SELECT digest, chunk FROM chunks");
    RETURN_IF_ERROR(q.status());
    for (absl::StatusOr<bool> row = q.Step(); row.ok() && *row; row = q.Step()) {
      auto it = rows.find(q.Text(0));
      if (it != rows.end()) it->second.chunks.push_back(q.Int(1));
    }
  }
  {
    Statement q(db_, "SELECT digest, offset, length FROM members ORDER BY digest, offset");
    RETURN_IF_ERROR(q.status());
    for (absl::StatusOr<bool> row = q.Step(); row.ok() && *row; row = q.Step()) {
      auto it = rows.find(q.Text(0));
      if (it != rows.end()) {
        it->second.members.emplace_back(static_cast<uint64_t>(q.Int(1)),
                                        static_cast<uint64_t>(q.Int(2)));
      }
    }
  }
  std::vector<LayerRecord> out;
  out.reserve(rows.size());
  for (auto& [name, r] : rows) out.push_back(std::move(r));
  return out;
}

absl::Status ChunkJournal::UpsertLayer(const LayerRecord& r) {
  absl::MutexLock lock(&mu_);
  Statement q(db_,
              "INSERT INTO layers(digest, size, chunk_size, mode, whole_verified, local_index,"
              " last_used, seal, audited, verity) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
              " ?10) ON CONFLICT(digest) DO UPDATE SET size=?2, chunk_size=?3, mode=?4,"
              " whole_verified=?5, local_index=?6, last_used=?7, seal=?8, audited=?9,"
              " verity=?10");
  RETURN_IF_ERROR(q.status());
  q.Bind(1, r.digest)
      .Bind(2, static_cast<int64_t>(r.size))
      .Bind(3, static_cast<int64_t>(r.chunk_size))
      .Bind(4, int64_t{r.mode})
      .Bind(5, int64_t{r.whole_verified ? 1 : 0});
  if (r.local_index.empty()) {
    q.BindNull(6);
  } else {
    q.BindBlob(6, r.local_index);
  }
  q.Bind(7, r.last_used)
      .BindNullable(8, r.seal)
      .Bind(9, int64_t{r.audited ? 1 : 0})
      .BindNullable(10, r.verity);
  absl::StatusOr<bool> row = q.Step();
  if (!row.ok() || *row) {
    return absl::InternalError(absl::StrCat("cache database ", path_, ": recording layer ",
                                            r.digest, ": ", q.LastError()));
  }
  return absl::OkStatus();
}

absl::Status ChunkJournal::RecordChunks(const std::string& digest,
                                        const std::vector<uint64_t>& chunks,
                                        const std::function<bool()>& still_current) {
  absl::MutexLock lock(&mu_);
  if (!still_current()) return absl::OkStatus();
  // One transaction per batch: one journal sync for many chunks, and a batch lands whole or not
  // at all. The transaction rolls back on every early return.
  sqlite::Transaction txn(db_);
  RETURN_IF_ERROR(txn.Begin());
  {
    Statement q(db_, "INSERT OR IGNORE INTO chunks(digest, chunk) VALUES(?1, ?2)");
    RETURN_IF_ERROR(q.status());
    for (uint64_t c : chunks) {
      q.Bind(1, digest).Bind(2, static_cast<int64_t>(c));
      absl::StatusOr<bool> row = q.Step();
      if (!row.ok() || *row) {
        return absl::InternalError(absl::StrCat("cache database ", path_, ": recording chunks of ",
                                                digest, ": ", q.LastError()));
      }
      q.Reset();
    }
  }
  return txn.Commit();
}

void ChunkJournal::Forget(const std::string& digest) {
  absl::MutexLock lock(&mu_);
  for (const char* sql :
       {"DELETE FROM chunks WHERE digest = ?1", "DELETE FROM members WHERE digest = ?1",
        "DELETE FROM layers WHERE digest = ?1"}) {
    Statement q(db_, sql);
    if (!q.status().ok()) continue;
    (void)q.Bind(1, digest).Step();
  }
}

absl::Status ChunkJournal::RecordMembers(
    const std::string& digest, const std::vector<std::pair<uint64_t, uint64_t>>& members) {
  absl::MutexLock lock(&mu_);
  sqlite::Transaction txn(db_);
  RETURN_IF_ERROR(txn.Begin());
  {
    Statement del(db_, "DELETE FROM members WHERE digest = ?1");
    RETURN_IF_ERROR(del.status());
    RETURN_IF_ERROR(del.Bind(1, digest).Step().status());
    Statement q(db_, "INSERT INTO members(digest, offset, length) VALUES(?1, ?2, ?3)");
    RETURN_IF_ERROR(q.status());
    for (const auto& [offset, length] : members) {
      q.Bind(1, digest).Bind(2, static_cast<int64_t>(offset)).Bind(3, static_cast<int64_t>(length));
      absl::StatusOr<bool> row = q.Step();
      if (!row.ok() || *row) {
        return absl::InternalError(absl::StrCat("cache database ", path_, ": recording the member ",
                                                "files of ", digest, ": ", q.LastError()));
      }
      q.Reset();
    }
  }
  return txn.Commit();
}

absl::Status ChunkJournal::RecordDecoded(const std::string& source, const std::string& digest) {
  absl::MutexLock lock(&mu_);
  Statement q(db_, "INSERT OR REPLACE INTO decoded(source, digest) VALUES(?1, ?2)");
  RETURN_IF_ERROR(q.status());
  return q.Bind(1, source).Bind(2, digest).Step().status();
}

std::string ChunkJournal::DecodedOf(const std::string& source) {
  absl::MutexLock lock(&mu_);
  Statement q(db_, "SELECT digest FROM decoded WHERE source = ?1");
  if (!q.status().ok()) return std::string();
  absl::StatusOr<bool> row = q.Bind(1, source).Step();
  if (!row.ok() || !*row) return std::string();
  return q.Text(0);
}

absl::Status ChunkJournal::MarkAudited(const std::string& digest) {
  absl::MutexLock lock(&mu_);
  Statement q(db_, "UPDATE layers SET audited = 1 WHERE digest = ?1");
  RETURN_IF_ERROR(q.status());
  absl::StatusOr<bool> row = q.Bind(1, digest).Step();
  if (!row.ok() || *row) {
    return absl::InternalError(absl::StrCat("cache database ", path_, ": recording layer ", digest,
                                            " audited: ", q.LastError()));
  }
  return absl::OkStatus();
}

absl::Status ChunkJournal::RecordVerity(const std::string& digest, const std::string& seal,
                                        const std::string& verity) {
  absl::MutexLock lock(&mu_);
  Statement q(db_, "UPDATE layers SET seal = ?2, verity = ?3 WHERE digest = ?1");
  RETURN_IF_ERROR(q.status());
  absl::StatusOr<bool> row = q.Bind(1, digest).BindNullable(2, seal).BindNullable(3, verity).Step();
  if (!row.ok() || *row) {
    return absl::InternalError(absl::StrCat(
        "cache database ", path_, ": recording the fs-verity of ", digest, ": ", q.LastError()));
  }
  return absl::OkStatus();
}

void ChunkJournal::Touch(const std::string& digest, int64_t last_used) {
  absl::MutexLock lock(&mu_);
  Statement q(db_, "UPDATE layers SET last_used = ?2 WHERE digest = ?1");
  if (!q.status().ok()) return;
  (void)q.Bind(1, digest).Bind(2, last_used).Step();
}

}  // namespace modelfs
