#include "core/sqlite/sqlite.h"

#include "absl/strings/str_cat.h"

namespace modelfs::sqlite {

std::string DatabaseName(sqlite3* db) {
  const char* file = sqlite3_db_filename(db, "main");
  if (file == nullptr || *file == '\0') return "database (in memory)";
  return absl::StrCat("database ", file);
}

absl::Status Exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db);
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat(DatabaseName(db), ": ", msg, " (in: ", sql, ")"));
  }
  return absl::OkStatus();
}

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db) {
  prepare_rc_ = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

absl::Status Statement::status() const {
  if (prepare_rc_ == SQLITE_OK) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(DatabaseName(db_), ": prepare: ", LastError()));
}

Statement& Statement::Bind(int i, std::string_view text) {
  sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::Bind(int i, int64_t v) {
  sqlite3_bind_int64(stmt_, i, v);
  return *this;
}

Statement& Statement::BindBlob(int i, std::string_view bytes) {
  sqlite3_bind_blob(stmt_, i, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::BindNull(int i) {
  sqlite3_bind_null(stmt_, i);
  return *this;
}

Statement& Statement::BindNullable(int i, std::string_view text) {
  return text.empty() ? BindNull(i) : Bind(i, text);
}

absl::StatusOr<bool> Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return absl::InternalError(absl::StrCat(DatabaseName(db_), ": step: ", LastError()));
}

void Statement::Reset() { sqlite3_reset(stmt_); }

std::string Statement::Text(int col) {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  return p ? std::string(reinterpret_cast<const char*>(p),
                         static_cast<size_t>(sqlite3_column_bytes(stmt_, col)))
           : std::string();
}

std::string Statement::Blob(int col) {
  const void* p = sqlite3_column_blob(stmt_, col);
  return p ? std::string(static_cast<const char*>(p),
                         static_cast<size_t>(sqlite3_column_bytes(stmt_, col)))
           : std::string();
}

bool Statement::IsNull(int col) { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

int64_t Statement::Int(int col) { return sqlite3_column_int64(stmt_, col); }

std::string Statement::LastError() const { return sqlite3_errmsg(db_); }

Transaction::~Transaction() {
  if (open_) (void)Rollback();
}

absl::Status Transaction::Begin(Mode mode) {
  absl::Status s = Run(mode == Mode::kImmediate ? "BEGIN IMMEDIATE" : "BEGIN");
  open_ = s.ok();
  return s;
}

absl::Status Transaction::Commit() {
  absl::Status s = Run("COMMIT");
  if (s.ok()) {
    open_ = false;
    return s;
  }
  // A failed COMMIT may leave the transaction open (SQLITE_BUSY): end it here so the connection
  // is usable, and report the COMMIT's error.
  (void)Rollback();
  return s;
}

absl::Status Transaction::Rollback() {
  absl::Status s = Run("ROLLBACK");
  // Whatever ROLLBACK answered, do not try again: a second attempt would fail the same way, or
  // with "no transaction is active" when the first error had already ended it.
  open_ = false;
  return s;
}

absl::Status Transaction::Run(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat(DatabaseName(db_), ": ", sql, ": ", msg));
  }
  return absl::OkStatus();
}

}  // namespace modelfs::sqlite
