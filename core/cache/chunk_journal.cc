#include "core/cache/chunk_journal.h"

#include <sqlite3.h>

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace modelfs {

namespace {

constexpr int kFormatVersion = 1;

// Finalizes a prepared statement on every path out.
struct Statement {
  sqlite3_stmt* st = nullptr;
  ~Statement() { sqlite3_finalize(st); }
};

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
        " DEFAULT 0, local_index BLOB, last_used INTEGER NOT NULL DEFAULT 0, seal TEXT);"
        "CREATE TABLE IF NOT EXISTS chunks(digest TEXT NOT NULL, chunk INTEGER NOT NULL,"
        " PRIMARY KEY(digest, chunk)) WITHOUT ROWID;");
  }
  if (s.ok() && !HasColumnLocked("layers", "seal")) {
    // Caches written before seals existed: their layers are re-hashed once, then sealed.
    s = ExecLocked("ALTER TABLE layers ADD COLUMN seal TEXT");
  }
  if (s.ok()) {
    s = ExecLocked(absl::StrCat("INSERT OR IGNORE INTO meta(key, value) VALUES('format_version', '",
                                kFormatVersion, "')"));
  }
  if (!s.ok()) CloseLocked();
  return s;
}

absl::Status ChunkJournal::ExecLocked(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::InternalError(
        absl::StrCat("cache database ", path_, ": ", msg, " (in: ", sql, ")"));
  }
  return absl::OkStatus();
}

bool ChunkJournal::HasColumnLocked(const std::string& table, const std::string& column) {
  Statement q;
  const std::string sql = absl::StrCat("PRAGMA table_info(", table, ")");
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &q.st, nullptr) != SQLITE_OK) return false;
  while (sqlite3_step(q.st) == SQLITE_ROW) {
    const unsigned char* name = sqlite3_column_text(q.st, 1);
    if (name != nullptr && column == reinterpret_cast<const char*>(name)) return true;
  }
  return false;
}

absl::StatusOr<std::vector<LayerRecord>> ChunkJournal::LoadAll() {
  absl::MutexLock lock(&mu_);
  std::map<std::string, LayerRecord> rows;
  {
    Statement q;
    if (sqlite3_prepare_v2(db_,
                           "SELECT digest, size, chunk_size, mode, whole_verified, local_index,"
                           " last_used, seal FROM layers",
                           -1, &q.st, nullptr) != SQLITE_OK) {
      return absl::InternalError(absl::StrCat("cache database ", path_, ": ", sqlite3_errmsg(db_)));
    }
    while (sqlite3_step(q.st) == SQLITE_ROW) {
      LayerRecord r;
      r.digest = reinterpret_cast<const char*>(sqlite3_column_text(q.st, 0));
      r.size = static_cast<uint64_t>(sqlite3_column_int64(q.st, 1));
      r.chunk_size = static_cast<uint64_t>(sqlite3_column_int64(q.st, 2));
      r.mode = sqlite3_column_int(q.st, 3);
      r.whole_verified = sqlite3_column_int(q.st, 4) != 0;
      if (const void* b = sqlite3_column_blob(q.st, 5)) {
        r.local_index.assign(static_cast<const char*>(b), sqlite3_column_bytes(q.st, 5));
      }
      r.last_used = sqlite3_column_int64(q.st, 6);
      if (const unsigned char* t = sqlite3_column_text(q.st, 7)) {
        r.seal = reinterpret_cast<const char*>(t);
      }
      std::string key = r.digest;
      rows[std::move(key)] = std::move(r);
    }
  }
  {
    Statement q;
    if (sqlite3_prepare_v2(db_, "SELECT digest, chunk FROM chunks", -1, &q.st, nullptr) !=
        SQLITE_OK) {
      return absl::InternalError(absl::StrCat("cache database ", path_, ": ", sqlite3_errmsg(db_)));
    }
    while (sqlite3_step(q.st) == SQLITE_ROW) {
      auto it = rows.find(reinterpret_cast<const char*>(sqlite3_column_text(q.st, 0)));
      if (it != rows.end()) it->second.chunks.push_back(sqlite3_column_int64(q.st, 1));
    }
  }
  std::vector<LayerRecord> out;
  out.reserve(rows.size());
  for (auto& [name, r] : rows) out.push_back(std::move(r));
  return out;
}

absl::Status ChunkJournal::UpsertLayer(const LayerRecord& r) {
  absl::MutexLock lock(&mu_);
  Statement q;
  const char* sql =
      "INSERT INTO layers(digest, size, chunk_size, mode, whole_verified, local_index, last_used,"
      " seal) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT(digest) DO UPDATE SET size=?2,"
      " chunk_size=?3, mode=?4, whole_verified=?5, local_index=?6, last_used=?7, seal=?8";
  if (sqlite3_prepare_v2(db_, sql, -1, &q.st, nullptr) != SQLITE_OK) {
    return absl::InternalError(absl::StrCat("cache database ", path_, ": ", sqlite3_errmsg(db_)));
  }
  sqlite3_bind_text(q.st, 1, r.digest.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(q.st, 2, static_cast<int64_t>(r.size));
  sqlite3_bind_int64(q.st, 3, static_cast<int64_t>(r.chunk_size));
  sqlite3_bind_int(q.st, 4, r.mode);
  sqlite3_bind_int(q.st, 5, r.whole_verified ? 1 : 0);
  if (r.local_index.empty()) {
    sqlite3_bind_null(q.st, 6);
  } else {
    sqlite3_bind_blob(q.st, 6, r.local_index.data(), static_cast<int>(r.local_index.size()),
                      SQLITE_TRANSIENT);
  }
  sqlite3_bind_int64(q.st, 7, r.last_used);
  if (r.seal.empty()) {
    sqlite3_bind_null(q.st, 8);
  } else {
    sqlite3_bind_text(q.st, 8, r.seal.c_str(), -1, SQLITE_TRANSIENT);
  }
  if (sqlite3_step(q.st) != SQLITE_DONE) {
    return absl::InternalError(absl::StrCat("cache database ", path_, ": recording layer ",
                                            r.digest, ": ", sqlite3_errmsg(db_)));
  }
  return absl::OkStatus();
}

absl::Status ChunkJournal::RecordChunks(const std::string& digest,
                                        const std::vector<uint64_t>& chunks,
                                        const std::function<bool()>& still_current) {
  absl::MutexLock lock(&mu_);
  if (!still_current()) return absl::OkStatus();
  sqlite3_exec(db_, "BEGIN", nullptr, nullptr, nullptr);
  bool ok = true;
  {
    Statement q;
    if (sqlite3_prepare_v2(db_, "INSERT OR IGNORE INTO chunks(digest, chunk) VALUES(?1, ?2)", -1,
                           &q.st, nullptr) != SQLITE_OK) {
      std::string msg = sqlite3_errmsg(db_);
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      return absl::InternalError(absl::StrCat("cache database ", path_, ": ", msg));
    }
    for (uint64_t c : chunks) {
      sqlite3_bind_text(q.st, 1, digest.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(q.st, 2, static_cast<int64_t>(c));
      ok = ok && sqlite3_step(q.st) == SQLITE_DONE;
      sqlite3_reset(q.st);
    }
  }
  if (!ok || sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    std::string msg = sqlite3_errmsg(db_);
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return absl::InternalError(
        absl::StrCat("cache database ", path_, ": recording chunks of ", digest, ": ", msg));
  }
  return absl::OkStatus();
}

void ChunkJournal::Forget(const std::string& digest) {
  absl::MutexLock lock(&mu_);
  for (const char* sql :
       {"DELETE FROM chunks WHERE digest = ?1", "DELETE FROM layers WHERE digest = ?1"}) {
    Statement q;
    if (sqlite3_prepare_v2(db_, sql, -1, &q.st, nullptr) != SQLITE_OK) continue;
    sqlite3_bind_text(q.st, 1, digest.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_step(q.st);
  }
}

void ChunkJournal::Touch(const std::string& digest, int64_t last_used) {
  absl::MutexLock lock(&mu_);
  Statement q;
  if (sqlite3_prepare_v2(db_, "UPDATE layers SET last_used = ?2 WHERE digest = ?1", -1, &q.st,
                         nullptr) != SQLITE_OK) {
    return;
  }
  sqlite3_bind_text(q.st, 1, digest.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(q.st, 2, last_used);
  sqlite3_step(q.st);
}

}  // namespace modelfs
