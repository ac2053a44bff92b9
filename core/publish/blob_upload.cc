// Putting blobs and manifests in a registry, for push, convert and state push (see
// blob_upload.h).
#include "core/publish/blob_upload.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "core/oci/media_types.h"
#include "core/oci/oci_json.h"
#include "core/status/status_macros.h"

namespace modelfs::publish_internal {
namespace {

// Wraps a source so that reads report progress.
BlobReadAt WithProgress(BlobReadAt src, std::string role, uint64_t total, const ProgressFn& p) {
  if (!p) return src;
  return [src = std::move(src), role = std::move(role), total, p](
             uint64_t off, char* buf, size_t n) -> absl::StatusOr<size_t> {
    auto r = src(off, buf, n);
    if (r.ok()) p({role, off + *r, total});
    return r;
  };
}

}  // namespace

Fd::~Fd() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<Fd> OpenForReading(const std::string& path) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return absl::NotFoundError(absl::StrCat(path, ": ", strerror(errno)));
  return fd;
}

Uploader::Uploader(RegistryClient& client, std::string repo, std::vector<std::string> mount_from,
                   PushResult& result)
    : Uploader(client, std::move(repo), std::move(mount_from), result.blobs, result.uploaded,
               result.present, &result.mounted) {}

Uploader::Uploader(RegistryClient& client, std::string repo, StatePushResult& result)
    : Uploader(client, std::move(repo), {}, result.blobs, result.uploaded, result.present,
               nullptr) {}

Uploader::Uploader(RegistryClient& client, std::string repo, std::vector<std::string> mount_from,
                   std::vector<PushedBlob>& blobs, int& uploaded, int& present, int* mounted)
    : client_(client),
      repo_(std::move(repo)),
      mount_from_(std::move(mount_from)),
      blobs_(blobs),
      uploaded_(uploaded),
      present_(present),
      mounted_(mounted) {}

absl::Status Uploader::Upload(const std::string& role, const Descriptor& d,
                              const BlobReadAt& source, const ProgressFn& progress) {
  PushedBlob pb{role, d, "present"};
  ASSIGN_OR_RETURN(bool exists, client_.BlobExists(repo_, d.digest));
  if (!exists) {
    pb.action = "";
    for (const auto& from : mount_from_) {
      if (from == repo_) continue;
      ASSIGN_OR_RETURN(bool mounted, client_.MountBlob(repo_, d.digest, from));
      if (mounted) {
        pb.action = "mounted";
        break;
      }
    }
    if (pb.action.empty()) {
      RETURN_IF_ERROR(
          client_.PushBlob(repo_, d.digest, d.size, WithProgress(source, role, d.size, progress)));
      pb.action = "uploaded";
    }
  }
  if (pb.action == "uploaded") ++uploaded_;
  if (pb.action == "mounted" && mounted_ != nullptr) ++*mounted_;
  if (pb.action == "present") ++present_;
  blobs_.push_back(std::move(pb));
  return absl::OkStatus();
}

absl::Status Uploader::UploadBytes(const std::string& role, const Descriptor& d,
                                   std::string bytes) {
  auto shared = std::make_shared<const std::string>(std::move(bytes));
  return Upload(role, d, BlobReadAtString(shared), nullptr);
}

absl::Status PutManifestChecked(RegistryClient& client, const std::string& repo,
                                const std::string& tag, const std::string& bytes,
                                const Digest& want, std::string_view what) {
  ASSIGN_OR_RETURN(Digest got,
                   client.PutManifest(repo, tag, bytes, std::string(kOciManifestMediaType)));
  if (got != want) {
    return absl::DataLossError(absl::StrCat("registry stored the ", oci_json::AV(what),
                                            " manifest as ", got.str(), ", expected ", want.str()));
  }
  return absl::OkStatus();
}

nlohmann::json PushedBlobsToJson(const std::vector<PushedBlob>& blobs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& b : blobs) {
    out.push_back({{"role", b.role},
                   {"digest", b.descriptor.digest.str()},
                   {"size", b.descriptor.size},
                   {"mediaType", b.descriptor.media_type},
                   {"action", b.action}});
  }
  return out;
}

}  // namespace modelfs::publish_internal
