// ExtractPinnedTarball: a tool tarball kept outside the repository (../shared/tools: containerd
// releases, cosign), checked against its pinned SHA-256 and extracted once into the build tree,
// never onto the system. Used by containerd_release.h and cosign_tool.h.
//
// Thread safety: test binaries run in parallel; one extraction at a time, under an exclusive
// flock on <dir>.lock. The extraction is staged beside `dir` and renamed into place with a
// stamp file (<dir>/.sha256) written last, so a directory without the stamp is a torn extraction
// (removed and redone) and a stamped one is never removed (a running containerd may be using
// its binary).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace modelfs::testing {

// Returns `dir`, holding the tarball's contents, each of `required` (paths relative to the
// tarball's top) present. The tarball's digest is checked on every call (a fraction of a second),
// so a replaced tarball is never trusted because of an earlier extraction.
// Errors: kNotFound (no tarball at that path), kDataLoss (its SHA-256 is not `sha256`, hex),
// kInternal (lock, tar, rename; a required file missing, named).
absl::StatusOr<std::string> ExtractPinnedTarball(const std::string& tarball,
                                                 const std::string& sha256, const std::string& dir,
                                                 const std::vector<std::string>& required);

}  // namespace modelfs::testing
