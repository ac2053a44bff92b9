// The cache's remote side for many models (see registry_routing_source.h).
#include "core/registry/registry_routing_source.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/registry/registry_blob_source.h"
#include "core/status/status_macros.h"

namespace modelfs {

void RegistryRoutingSource::Add(const Digest& layer, std::shared_ptr<RegistryClient> client,
                                const std::string& repository) {
  AddSource(layer, std::make_shared<RegistryBlobSource>(std::move(client), repository));
}

void RegistryRoutingSource::AddSource(const Digest& layer,
                                      std::shared_ptr<RemoteBlobSource> source) {
  absl::MutexLock lock(&mu_);
  routes_[layer.str()] = std::move(source);
}

absl::StatusOr<std::string> RegistryRoutingSource::FetchRange(const Digest& blob, uint64_t offset,
                                                              uint64_t length,
                                                              absl::Time deadline) {
  ASSIGN_OR_RETURN(std::shared_ptr<RemoteBlobSource> route, RouteOf(blob));
  return route->FetchRange(blob, offset, length, deadline);
}

absl::Status RegistryRoutingSource::StreamRange(
    const Digest& blob, uint64_t offset, uint64_t length, absl::Time deadline,
    const std::function<absl::Status(absl::string_view)>& sink) {
  ASSIGN_OR_RETURN(std::shared_ptr<RemoteBlobSource> route, RouteOf(blob));
  return route->StreamRange(blob, offset, length, deadline, sink);
}

std::string RegistryRoutingSource::EndpointOf(const Digest& blob) {
  std::shared_ptr<RemoteBlobSource> route;
  {
    absl::MutexLock lock(&mu_);
    auto it = routes_.find(blob.str());
    if (it == routes_.end()) return std::string();
    route = it->second;
  }
  return route->EndpointOf(blob);
}

absl::StatusOr<std::shared_ptr<RemoteBlobSource>> RegistryRoutingSource::RouteOf(
    const Digest& blob) {
  absl::MutexLock lock(&mu_);
  auto it = routes_.find(blob.str());
  if (it == routes_.end()) {
    return absl::NotFoundError(absl::StrCat("no registry is known for layer ", blob.str()));
  }
  return it->second;
}

}  // namespace modelfs
