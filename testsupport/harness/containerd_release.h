// The upstream containerd 2.1.4 release the end-to-end tests run for image volumes (Debian
// bookworm ships only 1.6, which has none): a tarball kept outside the repository
// (../shared/tools/containerd-2.1.4-linux-amd64.tar.xz beside the source tree, or
// $MODELFS_CONTAINERD21_TARBALL), checked against its pinned SHA-256 and extracted once into
// the build tree (never onto the system). The directory holds containerd, ctr and
// containerd-shim-runc-v2 at its top level.
//
// Thread safety: concurrent test binaries extract one at a time, under an exclusive flock on
// <dir>.lock; extraction goes to a directory of the process's own, renamed into place with a
// stamp file inside, and a stamped directory is never removed while tests may be running it.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace modelfs::testing {

inline constexpr char kContainerd21Sha256[] =
    "12ecd7a0218944e837f137fcc299c9e82e64c8f90f8b741481226289c7c6bf5a";

// $MODELFS_CONTAINERD21_TARBALL, else the path configured at build time.
std::string Containerd21Tarball();

// The extracted release directory. Errors: kNotFound when the tarball is missing (a clone
// without ../shared: tests skip, or fail in CI); kDataLoss when its SHA-256 differs;
// kInternal when tar fails.
absl::StatusOr<std::string> Containerd21ReleaseDir();

// Skipping a test for a missing component is right on a developer's machine and wrong in CI,
// where a skip would hide that the test never ran: true when the environment has CI=true.
bool RunningInCi();

}  // namespace modelfs::testing
