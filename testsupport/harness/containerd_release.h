// The upstream containerd releases the end-to-end tests run pods on (Debian bookworm ships only
// 1.6, which has no image volumes): tarballs kept outside the repository (../shared/tools beside
// the source tree, or one environment variable per release), each checked against its pinned
// SHA-256 and extracted once into the build tree (never onto the system). An extracted directory
// holds containerd, ctr and containerd-shim-runc-v2 at its top level.
//
// Which release a pod test runs on is a parameter: $MODELFS_CONTAINERD_RELEASE ("2.1.4",
// "2.2.2", "2.3.4"), set per CTest entry by modelfs_e2e_test(... CONTAINERD_RELEASES ...), else
// kDefaultContainerdRelease.
//
// Thread safety: concurrent test binaries extract one release at a time, under an exclusive
// flock on <dir>.lock; extraction goes to a directory of the process's own, renamed into place
// with a stamp file inside, and a stamped directory is never removed while tests may be running
// it.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace modelfs::testing {

// One release: how the tests name it, its tarball in ../shared/tools, the tarball's pinned
// SHA-256 (../shared/tools/README.md), the variable that overrides the tarball's path, and
// whether it applies CRI Mount.image_sub_path (a volume's subPath: containerd 2.2 and later;
// 2.1 ignores it without an error), and the config version it reads without migrating (2.3
// reads version 3 too, migrating it in memory with a warning).
struct ContainerdRelease {
  absl::string_view version;
  absl::string_view tarball;
  absl::string_view sha256;
  absl::string_view tarball_env;
  bool applies_image_sub_path = false;
  int config_version = 3;
};

inline constexpr ContainerdRelease kContainerdReleases[] = {
    {"2.1.4", "containerd-2.1.4-linux-amd64.tar.xz",
     "12ecd7a0218944e837f137fcc299c9e82e64c8f90f8b741481226289c7c6bf5a",
     "MODELFS_CONTAINERD21_TARBALL", false, 3},
    {"2.2.2", "containerd-2.2.2-linux-amd64.tar.xz",
     "cf70f1bcb9e8522f91a35e8ba1b4b4b5a48f839ab7ca806104b98cd2fb347eb7",
     "MODELFS_CONTAINERD22_TARBALL", true, 3},
    {"2.3.4", "containerd-2.3.4-linux-amd64.tar.xz",
     "8341022165a716ab8545491bde624cf2e1638ef3f10beb568f3c410566cef9b6",
     "MODELFS_CONTAINERD23_TARBALL", true, 4},
};

// The release a pod test runs on when $MODELFS_CONTAINERD_RELEASE is unset: the first LTS line,
// the one every pod suite runs on.
inline constexpr absl::string_view kDefaultContainerdRelease = "2.3.4";

// The release named `version`; kInvalidArgument naming the known ones otherwise.
absl::StatusOr<ContainerdRelease> FindContainerdRelease(absl::string_view version);

// The release this test process runs pods on: $MODELFS_CONTAINERD_RELEASE, else
// kDefaultContainerdRelease. kInvalidArgument when the variable names no known release.
absl::StatusOr<ContainerdRelease> ContainerdReleaseUnderTest();

// The release's tarball: $<tarball_env>, else <tools dir configured at build time>/<tarball>.
std::string ContainerdTarball(const ContainerdRelease& release);

// The extracted release directory (<build>/third_party/containerd-<version>). Errors:
// kNotFound when the tarball is missing (a clone without ../shared: tests skip, or fail in CI);
// kDataLoss when its SHA-256 differs; kInternal when tar fails.
absl::StatusOr<std::string> ContainerdReleaseDir(const ContainerdRelease& release);

// The same for the release under test (ContainerdReleaseUnderTest).
absl::StatusOr<std::string> ContainerdReleaseDirUnderTest();

// Skipping a test for a missing component is right on a developer's machine and wrong in CI,
// where a skip would hide that the test never ran: true when the environment has CI=true.
bool RunningInCi();

}  // namespace modelfs::testing
