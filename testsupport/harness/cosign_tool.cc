// Extracting the pinned cosign tarball into the build tree (cosign_tool.h).
#include "testsupport/harness/cosign_tool.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"
#include "testsupport/harness/pinned_tarball.h"

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
  ASSIGN_OR_RETURN(std::string dir, ExtractPinnedTarball(tarball, kCosignSha256,
                                                         absl::StrCat(MODELFS_COSIGN_EXTRACT_DIR,
                                                                      "/cosign-", kCosignVersion),
                                                         {"cosign"}));
  return dir + "/cosign";
}

}  // namespace modelfs::testing
