#include "core/sqlite/sqlite.h"

#include <sqlite3.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::sqlite {
namespace {

using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

// One connection to a file database with a table `t(v INTEGER)`.
class SqliteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.Join("test.db").string();
    db_ = Connect();
    ASSERT_THAT(Exec(db_, "CREATE TABLE t(v INTEGER)"), IsOk());
  }
  void TearDown() override { sqlite3_close(db_); }

  sqlite3* Connect() {
    sqlite3* db = nullptr;
    EXPECT_EQ(
        sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr),
        SQLITE_OK);
    return db;
  }

  int64_t Rows(sqlite3* db) {
    Statement q(db, "SELECT count(*) FROM t");
    EXPECT_THAT(q.status(), IsOk());
    EXPECT_EQ(q.Step().value_or(false), true);
    return q.Int(0);
  }

  modelfs::testing::TempDir dir_;
  std::string path_;
  sqlite3* db_ = nullptr;
};

TEST_F(SqliteTest, ACommittedTransactionKeepsItsRows) {
  {
    Transaction txn(db_);
    ASSERT_THAT(txn.Begin(), IsOk());
    ASSERT_THAT(Exec(db_, "INSERT INTO t VALUES(1)"), IsOk());
    ASSERT_THAT(txn.Commit(), IsOk());
  }
  EXPECT_EQ(Rows(db_), 1);
}

TEST_F(SqliteTest, ATransactionDestroyedWithoutCommitRollsBack) {
  {
    Transaction txn(db_);
    ASSERT_THAT(txn.Begin(Transaction::Mode::kImmediate), IsOk());
    ASSERT_THAT(Exec(db_, "INSERT INTO t VALUES(1)"), IsOk());
  }
  EXPECT_EQ(Rows(db_), 0);
  // The connection is out of the transaction: a new one begins.
  Transaction next(db_);
  EXPECT_THAT(next.Begin(), IsOk());
}

TEST_F(SqliteTest, AFailedBeginSurfacesNamingTheDatabaseFile) {
  Transaction outer(db_);
  ASSERT_THAT(outer.Begin(), IsOk());
  Transaction inner(db_);
  EXPECT_THAT(inner.Begin(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("database " + path_ +
                                                              ": BEGIN: cannot start a transaction "
                                                              "within a transaction")));
}

TEST_F(SqliteTest, ABeginImmediateWhileAnotherConnectionWritesIsAnError) {
  sqlite3* other = Connect();
  Transaction writer(other);
  ASSERT_THAT(writer.Begin(Transaction::Mode::kImmediate), IsOk());
  Transaction blocked(db_);
  EXPECT_THAT(blocked.Begin(Transaction::Mode::kImmediate),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("database " + path_ + ": BEGIN IMMEDIATE: database is locked")));
  ASSERT_THAT(writer.Rollback(), IsOk());
  sqlite3_close(other);
}

TEST_F(SqliteTest, AFailedBeginLeavesNothingToRollBack) {
  Transaction outer(db_);
  ASSERT_THAT(outer.Begin(), IsOk());
  {
    Transaction inner(db_);
    ASSERT_FALSE(inner.Begin().ok());
  }  // must not roll back `outer`'s transaction
  ASSERT_THAT(Exec(db_, "INSERT INTO t VALUES(1)"), IsOk());
  ASSERT_THAT(outer.Commit(), IsOk());
  EXPECT_EQ(Rows(db_), 1);
}

TEST_F(SqliteTest, ARollbackWithoutATransactionIsAnErrorNamingTheFile) {
  Transaction txn(db_);
  EXPECT_THAT(txn.Rollback(),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("database " + path_ +
                                 ": ROLLBACK: cannot rollback - no transaction is active")));
}

TEST_F(SqliteTest, AStatementThatDoesNotCompileSaysSoNamingTheFile) {
  Statement q(db_, "SELECT nope FROM t");
  EXPECT_THAT(q.status(), StatusIs(absl::StatusCode::kInternal,
                                   HasSubstr("database " + path_ + ": prepare: no such column")));
}

TEST_F(SqliteTest, BoundValuesReadBackAsTheyWereBound) {
  ASSERT_THAT(Exec(db_, "CREATE TABLE r(a TEXT, b INTEGER, c BLOB, d TEXT)"), IsOk());
  {
    Statement ins(db_, "INSERT INTO r VALUES(?1, ?2, ?3, ?4)");
    ASSERT_THAT(ins.status(), IsOk());
    ins.Bind(1, "text")
        .Bind(2, int64_t{-7})
        .BindBlob(3, std::string("a\0b", 3))
        .BindNullable(4, "");
    EXPECT_EQ(ins.Step().value_or(true), false);
  }
  Statement q(db_, "SELECT a, b, c, d FROM r");
  ASSERT_EQ(q.Step().value_or(false), true);
  EXPECT_EQ(q.Text(0), "text");
  EXPECT_EQ(q.Int(1), -7);
  EXPECT_EQ(q.Blob(2), std::string("a\0b", 3));
  EXPECT_TRUE(q.IsNull(3));
  EXPECT_EQ(q.Text(3), "");
  EXPECT_EQ(q.Step().value_or(true), false);
}

TEST_F(SqliteTest, AFailedStepNamesTheDatabaseFile) {
  ASSERT_THAT(Exec(db_, "CREATE TABLE u(k TEXT UNIQUE)"), IsOk());
  ASSERT_THAT(Exec(db_, "INSERT INTO u VALUES('x')"), IsOk());
  Statement ins(db_, "INSERT INTO u VALUES('x')");
  EXPECT_THAT(ins.Step(), StatusIs(absl::StatusCode::kInternal,
                                   HasSubstr("database " + path_ + ": step: UNIQUE constraint")));
}

TEST_F(SqliteTest, ExecNamesTheFileAndTheStatement) {
  EXPECT_THAT(Exec(db_, "DROP TABLE missing"),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("database " + path_ +
                                 ": no such table: missing (in: DROP TABLE missing)")));
}

TEST(SqliteNameTest, AnInMemoryDatabaseIsNamedAsSuch) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  EXPECT_EQ(DatabaseName(db), "database (in memory)");
  sqlite3_close(db);
}

}  // namespace
}  // namespace modelfs::sqlite
