#include "testsupport/harness/containerd_release.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"
#include "testsupport/harness/pinned_tarball.h"

#ifndef MODELFS_CONTAINERD_TOOLS_DIR
#error "MODELFS_CONTAINERD_TOOLS_DIR must name the directory holding the release tarballs"
#endif
#ifndef MODELFS_CONTAINERD_EXTRACT_DIR
#error "MODELFS_CONTAINERD_EXTRACT_DIR must name where to extract them in the build tree"
#endif

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

}  // namespace

absl::StatusOr<ContainerdRelease> FindContainerdRelease(absl::string_view version) {
  std::string known;
  for (const ContainerdRelease& r : kContainerdReleases) {
    if (r.version == version) return r;
    absl::StrAppend(&known, known.empty() ? "" : ", ", r.version);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no containerd release \"", version, "\" in the harness (known: ", known, ")"));
}

absl::StatusOr<ContainerdRelease> ContainerdReleaseUnderTest() {
  const char* env = std::getenv("MODELFS_CONTAINERD_RELEASE");
  if (env == nullptr || *env == '\0') return FindContainerdRelease(kDefaultContainerdRelease);
  absl::StatusOr<ContainerdRelease> r = FindContainerdRelease(env);
  if (!r.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MODELFS_CONTAINERD_RELEASE: ", r.status().message()));
  }
  return r;
}

std::string ContainerdTarball(const ContainerdRelease& release) {
  const char* env = std::getenv(std::string(release.tarball_env).c_str());
  if (env != nullptr && *env != '\0') return env;
  return absl::StrCat(MODELFS_CONTAINERD_TOOLS_DIR, "/", release.tarball);
}

bool RunningInCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

absl::StatusOr<std::string> ContainerdReleaseDirUnderTest() {
  ASSIGN_OR_RETURN(ContainerdRelease release, ContainerdReleaseUnderTest());
  return ContainerdReleaseDir(release);
}

absl::StatusOr<std::string> ContainerdReleaseDir(const ContainerdRelease& release) {
  const std::string tarball = ContainerdTarball(release);
  if (!fs::exists(tarball)) {
    return absl::NotFoundError(absl::StrCat("containerd ", release.version,
                                            " release tarball not found at ", tarball, " (set ",
                                            release.tarball_env, ")"));
  }
  return ExtractPinnedTarball(
      tarball, std::string(release.sha256),
      absl::StrCat(MODELFS_CONTAINERD_EXTRACT_DIR, "/containerd-", release.version),
      {"containerd", "ctr", "containerd-shim-runc-v2"});
}

}  // namespace modelfs::testing
