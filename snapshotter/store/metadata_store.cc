// SQLite-backed snapshot metadata (see metadata_store.h).
#include "snapshotter/store/metadata_store.h"

#include <sqlite3.h>

#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/sqlite/sqlite.h"
#include "core/status/status_macros.h"

namespace modelfs::snapshotter {
namespace {

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS snapshots (
  id      INTEGER PRIMARY KEY AUTOINCREMENT,
  key     TEXT NOT NULL UNIQUE,
  parent  TEXT REFERENCES snapshots(key) ON UPDATE RESTRICT ON DELETE RESTRICT,
  kind    TEXT NOT NULL CHECK (kind IN ('view', 'active', 'committed')),
  labels  TEXT NOT NULL DEFAULT '{}',
  created INTEGER NOT NULL,
  updated INTEGER NOT NULL,
  inodes  INTEGER NOT NULL DEFAULT 0,
  size    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS snapshots_parent ON snapshots(parent);
)sql";

absl::StatusOr<SnapshotKind> ParseKind(const std::string& s) {
  if (s == "view") return SnapshotKind::kView;
  if (s == "active") return SnapshotKind::kActive;
  if (s == "committed") return SnapshotKind::kCommitted;
  return absl::DataLossError(absl::StrCat("metadata: unknown snapshot kind '", s, "'"));
}

using Stmt = sqlite::Statement;
using Txn = sqlite::Transaction;
// Every mutation reads before it writes: BEGIN IMMEDIATE takes the write lock first, so a
// second writer waits (busy timeout) instead of failing half way when it tries to upgrade.
constexpr Txn::Mode kWrite = Txn::Mode::kImmediate;

std::string LabelsToJson(const Labels& labels) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : labels) j[k] = v;
  return j.dump();
}

absl::StatusOr<Labels> LabelsFromJson(const std::string& key, const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::DataLossError(absl::StrCat("metadata: labels of '", key, "' are not an object"));
  }
  Labels labels;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string()) {
      return absl::DataLossError(
          absl::StrCat("metadata: label '", k, "' of '", key, "' is not a string"));
    }
    labels[k] = v.get<std::string>();
  }
  return labels;
}

// containerd's labels.Validate: a key plus its value may not exceed 4096 bytes.
constexpr size_t kMaxLabelSize = 4096;

absl::Status ValidateLabels(const std::string& key, const Labels& labels) {
  for (const auto& [k, v] : labels) {
    if (k.size() + v.size() > kMaxLabelSize) {
      return absl::InvalidArgumentError(absl::StrCat("snapshot '", key, "': label '",
                                                     k.substr(0, 64), "' is longer than ",
                                                     kMaxLabelSize, " bytes with its value"));
    }
  }
  return absl::OkStatus();
}

constexpr char kSelectInfo[] = "SELECT key, parent, kind, labels, created, updated FROM snapshots";

absl::StatusOr<SnapshotInfo> ReadInfo(Stmt& s) {
  SnapshotInfo info;
  info.name = s.Text(0);
  info.parent = s.Text(1);
  ASSIGN_OR_RETURN(info.kind, ParseKind(s.Text(2)));
  ASSIGN_OR_RETURN(info.labels, LabelsFromJson(info.name, s.Text(3)));
  info.created = absl::FromUnixNanos(s.Int(4));
  info.updated = absl::FromUnixNanos(s.Int(5));
  return info;
}

absl::StatusOr<SnapshotInfo> QueryInfo(sqlite3* db, const std::string& key) {
  std::string sql = absl::StrCat(kSelectInfo, " WHERE key = ?1");
  Stmt s(db, sql.c_str());
  RETURN_IF_ERROR(s.status());
  s.Bind(1, key);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("snapshot '", key, "' does not exist"));
  return ReadInfo(s);
}

absl::StatusOr<SnapshotRecord> QueryRecord(sqlite3* db, const std::string& key) {
  SnapshotRecord rec;
  std::string parent;
  {
    Stmt s(db, "SELECT id, kind, parent FROM snapshots WHERE key = ?1");
    RETURN_IF_ERROR(s.status());
    s.Bind(1, key);
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return absl::NotFoundError(absl::StrCat("snapshot '", key, "' does not exist"));
    rec.id = s.Int(0);
    ASSIGN_OR_RETURN(rec.kind, ParseKind(s.Text(1)));
    parent = s.Text(2);
  }
  if (parent.empty()) return rec;
  Stmt s(db, R"sql(
    WITH RECURSIVE chain(id, parent, depth) AS (
      SELECT id, parent, 0 FROM snapshots WHERE key = ?1
      UNION ALL
      SELECT s.id, s.parent, c.depth + 1 FROM snapshots s JOIN chain c ON s.key = c.parent
    )
    SELECT id FROM chain ORDER BY depth)sql");
  RETURN_IF_ERROR(s.status());
  s.Bind(1, parent);
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    rec.parent_ids.push_back(s.Int(0));
  }
  return rec;
}

// One conjunct of a filter: `field`, `field==value` or `field!=value`.
struct Condition {
  std::string field;
  enum class Op { kPresent, kEqual, kNotEqual } op = Op::kPresent;
  std::string value;
};

std::string Unquote(absl::string_view s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return std::string(s);
}

absl::StatusOr<std::vector<Condition>> ParseFilter(const std::string& filter) {
  std::vector<Condition> conds;
  for (absl::string_view part : absl::StrSplit(filter, ',', absl::SkipWhitespace())) {
    Condition c;
    std::string p(absl::StripAsciiWhitespace(part));
    size_t pos;
    if ((pos = p.find("!=")) != std::string::npos) {
      c.op = Condition::Op::kNotEqual;
    } else if ((pos = p.find("==")) != std::string::npos) {
      c.op = Condition::Op::kEqual;
    }
    if (c.op != Condition::Op::kPresent) {
      c.field = std::string(absl::StripAsciiWhitespace(p.substr(0, pos)));
      c.value = Unquote(absl::StripAsciiWhitespace(p.substr(pos + 2)));
    } else {
      c.field = p;
    }
    bool known = c.field == "name" || c.field == "parent" || c.field == "kind" ||
                 (absl::StartsWith(c.field, "labels.") && c.field.size() > 7);
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("filter '", filter, "': unknown field '", c.field, "'"));
    }
    if (absl::StartsWith(c.field, "labels.")) c.field = "labels." + Unquote(c.field.substr(7));
    conds.push_back(std::move(c));
  }
  if (conds.empty()) return absl::InvalidArgumentError("empty filter");
  return conds;
}

bool Matches(const std::vector<Condition>& conds, const SnapshotInfo& info) {
  for (const Condition& c : conds) {
    bool present = true;
    std::string value;
    if (c.field == "name") {
      value = info.name;
    } else if (c.field == "parent") {
      // Always present, as in containerd's adaptor: `parent==""` selects base snapshots (the
      // filter containerd's metadata snapshotter sends after a remote ALREADY_EXISTS).
      value = info.parent;
    } else if (c.field == "kind") {
      value = KindName(info.kind);
    } else {
      auto it = info.labels.find(c.field.substr(7));
      present = it != info.labels.end();
      if (present) value = it->second;
    }
    switch (c.op) {
      case Condition::Op::kPresent:
        if (!present) return false;
        break;
      case Condition::Op::kEqual:
        if (!present || value != c.value) return false;
        break;
      case Condition::Op::kNotEqual:
        if (present && value == c.value) return false;
        break;
    }
  }
  return true;
}

}  // namespace

std::string KindName(SnapshotKind kind) {
  switch (kind) {
    case SnapshotKind::kView:
      return "view";
    case SnapshotKind::kActive:
      return "active";
    case SnapshotKind::kCommitted:
      return "committed";
    default:
      return "unknown";
  }
}

MetadataStore::MetadataStore(sqlite3* db, Clock* clock) : clock_(clock), db_(db) {}

MetadataStore::~MetadataStore() {
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::StatusOr<std::unique_ptr<MetadataStore>> MetadataStore::Open(
    const std::filesystem::path& path, Clock* clock) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::InternalError(absl::StrCat("metadata: open ", path.string(), ": ", msg));
  }
  sqlite3_busy_timeout(db, 5000);
  std::unique_ptr<MetadataStore> store(new MetadataStore(db, clock));
  absl::MutexLock lock(&store->mu_);
  RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL"));
  RETURN_IF_ERROR(store->Exec("PRAGMA foreign_keys=ON"));
  RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=FULL"));
  RETURN_IF_ERROR(store->Exec(kSchema));
  return store;
}

absl::Status MetadataStore::Exec(const char* sql) { return sqlite::Exec(db_, sql); }

absl::StatusOr<SnapshotRecord> MetadataStore::CreateSnapshot(SnapshotKind kind,
                                                             const std::string& key,
                                                             const std::string& parent,
                                                             const Labels& labels,
                                                             const BeforeCommit& before_commit) {
  if (key.empty()) return absl::InvalidArgumentError("snapshot key must not be empty");
  if (kind != SnapshotKind::kActive && kind != SnapshotKind::kView) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot '", key, "': cannot create a ", KindName(kind), " snapshot"));
  }
  RETURN_IF_ERROR(ValidateLabels(key, labels));
  absl::MutexLock lock(&mu_);
  Txn txn(db_);
  RETURN_IF_ERROR(txn.Begin(kWrite));
  {
    Stmt s(db_, "SELECT 1 FROM snapshots WHERE key = ?1");
    RETURN_IF_ERROR(s.status());
    s.Bind(1, key);
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (row) return absl::AlreadyExistsError(absl::StrCat("snapshot '", key, "' already exists"));
  }
  if (!parent.empty()) {
    Stmt s(db_, "SELECT kind FROM snapshots WHERE key = ?1");
    RETURN_IF_ERROR(s.status());
    s.Bind(1, parent);
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) {
      return absl::NotFoundError(
          absl::StrCat("snapshot '", key, "': parent '", parent, "' does not exist"));
    }
    if (s.Text(0) != "committed") {
      return absl::InvalidArgumentError(
          absl::StrCat("snapshot '", key, "': parent '", parent, "' is not a committed snapshot"));
    }
  }
  {
    int64_t now = NowNanos();
    Stmt s(db_,
           "INSERT INTO snapshots(key, parent, kind, labels, created, updated) "
           "VALUES (?1, ?2, ?3, ?4, ?5, ?5)");
    RETURN_IF_ERROR(s.status());
    s.Bind(1, key).BindNullable(2, parent).Bind(3, KindName(kind)).Bind(4, LabelsToJson(labels));
    s.Bind(5, now);
    RETURN_IF_ERROR(s.Step().status());
  }
  ASSIGN_OR_RETURN(SnapshotRecord rec, QueryRecord(db_, key));
  if (before_commit) RETURN_IF_ERROR(before_commit(rec));
  RETURN_IF_ERROR(txn.Commit());
  return rec;
}

absl::StatusOr<SnapshotInfo> MetadataStore::GetInfo(const std::string& key) {
  absl::MutexLock lock(&mu_);
  return QueryInfo(db_, key);
}

absl::StatusOr<SnapshotRecord> MetadataStore::GetSnapshot(const std::string& key) {
  absl::MutexLock lock(&mu_);
  return QueryRecord(db_, key);
}

absl::StatusOr<SnapshotInfo> MetadataStore::UpdateInfo(const SnapshotInfo& info,
                                                       const std::vector<std::string>& paths) {
  absl::MutexLock lock(&mu_);
  Txn txn(db_);
  RETURN_IF_ERROR(txn.Begin(kWrite));
  ASSIGN_OR_RETURN(SnapshotInfo current, QueryInfo(db_, info.name));
  if (paths.empty()) {
    current.labels = info.labels;
  }
  for (const std::string& path : paths) {
    if (path == "labels") {
      current.labels = info.labels;
    } else if (absl::StartsWith(path, "labels.") && path.size() > 7) {
      std::string k = path.substr(7);
      auto it = info.labels.find(k);
      if (it == info.labels.end()) {
        current.labels.erase(k);
      } else {
        current.labels[k] = it->second;
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("snapshot '", info.name, "': cannot update field path '", path, "'"));
    }
  }
  RETURN_IF_ERROR(ValidateLabels(info.name, current.labels));
  current.updated = absl::FromUnixNanos(NowNanos());
  {
    Stmt s(db_, "UPDATE snapshots SET labels = ?1, updated = ?2 WHERE key = ?3");
    RETURN_IF_ERROR(s.status());
    s.Bind(1, LabelsToJson(current.labels)).Bind(2, absl::ToUnixNanos(current.updated));
    s.Bind(3, info.name);
    RETURN_IF_ERROR(s.Step().status());
  }
  RETURN_IF_ERROR(txn.Commit());
  return current;
}

absl::StatusOr<int64_t> MetadataStore::CommitActive(const std::string& key, const std::string& name,
                                                    const Usage& usage, const Labels& labels) {
  if (name.empty()) return absl::InvalidArgumentError("committed snapshot name must not be empty");
  RETURN_IF_ERROR(ValidateLabels(name, labels));
  absl::MutexLock lock(&mu_);
  Txn txn(db_);
  RETURN_IF_ERROR(txn.Begin(kWrite));
  {
    Stmt s(db_, "SELECT 1 FROM snapshots WHERE key = ?1");
    RETURN_IF_ERROR(s.status());
    s.Bind(1, name);
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (row) return absl::AlreadyExistsError(absl::StrCat("snapshot '", name, "' already exists"));
  }
  ASSIGN_OR_RETURN(SnapshotRecord rec, QueryRecord(db_, key));
  if (rec.kind != SnapshotKind::kActive) {
    return absl::FailedPreconditionError(
        absl::StrCat("snapshot '", key, "' is ", KindName(rec.kind), ", not active"));
  }
  {
    int64_t now = NowNanos();
    Stmt s(db_,
           "UPDATE snapshots SET key = ?1, kind = 'committed', labels = ?2, created = ?3, "
           "updated = ?3, size = ?4, inodes = ?5 WHERE id = ?6");
    RETURN_IF_ERROR(s.status());
    s.Bind(1, name).Bind(2, LabelsToJson(labels)).Bind(3, now).Bind(4, usage.size);
    s.Bind(5, usage.inodes).Bind(6, rec.id);
    RETURN_IF_ERROR(s.Step().status());
  }
  RETURN_IF_ERROR(txn.Commit());
  return rec.id;
}

absl::StatusOr<SnapshotRecord> MetadataStore::Remove(const std::string& key) {
  absl::MutexLock lock(&mu_);
  Txn txn(db_);
  RETURN_IF_ERROR(txn.Begin(kWrite));
  ASSIGN_OR_RETURN(SnapshotRecord rec, QueryRecord(db_, key));
  {
    Stmt s(db_, "SELECT key FROM snapshots WHERE parent = ?1 ORDER BY key LIMIT 1");
    RETURN_IF_ERROR(s.status());
    s.Bind(1, key);
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (row) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot remove snapshot '", key, "': snapshot '", s.Text(0), "' is its child"));
    }
  }
  {
    Stmt s(db_, "DELETE FROM snapshots WHERE id = ?1");
    RETURN_IF_ERROR(s.status());
    s.Bind(1, rec.id);
    RETURN_IF_ERROR(s.Step().status());
  }
  RETURN_IF_ERROR(txn.Commit());
  return rec;
}

absl::Status MetadataStore::Walk(const std::vector<std::string>& filters,
                                 const std::function<absl::Status(const SnapshotInfo&)>& fn) {
  std::vector<std::vector<Condition>> parsed;
  for (const std::string& f : filters) {
    ASSIGN_OR_RETURN(auto conds, ParseFilter(f));
    parsed.push_back(std::move(conds));
  }
  // Read everything first so `fn` may call back into the store.
  std::vector<SnapshotInfo> infos;
  {
    absl::MutexLock lock(&mu_);
    std::string sql = absl::StrCat(kSelectInfo, " ORDER BY key");
    Stmt s(db_, sql.c_str());
    RETURN_IF_ERROR(s.status());
    while (true) {
      ASSIGN_OR_RETURN(bool row, s.Step());
      if (!row) break;
      ASSIGN_OR_RETURN(SnapshotInfo info, ReadInfo(s));
      infos.push_back(std::move(info));
    }
  }
  for (const SnapshotInfo& info : infos) {
    bool match = parsed.empty();
    for (const auto& conds : parsed) {
      if (Matches(conds, info)) {
        match = true;
        break;
      }
    }
    if (match) RETURN_IF_ERROR(fn(info));
  }
  return absl::OkStatus();
}

absl::StatusOr<Usage> MetadataStore::GetUsage(const std::string& key) {
  absl::MutexLock lock(&mu_);
  Stmt s(db_, "SELECT size, inodes FROM snapshots WHERE key = ?1");
  RETURN_IF_ERROR(s.status());
  s.Bind(1, key);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("snapshot '", key, "' does not exist"));
  return Usage{s.Int(0), s.Int(1)};
}

absl::StatusOr<std::vector<int64_t>> MetadataStore::Ids() {
  absl::MutexLock lock(&mu_);
  Stmt s(db_, "SELECT id FROM snapshots ORDER BY id");
  RETURN_IF_ERROR(s.status());
  std::vector<int64_t> ids;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    ids.push_back(s.Int(0));
  }
  return ids;
}

}  // namespace modelfs::snapshotter
