// Extracting a pinned tool tarball into the build tree (pinned_tarball.h).
#include "testsupport/harness/pinned_tarball.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/oci/digest.h"
#include "testsupport/harness/process_runner.h"

namespace modelfs::testing {
namespace fs = std::filesystem;

absl::StatusOr<std::string> ExtractPinnedTarball(const std::string& tarball,
                                                 const std::string& sha256, const std::string& dir,
                                                 const std::vector<std::string>& required) {
  if (!fs::exists(tarball)) {
    return absl::NotFoundError(absl::StrCat(tarball, " not found"));
  }
  const std::string& want = sha256;
  const std::string digest = Digest::Of(ReadAll(tarball)).str();
  if (digest != absl::StrCat("sha256:", want)) {
    return absl::DataLossError(absl::StrCat(tarball, " has ", digest, ", want sha256:", want));
  }
  if (ReadAll(dir + "/.sha256") == want) return dir;
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
  if (ReadAll(dir + "/.sha256") == want) return dir;  // another binary extracted it meanwhile
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
  for (const std::string& file : required) {
    if (!fs::exists(staging + "/" + file)) {
      fs::remove_all(staging, ec);
      return absl::InternalError(absl::StrCat(tarball, " has no top-level ", file));
    }
  }
  std::ofstream(staging + "/.sha256") << want;
  // Only a torn extraction (no stamp; the lock says nobody is writing it) is removed here.
  fs::remove_all(dir, ec);
  fs::rename(staging, dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("rename ", staging, " to ", dir, ": ", ec.message()));
  }
  return dir;
}

}  // namespace modelfs::testing
