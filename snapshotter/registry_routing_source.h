// RegistryRoutingSource: the blob cache's remote side for many models at once. Each layer
// digest is fetched from the registry and repository of a model that registered it (any one
// will do: content is addressed by digest), or from containerd's content store, for a model
// that containerd downloaded itself (an image volume naming M) and whose compressed layers the
// cache decodes.
//
// Thread safety: every method may be called concurrently; mu_ is a leaf lock, never held
// across a registry call.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/cache/remote_blob_source.h"
#include "core/registry/registry_client.h"
#include "snapshotter/content_store_client.h"

namespace modelfs::snapshotter {

class RegistryRoutingSource final : public RemoteBlobSource {
 public:
  // Fetches `layer` from `repository` through `client` from now on.
  void Add(const Digest& layer, std::shared_ptr<RegistryClient> client,
           const std::string& repository);
  // Reads `layer` from containerd's content store (namespace `ns`) from now on. `store` is not
  // owned and must outlive this source.
  void AddContent(const Digest& layer, ContentStore* store, const std::string& ns);

  // RemoteBlobSource. kNotFound for a layer no model registered.
  absl::StatusOr<std::string> FetchRange(const Digest& blob, uint64_t offset, uint64_t length,
                                         absl::Time deadline) override;
  absl::Status StreamRange(const Digest& blob, uint64_t offset, uint64_t length,
                           absl::Time deadline,
                           const std::function<absl::Status(absl::string_view)>& sink) override;
  // The cache keeps health and fetch threads per registry, so one model's registry outage
  // does not touch reads of models from other registries.
  std::string EndpointOf(const Digest& blob) override;

 private:
  struct Route {
    std::shared_ptr<RegistryClient> client;  // null: the content store
    std::string repository;
    ContentStore* store = nullptr;
    std::string ns;
  };
  absl::StatusOr<Route> RouteOf(const Digest& blob);

  absl::Mutex mu_;
  std::map<std::string, Route> routes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace modelfs::snapshotter
