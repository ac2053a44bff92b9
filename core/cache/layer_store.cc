#include "core/cache/layer_store.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"

namespace modelfs {

namespace {

std::string ErrnoText(int err) { return std::string(strerror(err)); }

}  // namespace

LayerStore::LayerStore(std::string dir, WriteFn write)
    : dir_(std::move(dir)), write_(std::move(write)) {}

absl::Status LayerStore::Init() const {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(dir_) / "blobs" / "sha256", ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cache: cannot create ", dir_, "/blobs/sha256: ", ec.message()));
  }
  return absl::OkStatus();
}

std::string LayerStore::FileNameOf(const Digest& digest) {
  return absl::StrCat(std::string(digest.hex()), ".data");
}

std::string LayerStore::PathOf(const Digest& digest) const {
  return absl::StrCat(dir_, "/blobs/sha256/", FileNameOf(digest));
}

absl::StatusOr<int> LayerStore::Create(const Digest& digest, uint64_t size, bool truncate) const {
  const std::string path = PathOf(digest);
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cache: cannot open ", path, ": ", ErrnoText(errno)));
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    close(fd);
    return absl::InternalError(
        absl::StrCat("cache: cannot size ", path, " to ", size, ": ", ErrnoText(err)));
  }
  return fd;
}

int LayerStore::OpenExisting(const Digest& digest) const {
  return open(PathOf(digest).c_str(), O_RDWR | O_CLOEXEC);
}

int LayerStore::OpenReadOnly(const Digest& digest) const {
  return open(PathOf(digest).c_str(), O_RDONLY | O_CLOEXEC);
}

int LayerStore::Write(int fd, const char* data, uint64_t n, uint64_t offset) const {
  if (write_) return write_(fd, data, n, offset);
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = pwrite(fd, data + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    done += static_cast<uint64_t>(r);
  }
  return 0;
}

int LayerStore::Copy(int in, uint64_t in_offset, int out, uint64_t out_offset, uint64_t n) const {
  uint64_t done = 0;
  if (!write_) {
    while (done < n) {
      loff_t from = static_cast<loff_t>(in_offset + done);
      loff_t to = static_cast<loff_t>(out_offset + done);
      const ssize_t r = copy_file_range(in, &from, out, &to, n - done, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) break;  // not here (EXDEV, ENOSYS, EINVAL...): by hand from `done`
      if (r == 0) return EIO;
      done += static_cast<uint64_t>(r);
    }
  }
  std::string buf;
  while (done < n) {
    const uint64_t len = std::min<uint64_t>(n - done, 1 << 20);
    buf.resize(len);
    uint64_t got = 0;
    while (got < len) {
      const ssize_t r =
          pread(in, buf.data() + got, len - got, static_cast<off_t>(in_offset + done + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return errno;
      if (r == 0) return EIO;
      got += static_cast<uint64_t>(r);
    }
    if (int err = Write(out, buf.data(), len, out_offset + done); err != 0) return err;
    done += len;
  }
  return 0;
}

absl::Status LayerStore::ReadFull(int fd, const Digest& digest, char* buf, uint64_t n,
                                  uint64_t offset) const {
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = pread(fd, buf + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return absl::InternalError(absl::StrCat("reading ", PathOf(digest), " at offset ",
                                              offset + done, ": ", ErrnoText(errno)));
    }
    if (r == 0) {
      return absl::InternalError(
          absl::StrCat("reading ", PathOf(digest), ": file ends before offset ", offset + done));
    }
    done += static_cast<uint64_t>(r);
  }
  return absl::OkStatus();
}

absl::Status LayerStore::Sync(int fd, const Digest& digest) const {
  if (fdatasync(fd) == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("cache: fdatasync ", PathOf(digest), ": ", ErrnoText(errno)));
}

void LayerStore::Remove(const Digest& digest) const {
  unlink(PathOf(digest).c_str());
  RemoveMembers(digest);
}

void LayerStore::RemoveMembers(const Digest& digest) const {
  std::error_code ec;
  std::filesystem::remove_all(
      std::filesystem::path(dir_) / "blobs" / "sha256" / MemberDirNameOf(digest), ec);
}

std::string LayerStore::MemberDirNameOf(const Digest& digest) {
  return absl::StrCat(std::string(digest.hex()), ".members");
}

std::string LayerStore::MemberPathOf(const Digest& digest, uint64_t offset) const {
  return absl::StrCat(dir_, "/blobs/sha256/", MemberDirNameOf(digest), "/", offset);
}

absl::StatusOr<int> LayerStore::CreateMember(const Digest& digest, uint64_t offset,
                                             uint64_t length) const {
  const std::string dir = absl::StrCat(dir_, "/blobs/sha256/", MemberDirNameOf(digest));
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    const int err = errno;
    return absl::Status(err == ENOSPC || err == EDQUOT ? absl::StatusCode::kResourceExhausted
                                                       : absl::StatusCode::kInternal,
                        absl::StrCat("cache: cannot create ", dir, ": ", ErrnoText(err)));
  }
  const std::string path = MemberPathOf(digest, offset);
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  // The file's blocks are allocated at once, in as few extents as the file system can: spans
  // land out of order (flights run side by side), and a sparse file filled that way ends in
  // many extents, which warm readahead (an mmap loader's above all) pays for on every load. A
  // full disk is said now; a file system that cannot allocate ahead gets a sparse file.
  if (fd >= 0 && length > 0 && fallocate(fd, 0, 0, static_cast<off_t>(length)) != 0 &&
      (errno == ENOSPC || errno == EDQUOT)) {
    const int err = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("cache: cannot allocate ", path, " (", length, " bytes): ", ErrnoText(err)));
  }
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(length)) != 0) {
    const int err = errno;
    if (fd >= 0) close(fd);
    return absl::Status(
        err == ENOSPC || err == EDQUOT ? absl::StatusCode::kResourceExhausted
                                       : absl::StatusCode::kInternal,
        absl::StrCat("cache: cannot create ", path, " (", length, " bytes): ", ErrnoText(err)));
  }
  return fd;
}

int LayerStore::OpenMember(const Digest& digest, uint64_t offset, bool read_only) const {
  return open(MemberPathOf(digest, offset).c_str(),
              (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW);
}

void LayerStore::RemoveAllExcept(const absl::flat_hash_set<std::string>& keep) const {
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(dir_) / "blobs" / "sha256", ec)) {
    if (!keep.contains(entry.path().filename().string())) {
      std::filesystem::remove_all(entry.path(), ec);
    }
  }
}

std::string LayerStore::SealOf(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return std::string();
  return absl::StrCat(st.st_dev, ":", st.st_ino, ":", st.st_size, ":", st.st_ctim.tv_sec, ".",
                      st.st_ctim.tv_nsec, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
}

}  // namespace modelfs
