// RegistryBlobSource: the blob cache's remote side (RemoteBlobSource) over a RegistryClient,
// by range GETs on one repository. Bytes it returns are unverified; the cache verifies them.
//
// It lives beside the registry client, not above it: RemoteBlobSource is an interface header of
// core/cache with no code (it includes only core/oci/digest.h), so core/registry implements it
// without linking the cache, and the cache still never includes core/registry.
//
// Thread safety: safe for concurrent calls (RegistryClient is).
#pragma once

#include <memory>
#include <string>

#include "core/cache/remote_blob_source.h"
#include "core/registry/registry_client.h"

namespace modelfs {

class RegistryBlobSource final : public RemoteBlobSource {
 public:
  RegistryBlobSource(std::shared_ptr<RegistryClient> client, std::string repository)
      : client_(std::move(client)), repository_(std::move(repository)) {}

  absl::StatusOr<std::string> FetchRange(const Digest& blob, uint64_t offset, uint64_t length,
                                         absl::Time deadline) override {
    return client_->GetBlobRange(repository_, blob, offset, length, deadline);
  }

  absl::Status StreamRange(const Digest& blob, uint64_t offset, uint64_t length,
                           absl::Time deadline,
                           const std::function<absl::Status(absl::string_view)>& sink) override {
    return client_->StreamBlobRange(repository_, blob, offset, length, deadline, sink);
  }

  std::string EndpointOf(const Digest& blob) override { return client_->registry(); }

  RegistryClient& client() { return *client_; }

 private:
  std::shared_ptr<RegistryClient> client_;
  std::string repository_;
};

}  // namespace modelfs
