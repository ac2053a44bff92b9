// ApplyOverlayLayer (layer_applier.h): containerd's overlay applier, entry by entry.
#include "snapshotter/store/layer_applier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/oci/tar.h"
#include "core/status/status_macros.h"

namespace modelfs::snapshotter {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kWhiteout = ".wh.";
constexpr std::string_view kOpaque = ".wh..wh..opq";
constexpr char kOpaqueXattr[] = "trusted.overlay.opaque";

class Applier {
 public:
  Applier(RangeReader& tar, fs::path dir, std::string_view layer, const LayerApplyOptions& options)
      : tar_(tar), dir_(std::move(dir)), layer_(layer), options_(options) {}

  absl::StatusOr<LayerApplyCounts> Run() {
    TarReadOptions read;
    read.check_paths = true;
    RETURN_IF_ERROR(ScanTarHeaders(
        tar_, [this](const TarEntry& e) { return Apply(e); }, read));
    // Directory times last: creating their children changed them.
    for (const auto& [path, e] : dirs_) RETURN_IF_ERROR(SetTimes(path, e));
    return counts_;
  }

 private:
  absl::Status Refuse(const TarEntry& e, const std::string& why) const {
    return absl::PermissionDeniedError(absl::StrCat(layer_, ": entry '", e.path, "': ", why));
  }
  absl::Status Errno(const TarEntry& e, const std::string& call, int err) const {
    return absl::InternalError(
        absl::StrCat(layer_, ": entry '", e.path, "': ", call, ": ", strerror(err)));
  }

  // Every directory from the top down to `rel` (a path of the layer) exists as a directory,
  // created (mkparent) where missing. A symlink or a file on the way is refused.
  absl::Status MakeParents(const TarEntry& e, std::string_view rel) {
    if (rel.empty()) return absl::OkStatus();
    for (size_t end = 0; end != std::string_view::npos;) {
      end = rel.find('/', end + 1);
      const std::string prefix(rel.substr(0, end));
      const fs::path p = dir_ / prefix;
      struct stat st;
      if (lstat(p.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode)) continue;
        return Refuse(e, absl::StrCat("its parent '", prefix, "' is ",
                                      S_ISLNK(st.st_mode) ? "a symlink" : "not a directory",
                                      " in this layer; not written through it"));
      }
      if (errno != ENOENT) return Errno(e, absl::StrCat("lstat ", prefix), errno);
      if (mkdir(p.c_str(), 0755) != 0) return Errno(e, absl::StrCat("mkdir ", prefix), errno);
      if (chmod(p.c_str(), 0755) != 0) return Errno(e, absl::StrCat("chmod ", prefix), errno);
      RETURN_IF_ERROR(CopyParentDirInfo(e, prefix, p));
    }
    return absl::OkStatus();
  }

  // containerd's mkparent: the metadata of the same directory in the nearest parent that has
  // one; none when a nearer parent has something else there.
  absl::Status CopyParentDirInfo(const TarEntry& e, const std::string& rel, const fs::path& p) {
    for (const fs::path& parent : options_.parents) {
      const fs::path src = parent / rel;
      struct stat st;
      if (lstat(src.c_str(), &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) continue;
        return Errno(e, absl::StrCat("lstat ", src.string()), errno);
      }
      if (!S_ISDIR(st.st_mode)) return absl::OkStatus();
      if (lchown(p.c_str(), st.st_uid, st.st_gid) != 0) return Errno(e, "lchown", errno);
      if (chmod(p.c_str(), st.st_mode & 07777) != 0) return Errno(e, "chmod", errno);
      const struct timespec times[2] = {st.st_atim, st.st_mtim};
      if (utimensat(AT_FDCWD, p.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) {
        return Errno(e, "utimensat", errno);
      }
      return CopyXattrs(e, src, p);
    }
    return absl::OkStatus();
  }

  absl::Status CopyXattrs(const TarEntry& e, const fs::path& src, const fs::path& dst) {
    ssize_t n = llistxattr(src.c_str(), nullptr, 0);
    if (n <= 0) return absl::OkStatus();
    std::string names(static_cast<size_t>(n), '\0');
    n = llistxattr(src.c_str(), names.data(), names.size());
    if (n < 0) return absl::OkStatus();
    names.resize(static_cast<size_t>(n));
    for (size_t i = 0; i < names.size();) {
      const std::string name(names.c_str() + i);
      i += name.size() + 1;
      // What overlayfs keeps for itself (opaque markers of the lower layer) is not copied up.
      if (absl::StartsWith(name, "trusted.overlay.")) continue;
      ssize_t len = lgetxattr(src.c_str(), name.c_str(), nullptr, 0);
      if (len < 0) continue;
      std::string value(static_cast<size_t>(len), '\0');
      len = lgetxattr(src.c_str(), name.c_str(), value.data(), value.size());
      if (len < 0) continue;
      value.resize(static_cast<size_t>(len));
      if (lsetxattr(dst.c_str(), name.c_str(), value.data(), value.size(), 0) != 0 &&
          errno != ENOTSUP) {
        return Errno(e, absl::StrCat("lsetxattr ", name), errno);
      }
    }
    return absl::OkStatus();
  }

  absl::Status SetTimes(const fs::path& p, const TarEntry& e) {
    struct timespec times[2];
    times[1].tv_sec = static_cast<time_t>(e.mtime);
    times[1].tv_nsec = static_cast<long>(e.mtime_nsec);
    times[0] = times[1];  // containerd: atime = the later of atime and mtime; tars carry mtime
    if (utimensat(AT_FDCWD, p.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) {
      return Errno(e, "utimensat", errno);
    }
    return absl::OkStatus();
  }

  absl::Status Whiteout(const TarEntry& e, const std::string& parent, std::string_view base) {
    const fs::path pdir = parent.empty() ? dir_ : dir_ / parent;
    if (base == kOpaque) {
      if (!options_.overlay_whiteouts) return absl::OkStatus();
      if (lsetxattr(pdir.c_str(), kOpaqueXattr, "y", 1, 0) != 0) {
        return Errno(e, absl::StrCat("lsetxattr ", kOpaqueXattr), errno);
      }
      counts_.opaque_dirs++;
      return absl::OkStatus();
    }
    const std::string_view name = base.substr(kWhiteout.size());
    if (name.empty() || name == "." || name == "..") return Refuse(e, "invalid whiteout name");
    const fs::path target = pdir / std::string(name);
    counts_.whiteouts++;
    if (!options_.overlay_whiteouts) {
      std::error_code ec;
      fs::remove_all(target, ec);  // never follows a symlink
      if (ec) return Errno(e, "remove", ec.value());
      return absl::OkStatus();
    }
    if (mknod(target.c_str(), S_IFCHR, makedev(0, 0)) != 0) return Errno(e, "mknod", errno);
    if (lchown(target.c_str(), static_cast<uid_t>(e.uid), static_cast<gid_t>(e.gid)) != 0) {
      return Errno(e, "lchown", errno);
    }
    return absl::OkStatus();
  }

  absl::Status WriteFile(const TarEntry& e, const fs::path& p) {
    int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return Errno(e, "open", errno);
    constexpr uint64_t kPiece = 1 << 20;
    absl::Status st;
    for (uint64_t done = 0; st.ok() && done < e.size;) {
      const uint64_t n = std::min(kPiece, e.size - done);
      absl::StatusOr<std::string> data = tar_.ReadAt(e.data_offset + done, n);
      if (!data.ok()) {
        st = data.status();
        break;
      }
      std::string_view left = *data;
      while (!left.empty()) {
        ssize_t w = write(fd, left.data(), left.size());
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          st = Errno(e, "write", errno);
          break;
        }
        left.remove_prefix(static_cast<size_t>(w));
      }
      done += n;
    }
    if (close(fd) != 0 && st.ok()) st = Errno(e, "close", errno);
    counts_.bytes += e.size;
    return st;
  }

  absl::Status Apply(const TarEntry& e) {
    const size_t slash = e.path.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : e.path.substr(0, slash);
    const std::string_view base =
        std::string_view(e.path).substr(slash == std::string::npos ? 0 : slash + 1);
    RETURN_IF_ERROR(MakeParents(e, parent));
    if (base.starts_with(kWhiteout)) return Whiteout(e, parent, base);
    if (e.typeflag == 'g') return absl::OkStatus();

    const fs::path p = dir_ / e.path;
    struct stat st;
    if (lstat(p.c_str(), &st) == 0) {
      if (!(S_ISDIR(st.st_mode) && e.type == TarEntryType::kDirectory)) {
        std::error_code ec;
        fs::remove_all(p, ec);
        if (ec) return Errno(e, "remove", ec.value());
      }
    } else if (errno != ENOENT) {
      return Errno(e, "lstat", errno);
    }

    switch (e.type) {
      case TarEntryType::kDirectory:
        if (lstat(p.c_str(), &st) != 0) {
          if (mkdir(p.c_str(), 0700) != 0) return Errno(e, "mkdir", errno);
        }
        counts_.directories++;
        break;
      case TarEntryType::kFile:
        RETURN_IF_ERROR(WriteFile(e, p));
        counts_.files++;
        break;
      case TarEntryType::kSymlink:
        if (symlink(e.linkname.c_str(), p.c_str()) != 0) return Errno(e, "symlink", errno);
        counts_.symlinks++;
        break;
      case TarEntryType::kHardLink: {
        // The target is an entry of this layer, named canonically by the tar reader; the
        // path to it must not pass through a link either.
        const size_t ts = e.linkname.rfind('/');
        if (ts != std::string::npos) RETURN_IF_ERROR(CheckRealDirs(e, e.linkname.substr(0, ts)));
        const fs::path target = dir_ / e.linkname;
        struct stat tst;
        if (lstat(target.c_str(), &tst) != 0) {
          return Refuse(e, absl::StrCat("hard link to '", e.linkname,
                                        "', which is not an entry of this layer"));
        }
        if (S_ISDIR(tst.st_mode)) {
          return Refuse(e, absl::StrCat("hard link to the directory '", e.linkname, "'"));
        }
        if (linkat(AT_FDCWD, target.c_str(), AT_FDCWD, p.c_str(), 0) != 0) {
          return Errno(e, "link", errno);
        }
        counts_.hardlinks++;
        break;
      }
      case TarEntryType::kOther: {
        mode_t type = 0;
        if (e.typeflag == '3') type = S_IFCHR;
        if (e.typeflag == '4') type = S_IFBLK;
        if (e.typeflag == '6') type = S_IFIFO;
        if (type == 0) {
          return Refuse(
              e, absl::StrCat("unhandled tar entry type '", std::string(1, e.typeflag), "'"));
        }
        if (e.devmajor > UINT32_MAX || e.devminor > UINT32_MAX) {
          return Refuse(e, "device number out of range");
        }
        if (mknod(p.c_str(), type | (e.mode & 07777),
                  makedev(static_cast<unsigned>(e.devmajor), static_cast<unsigned>(e.devminor))) !=
            0) {
          return Errno(e, "mknod", errno);
        }
        counts_.devices++;
        break;
      }
    }
    counts_.entries++;

    if (lchown(p.c_str(), static_cast<uid_t>(e.uid), static_cast<gid_t>(e.gid)) != 0) {
      return Errno(e, "lchown", errno);
    }
    for (const auto& [name, value] : e.xattrs) {
      if (lsetxattr(p.c_str(), name.c_str(), value.data(), value.size(), 0) == 0) continue;
      const int err = errno;
      // As containerd: a filesystem without the namespace, and user.* on what cannot carry it.
      if (err == ENOTSUP ||
          (err == EPERM && absl::StartsWith(name, "user.") && lstat(p.c_str(), &st) == 0 &&
           !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))) {
        counts_.skipped_xattrs++;
        continue;
      }
      return Errno(e, absl::StrCat("lsetxattr ", name), err);
    }
    // After lchown, which clears setuid/setgid. A symlink has no mode of its own; a hard link
    // to one neither (containerd means to do the same, but looks the link's target up from its
    // working directory rather than the snapshot's, so what it does depends on the host).
    if (e.type != TarEntryType::kSymlink &&
        !(e.type == TarEntryType::kHardLink && lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode))) {
      if (chmod(p.c_str(), e.mode & 07777) != 0) return Errno(e, "chmod", errno);
    }
    if (e.type == TarEntryType::kDirectory) {
      dirs_.emplace_back(p, e);
      return absl::OkStatus();
    }
    return SetTimes(p, e);
  }

  // Each directory from the top down to `rel` exists in this layer as a real directory.
  absl::Status CheckRealDirs(const TarEntry& e, std::string_view rel) {
    for (size_t end = 0; end != std::string_view::npos;) {
      end = rel.find('/', end + 1);
      const std::string prefix(rel.substr(0, end));
      struct stat st;
      if (lstat((dir_ / prefix).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return Refuse(e, absl::StrCat("hard link to '", e.linkname, "' through '", prefix,
                                      "', which is not a directory of this layer"));
      }
    }
    return absl::OkStatus();
  }

  RangeReader& tar_;
  const fs::path dir_;
  const std::string layer_;
  const LayerApplyOptions& options_;
  LayerApplyCounts counts_;
  std::vector<std::pair<fs::path, TarEntry>> dirs_;
};

}  // namespace

absl::StatusOr<LayerApplyCounts> ApplyOverlayLayer(RangeReader& tar, const fs::path& dir,
                                                   std::string_view layer,
                                                   const LayerApplyOptions& options) {
  return Applier(tar, dir, layer, options).Run();
}

}  // namespace modelfs::snapshotter
