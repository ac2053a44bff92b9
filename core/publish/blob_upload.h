// What push, convert and state push share to put a model's blobs and manifests in a registry:
// an uploader that skips a blob the repository has (or mounts it from another repository)
// and records what it did, the manifest PUT checked against the digest of its bytes, the
// blobs' JSON, and a file descriptor that closes itself. Internal to core/publish.
//
// Thread safety: an Uploader is a value for one thread; the rest are free functions.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/oci/descriptor.h"
#include "core/publish/push.h"
#include "core/publish/state_push.h"
#include "core/registry/registry_client.h"
#include "nlohmann/json.hpp"

namespace modelfs::publish_internal {

// An open file descriptor that closes itself.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Opens `path` read-only. Errors: kNotFound "<path>: <strerror>".
absl::StatusOr<Fd> OpenForReading(const std::string& path);

// Puts blobs into `repo` through `client`, each once: a blob the repository has is "present",
// one another repository of `mount_from` has is "mounted" there, any other is "uploaded".
// Each is recorded, in order, in the result's blobs and counted in its totals.
class Uploader {
 public:
  Uploader(RegistryClient& client, std::string repo, std::vector<std::string> mount_from,
           PushResult& result);
  // A state push mounts nothing.
  Uploader(RegistryClient& client, std::string repo, StatePushResult& result);

  // Reads the blob from `source` when it is uploaded, reporting to `progress` (may be null).
  // Errors: the client's.
  absl::Status Upload(const std::string& role, const Descriptor& d, const BlobReadAt& source,
                      const ProgressFn& progress = nullptr);
  absl::Status UploadBytes(const std::string& role, const Descriptor& d, std::string bytes);

 private:
  Uploader(RegistryClient& client, std::string repo, std::vector<std::string> mount_from,
           std::vector<PushedBlob>& blobs, int& uploaded, int& present, int* mounted);

  RegistryClient& client_;
  const std::string repo_;
  const std::vector<std::string> mount_from_;
  std::vector<PushedBlob>& blobs_;
  int& uploaded_;
  int& present_;
  int* const mounted_;  // null: mount_from_ is empty
};

// PUTs an OCI image manifest under `tag` and checks that the registry stored it under `want`,
// the digest of its bytes. Errors: the client's; kDataLoss "registry stored the <what>
// manifest as <got>, expected <want>".
absl::Status PutManifestChecked(RegistryClient& client, const std::string& repo,
                                const std::string& tag, const std::string& bytes,
                                const Digest& want, std::string_view what);

// The "blobs" array of a push's JSON: role, digest, size, mediaType and action of each.
nlohmann::json PushedBlobsToJson(const std::vector<PushedBlob>& blobs);

}  // namespace modelfs::publish_internal
