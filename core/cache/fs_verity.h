// Whether the cache directory's filesystem can protect files with fs-verity: with it, the kernel
// checks every page read from a protected file (by passthrough or pread) against a Merkle tree,
// and a changed byte is an EIO instead of a wrong byte. The kernel needs CONFIG_FS_VERITY and
// the filesystem the feature (ext4: `mkfs.ext4 -O verity` or `tune2fs -O verity`; btrfs, f2fs).
//
// Thread safety: a plain function of its argument.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace modelfs {

// Enables fs-verity on a probe file created (and removed) in `dir`. OK when the filesystem
// supports it; kUnimplemented when the kernel or the filesystem does not (EOPNOTSUPP, ENOTTY),
// naming the directory, the errno and what a node admin needs; kInternal for other failures
// (the probe file could not be written).
absl::Status ProbeFsVerity(const std::string& dir);

}  // namespace modelfs
