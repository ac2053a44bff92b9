// Extracting the pinned cosign tarball into the build tree (cosign_tool.h).
#include "testsupport/harness/cosign_tool.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/oci/digest.h"
#include "testsupport/harness/process_runner.h"

#ifndef MODELFS_COSIGN_TOOLS_DIR
#error "MODELFS_COSIGN_TOOLS_DIR must name the directory holding the cosign tarball"
#endif
#ifndef MODELFS_COSIGN_EXTRACT_DIR
#error "MODELFS_COSIGN_EXTRACT_DIR must name where to extract it in the build tree"
#endif

namespace modelfs::testing {
namespace fs = std::filesystem;

absl::StatusOr<std::string> CosignBinary() {
  const char* env = std::getenv("MODELFS_COSIGN_TARBALL");
  const std::string tarball = env != nullptr && *env != '\0'
                                  ? std::string(env)
                                  : absl::StrCat(MODELFS_COSIGN_TOOLS_DIR, "/", kCosignTarball);
  if (!fs::exists(tarball)) {
    return absl::NotFoundError(absl::StrCat("cosign ", kCosignVersion, " tarball not found at ",
                                            tarball, " (set MODELFS_COSIGN_TARBALL)"));
  }
  const std::string digest = Digest::Of(ReadAll(tarball)).str();
  if (digest != absl::StrCat("sha256:", kCosignSha256)) {
    return absl::DataLossError(
        absl::StrCat(tarball, " has ", digest, ", want sha256:", kCosignSha256));
  }
  const std::string dir = absl::StrCat(MODELFS_COSIGN_EXTRACT_DIR, "/cosign-", kCosignVersion);
  const std::string bin = dir + "/cosign";
  if (ReadAll(dir + "/.sha256") == kCosignSha256) return bin;
  fs::create_directories(fs::path(dir).parent_path());
  const std::string lock_path = dir + ".lock";
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    return absl::InternalError(absl::StrCat("open ", lock_path, ": ", std::strerror(errno)));
  }
  struct LockGuard {
    int fd;
    ~LockGuard() { close(fd); }
  } guard{lock_fd};
  while (flock(lock_fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("flock ", lock_path, ": ", std::strerror(errno)));
    }
  }
  if (ReadAll(dir + "/.sha256") == kCosignSha256) return bin;
  const std::string staging = absl::StrCat(dir, ".tmp-", getpid());
  std::error_code ec;
  fs::remove_all(staging, ec);
  fs::create_directories(staging);
  auto tar = RunProcess({"tar", "-xJf", tarball, "-C", staging}, {}, absl::Minutes(2));
  if (!tar.ok()) return tar.status();
  if (tar->exit_code != 0 || !fs::exists(staging + "/cosign")) {
    fs::remove_all(staging, ec);
    return absl::InternalError(absl::StrCat("tar -xJf ", tarball, ": no cosign: ", tar->err));
  }
  std::ofstream(staging + "/.sha256") << kCosignSha256;
  fs::remove_all(dir, ec);
  fs::rename(staging, dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("rename ", staging, " to ", dir, ": ", ec.message()));
  }
  return bin;
}

}  // namespace modelfs::testing
