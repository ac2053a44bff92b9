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
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "snapshotter/store/metadata_store.h"
#include "snapshotter/store/snapshotter.h"

namespace modelfs::snapshotter {

// Kernel-dependent overlay mount options, as containerd's overlay snapshotter chooses them.
struct OverlayOptions {
  // Prepend "index=off" to overlay mounts: with the inode index on, overlayfs ties an upper
  // directory to the lower layers it was first mounted with and refuses reuse.
  bool index_off = false;
};

// What containerd 1.6 does: index=off whenever the kernel has the overlay `index` parameter.
OverlayOptions DetectOverlayOptions();

class OverlaySnapshotter final : public Snapshotter {
 public:
  // Creates <root>/snapshots and opens <root>/metadata.db, whose times are read from `clock`
  // (never null; must outlive the snapshotter).
  static absl::StatusOr<std::unique_ptr<OverlaySnapshotter>> Open(const std::filesystem::path& root,
                                                                  OverlayOptions options = {},
                                                                  Clock* clock = Clock::Real());

  // Creates an active (writable) snapshot `key` on top of committed `parent` (may be empty)
  // and returns its mounts. Errors as MetadataStore::CreateSnapshot.
  absl::StatusOr<std::vector<Mount>> Prepare(const std::string& key, const std::string& parent,
                                             const Labels& labels) override;
  // Like Prepare, but the snapshot is a read-only view.
  absl::StatusOr<std::vector<Mount>> View(const std::string& key, const std::string& parent,
                                          const Labels& labels) override;
  // The mounts of an existing active snapshot or view; kNotFound if missing.
  absl::StatusOr<std::vector<Mount>> Mounts(const std::string& key) override;
  // Records the contents of active snapshot `key` as committed snapshot `name`.
  absl::Status Commit(const std::string& name, const std::string& key,
                      const Labels& labels) override;
  // Logical removal; the directory goes at the next Cleanup.
  absl::Status Remove(const std::string& key) override;
  absl::StatusOr<SnapshotInfo> Stat(const std::string& key) override;
  absl::StatusOr<SnapshotInfo> Update(const SnapshotInfo& info,
                                      const std::vector<std::string>& paths) override;
  absl::Status Walk(const std::vector<std::string>& filters,
                    const std::function<absl::Status(const SnapshotInfo&)>& fn) override;
  // Active snapshots: measured now from their fs directory; committed: recorded at commit;
  // views: zero.
  absl::StatusOr<Usage> GetUsage(const std::string& key) override;
  // Deletes every directory under <root>/snapshots that no snapshot references.
  absl::Status Cleanup() override;

  // The storage record of `key` (id, kind, ancestors). kNotFound if missing.
  absl::StatusOr<SnapshotRecord> Record(const std::string& key);

  // Where the contents of committed snapshot `id` live when it is not its own fs directory
  // (a lazily mounted model); nullopt for an ordinary snapshot. Set once, before first use.
  struct LowerDir {
    std::string path;
    // The directory already is the merged tree of `id` and every snapshot below it (an
    // image's top layer served as the image's whole tree): mounts leave those below out, so
    // that a whiteout of the top layer is not undone by the lower layers' own directories.
    bool whole_tree = false;
  };
  using LowerResolver = std::function<std::optional<LowerDir>(int64_t id)>;
  void set_lower_resolver(LowerResolver resolver) { lower_resolver_ = std::move(resolver); }

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
  LowerDir Lower(int64_t id) const;

  const std::filesystem::path root_;
  const std::filesystem::path snapshots_dir_;
  const OverlayOptions options_;
  std::unique_ptr<MetadataStore> store_;
  LowerResolver lower_resolver_;
  // Serializes directory staging, commit measurement and Cleanup.
  absl::Mutex dirs_mu_;
};

// Walks `dir` like `du`: size is the sum of allocated blocks (st_blocks * 512), inodes counts
// distinct inodes (hard links once), the directory itself included.
absl::StatusOr<Usage> DiskUsage(const std::filesystem::path& dir);

}  // namespace modelfs::snapshotter
