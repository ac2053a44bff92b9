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

void RegistryRoutingSource::AddContent(const Digest& layer, ContentStore* store,
                                       const std::string& ns) {
  absl::MutexLock lock(&mu_);
  routes_[layer.str()] = Route{nullptr, "", store, ns};
}

absl::StatusOr<std::string> RegistryRoutingSource::FetchRange(const Digest& blob, uint64_t offset,
                                                              uint64_t length,
                                                              absl::Time deadline) {
  ASSIGN_OR_RETURN(Route route, RouteOf(blob));
  if (route.client == nullptr) {
    std::string out;
    out.reserve(length);
    RETURN_IF_ERROR(
        route.store->Read(route.ns, blob, offset, length, deadline, [&](std::string_view piece) {
          out.append(piece);
          return absl::OkStatus();
        }));
    return out;
  }
  return route.client->GetBlobRange(route.repository, blob, offset, length, deadline);
}

absl::Status RegistryRoutingSource::StreamRange(
    const Digest& blob, uint64_t offset, uint64_t length, absl::Time deadline,
    const std::function<absl::Status(absl::string_view)>& sink) {
  ASSIGN_OR_RETURN(Route route, RouteOf(blob));
  if (route.client == nullptr) {
    return route.store->Read(route.ns, blob, offset, length, deadline, [&](std::string_view piece) {
      return sink(absl::string_view(piece.data(), piece.size()));
    });
  }
  return route.client->StreamBlobRange(route.repository, blob, offset, length, deadline, sink);
}

std::string RegistryRoutingSource::EndpointOf(const Digest& blob) {
  absl::MutexLock lock(&mu_);
  auto it = routes_.find(blob.str());
  if (it == routes_.end()) return std::string();
  if (it->second.client == nullptr) return "containerd-content-store";
  return it->second.client->registry();
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
