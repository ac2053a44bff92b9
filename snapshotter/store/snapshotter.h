// Snapshotter: the operations of containerd's snapshots.Snapshotter, as the gRPC service calls
// them. OverlaySnapshotter implements them for ordinary layers; ModelSnapshotter adds lazily
// mounted model layers on top of it.
//
// Thread-safety: implementations must accept concurrent calls.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "snapshotter/store/metadata_store.h"

namespace modelfs::snapshotter {

// containerd.types.Mount.
struct Mount {
  std::string type;
  std::string source;
  std::string target;
  std::vector<std::string> options;

  bool operator==(const Mount&) const = default;
};

class Snapshotter {
 public:
  virtual ~Snapshotter() = default;

  // Creates an active (writable) snapshot `key` on top of committed `parent` (may be empty)
  // and returns its mounts.
  virtual absl::StatusOr<std::vector<Mount>> Prepare(const std::string& key,
                                                     const std::string& parent,
                                                     const Labels& labels) = 0;
  // Like Prepare, but the snapshot is a read-only view.
  virtual absl::StatusOr<std::vector<Mount>> View(const std::string& key, const std::string& parent,
                                                  const Labels& labels) = 0;
  // The mounts of an existing active snapshot or view; kNotFound if missing.
  virtual absl::StatusOr<std::vector<Mount>> Mounts(const std::string& key) = 0;
  // Records the contents of active snapshot `key` as committed snapshot `name`.
  virtual absl::Status Commit(const std::string& name, const std::string& key,
                              const Labels& labels) = 0;
  virtual absl::Status Remove(const std::string& key) = 0;
  virtual absl::StatusOr<SnapshotInfo> Stat(const std::string& key) = 0;
  virtual absl::StatusOr<SnapshotInfo> Update(const SnapshotInfo& info,
                                              const std::vector<std::string>& paths) = 0;
  virtual absl::Status Walk(const std::vector<std::string>& filters,
                            const std::function<absl::Status(const SnapshotInfo&)>& fn) = 0;
  virtual absl::StatusOr<Usage> GetUsage(const std::string& key) = 0;
  virtual absl::Status Cleanup() = 0;
};

}  // namespace modelfs::snapshotter
