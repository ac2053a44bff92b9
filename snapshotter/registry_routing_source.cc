// The cache's remote side for many models (see registry_routing_source.h).
#include "snapshotter/registry_routing_source.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs::snapshotter {

void RegistryRoutingSource::Add(const Digest& layer, std::shared_ptr<RegistryClient> client,
                                const std::string& repository) {
  absl::MutexLock lock(&mu_);
  routes_[layer.str()] = Route{std::move(client), repository};
}

absl::StatusOr<std::string> RegistryRoutingSource::FetchRange(const Digest& blob, uint64_t offset,
                                                              uint64_t length,
                                                              absl::Time deadline) {
  ASSIGN_OR_RETURN(Route route, RouteOf(blob));
  return route.client->GetBlobRange(route.repository, blob, offset, length, deadline);
}

absl::Status RegistryRoutingSource::StreamRange(
    const Digest& blob, uint64_t offset, uint64_t length, absl::Time deadline,
    const std::function<absl::Status(absl::string_view)>& sink) {
  ASSIGN_OR_RETURN(Route route, RouteOf(blob));
  return route.client->StreamBlobRange(route.repository, blob, offset, length, deadline, sink);
}

std::string RegistryRoutingSource::EndpointOf(const Digest& blob) {
  absl::MutexLock lock(&mu_);
  auto it = routes_.find(blob.str());
  return it == routes_.end() ? std::string() : it->second.client->registry();
}

absl::StatusOr<RegistryRoutingSource::Route> RegistryRoutingSource::RouteOf(const Digest& blob) {
  absl::MutexLock lock(&mu_);
  auto it = routes_.find(blob.str());
  if (it == routes_.end()) {
    return absl::NotFoundError(absl::StrCat("no registry is known for layer ", blob.str()));
  }
  return it->second;
}

}  // namespace modelfs::snapshotter
