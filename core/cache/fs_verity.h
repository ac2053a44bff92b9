// fs-verity for the cache's sealed data files: whether the cache directory's filesystem has it
// (ProbeFsVerity), and the two operations the cache uses (VerityOps). With it, the kernel checks
// every page read from a protected file (by passthrough or pread) against a Merkle tree, and a
// changed byte is an EIO instead of a wrong byte. The kernel needs CONFIG_FS_VERITY and the
// filesystem the feature (ext4: `mkfs.ext4 -O verity` or `tune2fs -O verity`; btrfs, f2fs).
//
// Thread safety: ProbeFsVerity is a plain function of its argument; VerityOps::Real() is
// stateless and safe to call concurrently, and so must test fakes be.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace modelfs {

// Enables fs-verity on a probe file created (and removed) in `dir`. OK when the filesystem
// supports it; kUnimplemented when the kernel or the filesystem does not (EOPNOTSUPP, ENOTTY),
// naming the directory, the errno and what a node admin needs; kInternal for other failures
// (the probe file could not be written).
absl::Status ProbeFsVerity(const std::string& dir);

// The kernel's fs-verity ioctls, behind an interface so that tests can stand in for a kernel
// and filesystem that have them (this one may not).
class VerityOps {
 public:
  virtual ~VerityOps() = default;
  // ProbeFsVerity(dir), or the fake's answer.
  virtual absl::Status Probe(const std::string& dir) = 0;
  // Enables fs-verity (SHA-256, 4 KiB blocks) on the file at `path`, which nobody may hold
  // open for writing. OK when enabled, or when it already was. Errors: kUnimplemented (no
  // support), kFailedPrecondition (ETXTBSY: open for writing), kInternal naming the path and
  // the errno.
  virtual absl::Status Enable(const std::string& path) = 0;
  // The fs-verity digest of the open file `fd` (FS_IOC_MEASURE_VERITY), as
  // "sha256:<hex>". Errors: kNotFound (the file has no fs-verity: ENODATA), kUnimplemented,
  // kInternal naming the errno.
  virtual absl::StatusOr<std::string> Measure(int fd) = 0;

  // The kernel's.
  static VerityOps* Real();
};

}  // namespace modelfs
