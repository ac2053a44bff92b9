// StagedDest (see staged_dest.h).
#include "core/io/staged_dest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace fs = std::filesystem;
namespace {

absl::Status Rename(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("rename ", from.string(), " to ", to.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

// Moves a staged tree into an existing DEST, merging directories and replacing files DEST
// already has; Rollback() puts DEST back as it was (replaced files come back from `backup`).
// A link in DEST is replaced like a file (symlink_status), never followed.
class TreeMerger {
 public:
  explicit TreeMerger(fs::path backup) : backup_(std::move(backup)) {}

  absl::Status Merge(const fs::path& from, const fs::path& to) {
    std::error_code ec;
    std::vector<fs::path> names;
    for (const auto& e : fs::directory_iterator(from, ec)) names.push_back(e.path().filename());
    if (ec) return absl::InternalError(absl::StrCat(from.string(), ": ", ec.message()));
    std::sort(names.begin(), names.end());
    for (const fs::path& name : names) {
      const fs::path src = from / name;
      const fs::path dst = to / name;
      const fs::file_status s = fs::symlink_status(src, ec);
      const fs::file_status d = fs::symlink_status(dst, ec);
      if (!fs::exists(d)) {
        RETURN_IF_ERROR(Rename(src, dst));
        undo_.push_back({dst, {}});
      } else if (fs::is_directory(s) && fs::is_directory(d)) {
        RETURN_IF_ERROR(Merge(src, dst));
      } else if (fs::is_directory(s) || fs::is_directory(d)) {
        return absl::FailedPreconditionError(absl::StrCat(
            dst.string(), " already exists as a ", fs::is_directory(d) ? "directory" : "file",
            "; the model has a ", fs::is_directory(s) ? "directory" : "file", " there"));
      } else {
        const fs::path kept = backup_ / std::to_string(undo_.size());
        RETURN_IF_ERROR(Rename(dst, kept));
        if (absl::Status st = Rename(src, dst); !st.ok()) {
          (void)Rename(kept, dst);
          return st;
        }
        undo_.push_back({dst, kept});
      }
    }
    return absl::OkStatus();
  }

  void Rollback() {
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
      std::error_code ec;
      fs::remove_all(it->placed, ec);
      if (!it->kept.empty()) fs::rename(it->kept, it->placed, ec);
    }
    undo_.clear();
  }

 private:
  struct Undo {
    fs::path placed;
    fs::path kept;  // what DEST had there before, or empty
  };
  fs::path backup_;
  std::vector<Undo> undo_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StagedDest>> StagedDest::Create(const std::string& dest,
                                                               const std::string& kind) {
  std::error_code ec;
  fs::path dest_path = fs::absolute(fs::path(dest), ec).lexically_normal();
  if (dest_path.filename().empty()) dest_path = dest_path.parent_path();
  const fs::file_status dest_status = fs::status(dest_path, ec);
  const bool dest_existed = fs::exists(dest_status);
  if (dest_existed && !fs::is_directory(dest_status)) {
    return absl::InvalidArgumentError(absl::StrCat(dest, ": exists and is not a directory"));
  }
  const fs::path parent = dest_path.parent_path();
  fs::path first_created;  // the topmost missing ancestor of DEST, removed on failure
  for (fs::path p = parent; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    first_created = p;
    if (p == p.root_path()) break;
  }
  fs::create_directories(parent, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(parent.string(), ": ", ec.message()));
  std::string staging = (parent / absl::StrCat(".modelfs-", kind, "-XXXXXX")).string();
  if (mkdtemp(staging.data()) == nullptr) {
    const int err = errno;
    if (!first_created.empty()) fs::remove_all(first_created, ec);
    return absl::InvalidArgumentError(absl::StrCat("cannot stage the ", kind, " next to ", dest,
                                                   " in ", parent.string(), ": ", strerror(err)));
  }
  std::unique_ptr<StagedDest> s(
      new StagedDest(dest_path, dest_existed, first_created, fs::path(staging)));
  fs::create_directories(s->tree(), ec);
  if (ec) return absl::InternalError(absl::StrCat(s->tree().string(), ": ", ec.message()));
  return s;
}

StagedDest::StagedDest(fs::path dest, bool dest_existed, fs::path created, fs::path staging)
    : dest_(std::move(dest)),
      dest_existed_(dest_existed),
      created_(std::move(created)),
      staging_(std::move(staging)) {}

StagedDest::~StagedDest() {
  std::error_code ec;
  fs::remove_all(staging_, ec);
  if (!committed_ && !created_.empty()) fs::remove_all(created_, ec);
}

absl::Status StagedDest::Commit() {
  if (!dest_existed_) {
    RETURN_IF_ERROR(Rename(tree(), dest_));
  } else {
    const fs::path backup = staging_ / "backup";
    std::error_code ec;
    fs::create_directories(backup, ec);
    TreeMerger merger(backup);
    if (absl::Status st = merger.Merge(tree(), dest_); !st.ok()) {
      merger.Rollback();
      return st;
    }
  }
  committed_ = true;
  return absl::OkStatus();
}

}  // namespace modelfs
