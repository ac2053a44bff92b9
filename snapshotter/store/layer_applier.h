// ApplyOverlayLayer: writes an image layer's uncompressed tar into a snapshot directory the way
// containerd's overlayfs applier does (containerd's archive.Apply with
// OverlayConvertWhiteout, diff/apply/apply_linux.go), so that a layer the snapshotter unpacks
// itself (a lower layer of a lazily served image, snapshotter.md "Lazy plain images") is the
// same tree containerd would have committed under its chain ID, right for every image that
// shares it:
//   - regular files (content, mode with setuid/setgid/sticky), directories (an existing one
//     is merged: only its metadata changes), symlinks (never followed), hard links to an
//     entry of this layer (owner, mode, times and xattrs of the link's header applied to the
//     shared inode, the mode unless it is a symlink), block/char devices and FIFOs (mknod);
//   - an entry replaces whatever an earlier entry of the layer left at its path, except a
//     directory over a directory;
//   - uid/gid (lchown), PAX `SCHILY.xattr.*` (lsetxattr; unsupported ones are skipped and
//     counted), atime = mtime from the header (directories last, once their children exist);
//   - with `overlay_whiteouts` (a layer on a parent; containerd applies the first layer of a
//     chain through a plain bind mount, without it): `.wh.NAME` becomes a 0/0 character device
//     NAME owned as the whiteout entry, `.wh..wh..opq` the xattr trusted.overlay.opaque=y on
//     its directory. Without it a whiteout removes NAME of this layer (if any) and an opaque
//     marker does nothing, as containerd's naive applier;
//   - a missing parent directory is created 0755, or with the mode, owner, times and xattrs of
//     the same directory in the nearest of `parents` that has it (containerd's mkparent).
// Refused (kPermissionDenied naming the layer and the entry; nothing is followed): `..` and
// absolute names (the tar reader), an entry whose parent is a symlink or a file of this layer
// (containerd would resolve the link inside the snapshot; we refuse rather than write through
// one), a hard link whose target is not an entry of this layer or is a directory, an empty
// whiteout name, entry types containerd does not handle either.
//
// The tar must already be verified (its diff ID): this writes what it is given. On error the
// directory is partly written and must be dropped with its snapshot.
//
// Thread safety: a pure function of its inputs; `dir` must not change under it. Needs root
// (mknod, lchown, trusted.* xattrs).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/range_reader.h"

namespace modelfs::snapshotter {

struct LayerApplyCounts {
  uint64_t entries = 0;  // tar entries applied (the root entry excluded)
  uint64_t files = 0;
  uint64_t bytes = 0;  // regular file bytes written
  uint64_t directories = 0;
  uint64_t symlinks = 0;
  uint64_t hardlinks = 0;
  uint64_t devices = 0;  // block and character devices, FIFOs
  uint64_t whiteouts = 0;
  uint64_t opaque_dirs = 0;
  uint64_t skipped_xattrs = 0;  // the filesystem does not support them (ENOTSUP)
};

struct LayerApplyOptions {
  // The layer sits on a parent: whiteouts become overlay whiteouts (see above).
  bool overlay_whiteouts = true;
  // The contents of the snapshots below, nearest first, for the metadata of a parent
  // directory that the layer does not list.
  std::vector<std::filesystem::path> parents;
};

// Applies the uncompressed layer tar read through `tar` into the existing, empty directory
// `dir`. `layer` ("layer sha256:...") starts every error. Errors: the tar reader's
// (kInvalidArgument, kOutOfRange, kPermissionDenied for unsafe names), kPermissionDenied for
// the refusals above, kInternal "<layer>: entry '<path>': <syscall>: <errno text>" for I/O.
absl::StatusOr<LayerApplyCounts> ApplyOverlayLayer(RangeReader& tar,
                                                   const std::filesystem::path& dir,
                                                   std::string_view layer,
                                                   const LayerApplyOptions& options = {});

}  // namespace modelfs::snapshotter
