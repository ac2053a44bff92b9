#include "testsupport/harness/containerd_release.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/oci/digest.h"
#include "core/status/status_macros.h"
#include "testsupport/harness/process_runner.h"

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
  const std::string sha256(release.sha256);
  if (!fs::exists(tarball)) {
    return absl::NotFoundError(absl::StrCat("containerd ", release.version,
                                            " release tarball not found at ", tarball, " (set ",
                                            release.tarball_env, ")"));
  }
  // Checked on every call (a fraction of a second), so a replaced tarball is never trusted
  // because of an earlier extraction.
  const std::string digest = Digest::Of(ReadAll(tarball)).str();
  if (digest != absl::StrCat("sha256:", sha256)) {
    return absl::DataLossError(absl::StrCat(tarball, " has ", digest, ", want sha256:", sha256));
  }
  const std::string dir =
      absl::StrCat(MODELFS_CONTAINERD_EXTRACT_DIR, "/containerd-", release.version);
  // The stamp is written last: a directory without it is a torn extraction.
  if (ReadAll(dir + "/.sha256") == sha256) return dir;
  // Test binaries run in parallel and another one may be extracting, or already using the
  // directory: one extraction at a time, under an exclusive lock beside the directory, and a
  // stamped directory is never removed (removing it under a running containerd took its
  // binary away mid-test).
  fs::create_directories(fs::path(dir).parent_path());
  const std::string lock_path = dir + ".lock";
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    return absl::InternalError(absl::StrCat("open ", lock_path, ": ", std::strerror(errno)));
  }
  struct LockGuard {
    int fd;
    ~LockGuard() { close(fd); }  // closing releases the flock
  } guard{lock_fd};
  while (flock(lock_fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("flock ", lock_path, ": ", std::strerror(errno)));
    }
  }
  if (ReadAll(dir + "/.sha256") == sha256) return dir;
  const std::string staging = absl::StrCat(dir, ".tmp-", getpid());
  std::error_code ec;
  fs::remove_all(staging, ec);
  fs::create_directories(staging);
  absl::StatusOr<ProcessResult> tar =
      RunProcess({"tar", "-xJf", tarball, "-C", staging}, {}, absl::Minutes(2));
  if (!tar.ok()) return tar.status();
  if (tar->exit_code != 0) {
    fs::remove_all(staging, ec);
    return absl::InternalError(absl::StrCat("tar -xJf ", tarball, ": ", tar->err));
  }
  for (const char* bin : {"containerd", "ctr", "containerd-shim-runc-v2"}) {
    if (!fs::exists(staging + "/" + bin)) {
      fs::remove_all(staging, ec);
      return absl::InternalError(absl::StrCat(tarball, " has no top-level ", bin));
    }
  }
  std::ofstream(staging + "/.sha256") << sha256;
  // Only a torn extraction (no stamp; the lock says nobody is writing it) is removed here.
  fs::remove_all(dir, ec);
  fs::rename(staging, dir, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("rename ", staging, " to ", dir, ": ", ec.message()));
  return dir;
}

}  // namespace modelfs::testing
