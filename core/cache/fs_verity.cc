// ProbeFsVerity (FS_IOC_ENABLE_VERITY on a probe file) and the kernel's VerityOps (fs_verity.h).
#include "core/cache/fs_verity.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fsverity.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace modelfs {

namespace {

// The block size the cache asks for: 4 KiB, the page size of most nodes and the one ext4
// supports on every page size.
constexpr __u32 kVerityBlockSize = 4096;

class KernelVerity : public VerityOps {
 public:
  absl::Status Probe(const std::string& dir) override { return ProbeFsVerity(dir); }

  absl::Status Enable(const std::string& path) override {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return absl::InternalError(absl::StrCat("fs-verity: opening ", path, ": ", strerror(errno)));
    }
    fsverity_enable_arg arg = {};
    arg.version = 1;
    arg.hash_algorithm = FS_VERITY_HASH_ALG_SHA256;
    arg.block_size = kVerityBlockSize;
    const int rc = ioctl(fd, FS_IOC_ENABLE_VERITY, &arg);
    const int err = errno;
    close(fd);
    if (rc == 0 || err == EEXIST) return absl::OkStatus();
    const std::string what =
        absl::StrCat("fs-verity: FS_IOC_ENABLE_VERITY on ", path, ": ", strerror(err));
    if (err == EOPNOTSUPP || err == ENOTTY) return absl::UnimplementedError(what);
    if (err == ETXTBSY) return absl::FailedPreconditionError(what);
    return absl::InternalError(what);
  }

  absl::StatusOr<std::string> Measure(int fd) override {
    // fsverity_digest ends in a flexible array: room for the largest digest behind it.
    alignas(fsverity_digest) unsigned char buf[sizeof(fsverity_digest) + 64] = {};
    auto* d = reinterpret_cast<fsverity_digest*>(buf);
    d->digest_size = 64;
    if (ioctl(fd, FS_IOC_MEASURE_VERITY, d) != 0) {
      const int err = errno;
      const std::string what = absl::StrCat("fs-verity: FS_IOC_MEASURE_VERITY: ", strerror(err));
      if (err == ENODATA) return absl::NotFoundError(what);
      if (err == EOPNOTSUPP || err == ENOTTY) return absl::UnimplementedError(what);
      return absl::InternalError(what);
    }
    if (d->digest_algorithm != FS_VERITY_HASH_ALG_SHA256 || d->digest_size != 32) {
      return absl::InternalError(absl::StrCat("fs-verity: a digest of algorithm ",
                                              d->digest_algorithm, " and ", d->digest_size,
                                              " bytes, not SHA-256"));
    }
    return absl::StrCat("sha256:", absl::BytesToHexString(absl::string_view(
                                       reinterpret_cast<const char*>(d->digest), 32)));
  }
};

}  // namespace

VerityOps* VerityOps::Real() {
  static KernelVerity* const real = new KernelVerity();
  return real;
}

absl::Status ProbeFsVerity(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/.fs-verity-probe-", getpid());
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("fs-verity probe: creating ", path, ": ", strerror(errno)));
  }
  absl::Cleanup remove = [&path] { unlink(path.c_str()); };
  // fs-verity refuses a file open for writing, and an empty file says nothing about data.
  const char data[] = "modelfs fs-verity probe\n";
  const bool written = write(fd, data, sizeof data - 1) == static_cast<ssize_t>(sizeof data - 1);
  const int write_err = errno;
  close(fd);
  if (!written) {
    return absl::InternalError(
        absl::StrCat("fs-verity probe: writing ", path, ": ", strerror(write_err)));
  }
  fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("fs-verity probe: opening ", path, ": ", strerror(errno)));
  }
  fsverity_enable_arg arg = {};
  arg.version = 1;
  arg.hash_algorithm = FS_VERITY_HASH_ALG_SHA256;
  arg.block_size = static_cast<__u32>(sysconf(_SC_PAGESIZE));
  const int rc = ioctl(fd, FS_IOC_ENABLE_VERITY, &arg);
  const int err = errno;
  close(fd);
  if (rc == 0) return absl::OkStatus();
  if (err == EOPNOTSUPP || err == ENOTTY || err == EINVAL) {
    return absl::UnimplementedError(absl::StrCat(
        "the filesystem of ", dir,
        " does not support fs-verity (FS_IOC_ENABLE_VERITY: ", strerror(err),
        "); it needs a kernel with CONFIG_FS_VERITY and, on ext4, the verity feature (mkfs.ext4 "
        "-O verity, or tune2fs -O verity on an unmounted filesystem)"));
  }
  return absl::InternalError(
      absl::StrCat("fs-verity probe: FS_IOC_ENABLE_VERITY on ", path, ": ", strerror(err)));
}

}  // namespace modelfs
