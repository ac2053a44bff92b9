// containerd overlay snapshotter semantics (see overlay_snapshotter.h).
#include "snapshotter/store/overlay_snapshotter.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status/status_macros.h"

namespace modelfs::snapshotter {
namespace fs = std::filesystem;
namespace {

absl::Status ErrnoStatus(const std::string& what, const fs::path& path, int err) {
  return absl::InternalError(absl::StrCat(what, " ", path.string(), ": ", std::strerror(err)));
}

}  // namespace

absl::StatusOr<Usage> DiskUsage(const fs::path& dir) {
  Usage usage;
  std::set<std::pair<dev_t, ino_t>> seen;
  auto account = [&](const fs::path& p) -> absl::Status {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) return ErrnoStatus("usage: lstat", p, errno);
    if (seen.insert({st.st_dev, st.st_ino}).second) {
      usage.inodes++;
      usage.size += static_cast<int64_t>(st.st_blocks) * 512;
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(account(dir));
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    RETURN_IF_ERROR(account(it->path()));
  }
  if (ec)
    return absl::InternalError(absl::StrCat("usage: walk ", dir.string(), ": ", ec.message()));
  return usage;
}

OverlayOptions DetectOverlayOptions() {
  std::error_code ec;
  OverlayOptions options;
  options.index_off = fs::exists("/sys/module/overlay/parameters/index", ec);
  return options;
}

OverlaySnapshotter::OverlaySnapshotter(fs::path root, OverlayOptions options,
                                       std::unique_ptr<MetadataStore> store)
    : root_(std::move(root)),
      snapshots_dir_(root_ / "snapshots"),
      options_(options),
      store_(std::move(store)) {}

absl::StatusOr<std::unique_ptr<OverlaySnapshotter>> OverlaySnapshotter::Open(const fs::path& root,
                                                                             OverlayOptions options,
                                                                             Clock* clock) {
  std::error_code ec;
  fs::create_directories(root / "snapshots", ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("snapshotter: create ", (root / "snapshots").string(), ": ", ec.message()));
  }
  // The snapshot directories hold other containers' files: keep them private to root.
  ::chmod(root.c_str(), 0700);
  ::chmod((root / "snapshots").c_str(), 0700);
  ASSIGN_OR_RETURN(auto store, MetadataStore::Open(root / "metadata.db", clock));
  return std::unique_ptr<OverlaySnapshotter>(
      new OverlaySnapshotter(root, options, std::move(store)));
}

fs::path OverlaySnapshotter::UpperPath(int64_t id) const {
  return snapshots_dir_ / std::to_string(id) / "fs";
}
fs::path OverlaySnapshotter::WorkPath(int64_t id) const {
  return snapshots_dir_ / std::to_string(id) / "work";
}

OverlaySnapshotter::LowerDir OverlaySnapshotter::Lower(int64_t id) const {
  if (lower_resolver_) {
    if (std::optional<LowerDir> p = lower_resolver_(id)) return *std::move(p);
  }
  return LowerDir{UpperPath(id).string()};
}

absl::StatusOr<SnapshotRecord> OverlaySnapshotter::Record(const std::string& key) {
  return store_->GetSnapshot(key);
}

std::vector<Mount> OverlaySnapshotter::MountsFor(const SnapshotRecord& rec) const {
  if (rec.parent_ids.empty()) {
    // A base snapshot is its own directory, bind mounted.
    return {Mount{"bind",
                  UpperPath(rec.id).string(),
                  "",
                  {rec.kind == SnapshotKind::kView ? "ro" : "rw", "rbind"}}};
  }
  std::vector<std::string> lowers;
  for (int64_t id : rec.parent_ids) {
    LowerDir lower = Lower(id);
    lowers.push_back(std::move(lower.path));
    if (lower.whole_tree) break;  // it already shows every layer below it
  }
  std::vector<std::string> options;
  if (options_.index_off) options.push_back("index=off");
  if (rec.kind == SnapshotKind::kActive) {
    options.push_back("workdir=" + WorkPath(rec.id).string());
    options.push_back("upperdir=" + UpperPath(rec.id).string());
  } else if (lowers.size() == 1) {
    // overlayfs needs two lower layers when there is no upper; one is just a read-only bind.
    return {Mount{"bind", lowers[0], "", {"ro", "rbind"}}};
  }
  options.push_back("lowerdir=" + absl::StrJoin(lowers, ":"));
  return {Mount{"overlay", "overlay", "", std::move(options)}};
}

absl::StatusOr<std::vector<Mount>> OverlaySnapshotter::CreateSnapshot(SnapshotKind kind,
                                                                      const std::string& key,
                                                                      const std::string& parent,
                                                                      const Labels& labels) {
  absl::MutexLock lock(&dirs_mu_);
  std::string tmpl = (snapshots_dir_ / "new-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoStatus("snapshotter: mkdtemp", tmpl, errno);
  fs::path staging(tmpl);
  auto cleanup_staging = [&] {
    std::error_code ec;
    fs::remove_all(staging, ec);
  };
  // chmod as well: the umask must not change the root directory containers see (0755).
  if (::mkdir((staging / "fs").c_str(), 0755) != 0 ||
      ::chmod((staging / "fs").c_str(), 0755) != 0) {
    int err = errno;
    cleanup_staging();
    return ErrnoStatus("snapshotter: mkdir", staging / "fs", err);
  }
  if (kind == SnapshotKind::kActive && ::mkdir((staging / "work").c_str(), 0711) != 0) {
    int err = errno;
    cleanup_staging();
    return ErrnoStatus("snapshotter: mkdir", staging / "work", err);
  }
  fs::path final_dir;
  auto move_into_place = [&](const SnapshotRecord& rec) -> absl::Status {
    if (!rec.parent_ids.empty()) {
      // Like containerd: the new layer's root takes its owner from the parent's root so
      // user-namespaced containers see a consistent tree.
      struct stat st;
      if (::stat(UpperPath(rec.parent_ids[0]).c_str(), &st) == 0 &&
          ::lchown((staging / "fs").c_str(), st.st_uid, st.st_gid) != 0 && errno != EPERM) {
        return ErrnoStatus("snapshotter: lchown", staging / "fs", errno);
      }
    }
    fs::path target = snapshots_dir_ / std::to_string(rec.id);
    if (::rename(staging.c_str(), target.c_str()) != 0) {
      return ErrnoStatus("snapshotter: rename into", target, errno);
    }
    final_dir = target;
    return absl::OkStatus();
  };
  absl::StatusOr<SnapshotRecord> rec =
      store_->CreateSnapshot(kind, key, parent, labels, move_into_place);
  if (!rec.ok()) {
    // The record was rolled back: whichever directory holds the staged snapshot is unowned.
    cleanup_staging();
    if (!final_dir.empty()) {
      std::error_code ec;
      fs::remove_all(final_dir, ec);
    }
    return rec.status();
  }
  return MountsFor(*rec);
}

absl::StatusOr<std::vector<Mount>> OverlaySnapshotter::Prepare(const std::string& key,
                                                               const std::string& parent,
                                                               const Labels& labels) {
  return CreateSnapshot(SnapshotKind::kActive, key, parent, labels);
}

absl::StatusOr<std::vector<Mount>> OverlaySnapshotter::View(const std::string& key,
                                                            const std::string& parent,
                                                            const Labels& labels) {
  return CreateSnapshot(SnapshotKind::kView, key, parent, labels);
}

absl::StatusOr<std::vector<Mount>> OverlaySnapshotter::Mounts(const std::string& key) {
  ASSIGN_OR_RETURN(SnapshotRecord rec, store_->GetSnapshot(key));
  if (rec.kind == SnapshotKind::kCommitted) {
    return absl::FailedPreconditionError(
        absl::StrCat("snapshot '", key, "' is committed and has no mounts"));
  }
  return MountsFor(rec);
}

absl::Status OverlaySnapshotter::Commit(const std::string& name, const std::string& key,
                                        const Labels& labels) {
  absl::MutexLock lock(&dirs_mu_);
  ASSIGN_OR_RETURN(SnapshotRecord rec, store_->GetSnapshot(key));
  if (rec.kind != SnapshotKind::kActive) {
    return absl::FailedPreconditionError(
        absl::StrCat("snapshot '", key, "' is ", KindName(rec.kind), ", not active"));
  }
  ASSIGN_OR_RETURN(Usage usage, DiskUsage(UpperPath(rec.id)));
  return store_->CommitActive(key, name, usage, labels).status();
}

absl::Status OverlaySnapshotter::Remove(const std::string& key) {
  return store_->Remove(key).status();
}

absl::StatusOr<SnapshotInfo> OverlaySnapshotter::Stat(const std::string& key) {
  return store_->GetInfo(key);
}

absl::StatusOr<SnapshotInfo> OverlaySnapshotter::Update(const SnapshotInfo& info,
                                                        const std::vector<std::string>& paths) {
  return store_->UpdateInfo(info, paths);
}

absl::Status OverlaySnapshotter::Walk(const std::vector<std::string>& filters,
                                      const std::function<absl::Status(const SnapshotInfo&)>& fn) {
  return store_->Walk(filters, fn);
}

absl::StatusOr<Usage> OverlaySnapshotter::GetUsage(const std::string& key) {
  ASSIGN_OR_RETURN(SnapshotRecord rec, store_->GetSnapshot(key));
  if (rec.kind == SnapshotKind::kActive) return DiskUsage(UpperPath(rec.id));
  return store_->GetUsage(key);
}

absl::Status OverlaySnapshotter::Cleanup() {
  absl::MutexLock lock(&dirs_mu_);
  ASSIGN_OR_RETURN(std::vector<int64_t> ids, store_->Ids());
  std::set<std::string> keep;
  for (int64_t id : ids) keep.insert(std::to_string(id));
  std::error_code ec;
  std::vector<fs::path> orphans;
  for (fs::directory_iterator it(snapshots_dir_, ec), end; !ec && it != end; it.increment(ec)) {
    if (!keep.count(it->path().filename().string())) orphans.push_back(it->path());
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cleanup: list ", snapshots_dir_.string(), ": ", ec.message()));
  }
  for (const fs::path& p : orphans) {
    fs::remove_all(p, ec);
    if (ec)
      return absl::InternalError(absl::StrCat("cleanup: remove ", p.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace modelfs::snapshotter
