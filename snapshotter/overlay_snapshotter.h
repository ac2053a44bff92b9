// OverlaySnapshotter: containerd's overlayfs snapshotter semantics (snapshots/overlay) on a root
// directory, for ordinary image layers. Layout:
//   <root>/metadata.db          MetadataStore
//   <root>/snapshots/<id>/fs    the snapshot's contents (overlay upperdir while active)
//   <root>/snapshots/<id>/work  overlay workdir (active snapshots only)
// A snapshot directory is staged under a temporary name and renamed into place only after its
// metadata transaction succeeded; Remove is logical and Cleanup reclaims unreferenced
// directories. The snapshotter never mounts anything: it returns the mounts for the caller.
//
// Thread-safety: all methods may be called concurrently; mutations that touch directories are
// serialized so Cleanup never races a staged snapshot.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "snapshotter/metadata_store.h"

namespace modelfs::snapshotter {

// containerd.types.Mount.
struct Mount {
  std::string type;
  std::string source;
  std::string target;
  std::vector<std::string> options;

  bool operator==(const Mount&) const = default;
};

// Kernel-dependent overlay mount options, as containerd's overlay snapshotter chooses them.
struct OverlayOptions {
  // Prepend "index=off" to overlay mounts: with the inode index on, overlayfs ties an upper
  // directory to the lower layers it was first mounted with and refuses reuse.
  bool index_off = false;
};

// What containerd 1.6 does: index=off whenever the kernel has the overlay `index` parameter.
OverlayOptions DetectOverlayOptions();

class OverlaySnapshotter {
 public:
  // Creates <root>/snapshots and opens <root>/metadata.db.
  static absl::StatusOr<std::unique_ptr<OverlaySnapshotter>> Open(const std::filesystem::path& root,
                                                                  OverlayOptions options = {});

  // Creates an active (writable) snapshot `key` on top of committed `parent` (may be empty)
  // and returns its mounts. Errors as MetadataStore::CreateSnapshot.
  absl::StatusOr<std::vector<Mount>> Prepare(const std::string& key, const std::string& parent,
                                             const Labels& labels);
  // Like Prepare, but the snapshot is a read-only view.
  absl::StatusOr<std::vector<Mount>> View(const std::string& key, const std::string& parent,
                                          const Labels& labels);
  // The mounts of an existing active snapshot or view; kNotFound if missing.
  absl::StatusOr<std::vector<Mount>> Mounts(const std::string& key);
  // Records the contents of active snapshot `key` as committed snapshot `name`.
  absl::Status Commit(const std::string& name, const std::string& key, const Labels& labels);
  // Logical removal; the directory goes at the next Cleanup.
  absl::Status Remove(const std::string& key);
  absl::StatusOr<SnapshotInfo> Stat(const std::string& key);
  absl::StatusOr<SnapshotInfo> Update(const SnapshotInfo& info,
                                      const std::vector<std::string>& paths);
  absl::Status Walk(const std::vector<std::string>& filters,
                    const std::function<absl::Status(const SnapshotInfo&)>& fn);
  // Active snapshots: measured now from their fs directory; committed: recorded at commit;
  // views: zero.
  absl::StatusOr<Usage> GetUsage(const std::string& key);
  // Deletes every directory under <root>/snapshots that no snapshot references.
  absl::Status Cleanup();

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path UpperPath(int64_t id) const;
  std::filesystem::path WorkPath(int64_t id) const;

 private:
  OverlaySnapshotter(std::filesystem::path root, OverlayOptions options,
                     std::unique_ptr<MetadataStore> store);
  absl::StatusOr<std::vector<Mount>> CreateSnapshot(SnapshotKind kind, const std::string& key,
                                                    const std::string& parent,
                                                    const Labels& labels);
  std::vector<Mount> MountsFor(const SnapshotRecord& rec) const;

  const std::filesystem::path root_;
  const std::filesystem::path snapshots_dir_;
  const OverlayOptions options_;
  std::unique_ptr<MetadataStore> store_;
  // Serializes directory staging, commit measurement and Cleanup.
  absl::Mutex dirs_mu_;
};

// Walks `dir` like `du`: size is the sum of allocated blocks (st_blocks * 512), inodes counts
// distinct inodes (hard links once), the directory itself included.
absl::StatusOr<Usage> DiskUsage(const std::filesystem::path& dir);

}  // namespace modelfs::snapshotter
