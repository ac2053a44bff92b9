// MetadataStore: the crash-safe record of snapshots (key, parent, kind, labels, usage) kept in
// SQLite, modelled on containerd's snapshots/storage. Every mutation runs in one transaction, so a
// crash leaves either the old or the new state. Numeric ids are never reused: they name the
// on-disk directories that Cleanup reclaims after a logical Remove.
//
// Thread-safety: all methods are safe to call concurrently; they serialize on one connection.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/clock.h"

struct sqlite3;

namespace modelfs::snapshotter {

// Values equal containerd.services.snapshots.v1.Kind.
enum class SnapshotKind { kUnknown = 0, kView = 1, kActive = 2, kCommitted = 3 };

using Labels = std::map<std::string, std::string>;

// What containerd calls snapshots.Info.
struct SnapshotInfo {
  std::string name;
  std::string parent;  // empty for a base snapshot
  SnapshotKind kind = SnapshotKind::kUnknown;
  absl::Time created;
  absl::Time updated;
  Labels labels;
};

// The storage-level view of one snapshot: its directory id and the ids of its ancestors,
// nearest parent first (the order overlayfs wants for lowerdir=).
struct SnapshotRecord {
  int64_t id = 0;
  SnapshotKind kind = SnapshotKind::kUnknown;
  std::vector<int64_t> parent_ids;
};

struct Usage {
  int64_t size = 0;
  int64_t inodes = 0;
};

class MetadataStore {
 public:
  // Opens (creating if needed) the database at `path` with WAL journaling and foreign keys.
  // Snapshots' created and updated times are read from `clock` (never null; must outlive the
  // store).
  static absl::StatusOr<std::unique_ptr<MetadataStore>> Open(const std::filesystem::path& path,
                                                             Clock* clock = Clock::Real());
  ~MetadataStore();
  MetadataStore(const MetadataStore&) = delete;
  MetadataStore& operator=(const MetadataStore&) = delete;

  // Runs inside CreateSnapshot's transaction, after the record exists and before it commits;
  // an error rolls the record back. The snapshotter renames the staged directory here, so a
  // crash leaves at worst an unreferenced directory (which Cleanup removes), never a record
  // without its directory. It runs under the store's lock: it must not call the store.
  using BeforeCommit = std::function<absl::Status(const SnapshotRecord&)>;

  // Records a new view or active snapshot. kInvalidArgument for an empty key, a committed
  // kind or an oversized label, kAlreadyExists if `key` is taken, kNotFound if `parent` is
  // missing, kInvalidArgument if `parent` is not committed (as containerd).
  absl::StatusOr<SnapshotRecord> CreateSnapshot(SnapshotKind kind, const std::string& key,
                                                const std::string& parent, const Labels& labels,
                                                const BeforeCommit& before_commit = nullptr);

  // kNotFound if `key` is missing.
  absl::StatusOr<SnapshotInfo> GetInfo(const std::string& key);
  absl::StatusOr<SnapshotRecord> GetSnapshot(const std::string& key);

  // Updates the mutable fields of info.name named by `paths` ("labels" replaces all labels,
  // "labels.<k>" sets or, when absent from info, deletes one); empty `paths` replaces all
  // labels. kInvalidArgument for any other path, kNotFound for a missing snapshot.
  absl::StatusOr<SnapshotInfo> UpdateInfo(const SnapshotInfo& info,
                                          const std::vector<std::string>& paths);

  // Turns active snapshot `key` into committed snapshot `name`, keeping its id, recording
  // `usage`, and replacing its labels with `labels` (containerd does not inherit them).
  // kAlreadyExists if `name` is taken, kNotFound if `key` is missing, kFailedPrecondition if
  // `key` is not active. Returns the id.
  absl::StatusOr<int64_t> CommitActive(const std::string& key, const std::string& name,
                                       const Usage& usage, const Labels& labels);

  // Deletes the record of `key` (the directory stays until Cleanup). kNotFound if missing,
  // kFailedPrecondition if another snapshot names it as parent. Returns the removed record.
  absl::StatusOr<SnapshotRecord> Remove(const std::string& key);

  // Calls `fn` for every snapshot that matches any of `filters` (all when empty), in key
  // order, stopping at the first error. Filter syntax is a subset of containerd's:
  // comma-separated conjunctions of `field`, `field==value` or `field!=value`, where field is
  // name, parent, kind or labels.<key> (labels."<key>" for keys with dots).
  absl::Status Walk(const std::vector<std::string>& filters,
                    const std::function<absl::Status(const SnapshotInfo&)>& fn);

  // The usage recorded at commit (zero for active snapshots and views).
  absl::StatusOr<Usage> GetUsage(const std::string& key);

  // Ids of every recorded snapshot (the directories Cleanup must keep).
  absl::StatusOr<std::vector<int64_t>> Ids();

 private:
  MetadataStore(sqlite3* db, Clock* clock);
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NowNanos() const { return absl::ToUnixNanos(clock_->Now()); }

  Clock* const clock_;

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
};

std::string KindName(SnapshotKind kind);

}  // namespace modelfs::snapshotter
