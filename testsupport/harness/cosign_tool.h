// cosign 2.5.0, the reference client for signatures and attestations, for end-to-end tests: the
// tarball kept outside the repository (../shared/tools beside the source tree, or
// $MODELFS_COSIGN_TARBALL), checked against its pinned SHA-256 and extracted once into the build
// tree (never onto the system), as containerd_release.h does for containerd.
//
// Thread safety: concurrent test binaries extract one at a time, under an exclusive flock on
// <dir>.lock; the extraction is staged and renamed into place with a stamp file inside.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace modelfs::testing {

inline constexpr char kCosignVersion[] = "2.5.0";
inline constexpr char kCosignTarball[] = "cosign-2.5.0-linux-amd64.tar.xz";
inline constexpr char kCosignSha256[] =
    "bac8b5b2f31791e524d0e1a66a10448ba7ac9c9959b798e0298203624483f31e";

// The path of the extracted `cosign` binary. Errors: kNotFound (no tarball: the message names
// where it was looked for and the variable), kDataLoss (the tarball's digest is not the pinned
// one), kInternal (tar failed, no `cosign` in it).
absl::StatusOr<std::string> CosignBinary();

}  // namespace modelfs::testing
