// RegistryRoutingSource: the blob cache's remote side for many models at once. Each layer
// digest is fetched from the registry and repository of a model that registered it (any one
// will do: content is addressed by digest), through a RegistryBlobSource, or from another
// RemoteBlobSource a model registered it with: the daemon's containerd content store, for a
// model that containerd downloaded itself (an image volume naming M) and whose compressed
// layers the cache decodes (snapshotter/content/content_store_blob_source.h).
//
// Thread safety: every method may be called concurrently; mu_ is a leaf lock, never held
// across a fetch.
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

namespace modelfs {

class RegistryRoutingSource final : public RemoteBlobSource {
 public:
  // Fetches `layer` from `repository` through `client` from now on.
  void Add(const Digest& layer, std::shared_ptr<RegistryClient> client,
           const std::string& repository);
  // Fetches `layer` from `source` from now on (its EndpointOf names the endpoint).
  void AddSource(const Digest& layer, std::shared_ptr<RemoteBlobSource> source);

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
  absl::StatusOr<std::shared_ptr<RemoteBlobSource>> RouteOf(const Digest& blob);

  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<RemoteBlobSource>> routes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace modelfs
