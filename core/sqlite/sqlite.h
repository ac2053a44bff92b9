// A thin layer over SQLite's C API for the two databases modelfs keeps (the cache's chunk
// journal and the snapshotter's metadata store): prepared statements that finalize themselves,
// and transactions whose BEGIN, COMMIT and ROLLBACK are checked. Every error is an
// absl::Status (kInternal) that names the database file, so a log line says which of the two
// databases, and where, failed.
//
// Thread safety: none of its own. A connection is used by one thread at a time; both callers
// hold their own mutex around every use of it.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace modelfs::sqlite {

// "database <file>" for `db`'s main database, or "database (in memory)" for one without a file.
std::string DatabaseName(sqlite3* db);

// Runs `sql` (one or more statements, no results). Error: "<DatabaseName>: <message> (in: sql)".
absl::Status Exec(sqlite3* db, const std::string& sql);

// A prepared statement, finalized on every path out. Bind* and the column reads follow
// SQLite's numbering: parameters from 1, columns from 0.
class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Whether the statement compiled. Error: "<DatabaseName>: prepare: <message>".
  absl::Status status() const;

  Statement& Bind(int i, std::string_view text);
  Statement& Bind(int i, int64_t v);
  Statement& BindBlob(int i, std::string_view bytes);
  Statement& BindNull(int i);
  // NULL for an empty string, else the text.
  Statement& BindNullable(int i, std::string_view text);

  // True when a row is available, false when the statement is done.
  // Error: "<DatabaseName>: step: <message>".
  absl::StatusOr<bool> Step();
  // Makes the statement ready to run again; bindings stay.
  void Reset();

  // Column reads of the current row. Text and Blob are empty for NULL.
  std::string Text(int col);
  std::string Blob(int col);
  bool IsNull(int col);
  int64_t Int(int col);

  // SQLite's message for the connection's last error, for callers that word their own.
  std::string LastError() const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int prepare_rc_;
};

// A transaction that rolls back unless Commit succeeded: leaving a scope early (an error
// returned by a RETURN_IF_ERROR) cannot leave half a change behind or the connection inside a
// transaction that the next BEGIN would trip on.
class Transaction {
 public:
  enum class Mode {
    kDeferred,   // BEGIN: the write lock is taken by the first write.
    kImmediate,  // BEGIN IMMEDIATE: the write lock is taken now, so a read-then-write cannot
                 // fail half way with SQLITE_BUSY.
  };

  explicit Transaction(sqlite3* db) : db_(db) {}
  // Rolls back when Begin succeeded and neither Commit nor Rollback did.
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // Error: "<DatabaseName>: BEGIN[ IMMEDIATE]: <message>"; the transaction is then not open.
  absl::Status Begin(Mode mode = Mode::kDeferred);
  // Error: "<DatabaseName>: COMMIT: <message>"; the transaction is then rolled back.
  absl::Status Commit();
  // Error: "<DatabaseName>: ROLLBACK: <message>".
  absl::Status Rollback();

 private:
  absl::Status Run(const char* sql);

  sqlite3* db_;
  bool open_ = false;
};

}  // namespace modelfs::sqlite
