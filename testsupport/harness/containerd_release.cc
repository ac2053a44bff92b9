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
#include "testsupport/harness/process_runner.h"

#ifndef MODELFS_CONTAINERD21_TARBALL
#error "MODELFS_CONTAINERD21_TARBALL must name the containerd 2.1.4 release tarball"
#endif
#ifndef MODELFS_CONTAINERD21_DIR
#error "MODELFS_CONTAINERD21_DIR must name where to extract it in the build tree"
#endif

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

}  // namespace

std::string Containerd21Tarball() {
  const char* env = std::getenv("MODELFS_CONTAINERD21_TARBALL");
  if (env != nullptr && *env != '\0') return env;
  return MODELFS_CONTAINERD21_TARBALL;
}

bool RunningInCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

absl::StatusOr<std::string> Containerd21ReleaseDir() {
  const std::string tarball = Containerd21Tarball();
  if (!fs::exists(tarball)) {
    return absl::NotFoundError(absl::StrCat("containerd 2.1.4 release tarball not found at ",
                                            tarball, " (set MODELFS_CONTAINERD21_TARBALL)"));
  }
  // Checked on every call (a fraction of a second), so a replaced tarball is never trusted
  // because of an earlier extraction.
  const std::string digest = Digest::Of(ReadAll(tarball)).str();
  if (digest != absl::StrCat("sha256:", kContainerd21Sha256)) {
    return absl::DataLossError(
        absl::StrCat(tarball, " has ", digest, ", want sha256:", kContainerd21Sha256));
  }
  const std::string dir = MODELFS_CONTAINERD21_DIR;
  // The stamp is written last: a directory without it is a torn extraction.
  if (ReadAll(dir + "/.sha256") == kContainerd21Sha256) return dir;
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
  if (ReadAll(dir + "/.sha256") == kContainerd21Sha256) return dir;
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
  std::ofstream(staging + "/.sha256") << kContainerd21Sha256;
  // Only a torn extraction (no stamp; the lock says nobody is writing it) is removed here.
  fs::remove_all(dir, ec);
  fs::rename(staging, dir, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("rename ", staging, " to ", dir, ": ", ec.message()));
  return dir;
}

}  // namespace modelfs::testing
