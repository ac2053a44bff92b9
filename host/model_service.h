// ModelService: what containerd's snapshot decorator (snapshotter/model) asks of the model host,
// as stargz-snapshotter's snapshot/ sees its fs/ through a small FileSystem. The snapshotter
// keeps what is containerd's (snapshots, labels, binding, policy, the content store); everything
// that serves a model goes through these operations, never through the host's parts (cache,
// pipeline, tree, reader). ModelHost (model_host.h) is the implementation; a test may hand the
// snapshotter a fake.
//
//   the mount        Mount/Adopt/DetachStaleMount/LazyUnmount/Unmount of <root>/mnt, fuse_fd
//   registries       Client: the pull client of a registry, shared with the host's fetches
//   models           Register (from its registry), RegisterFrom (from another source),
//                    RegisterInPlace (read where the preferred reader holds it), Remove,
//                    Discard, HasModel, StartPrefetch
//   records          SaveRecord/LoadRecord/ListRecords/DeleteRecord under the records directory
//   the cache        its counters and layers, FetchLayer, EvictLayers, EnforceCacheLimit
//
// Thread safety: every method may be called concurrently, except Mount/Adopt/Unmount, which the
// owner calls once each.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/cache/blob_cache.h"
#include "core/cache/remote_blob_source.h"
#include "core/model/model_pipeline.h"
#include "core/oci/digest.h"
#include "core/registry/registry_client.h"
#include "core/resolve/model_ref.h"
#include "fuse/mount_options.h"

namespace modelfs {

class ModelService {
 public:
  virtual ~ModelService() = default;

  // --- The mount of every model ---
  // Clears a dead FUSE mount a crashed process left at `dir`. Errors: the mounter's;
  // kFailedPrecondition without a mounter.
  virtual absl::Status DetachStaleMount(const std::string& dir) = 0;
  // Mounts the models' tree at `dir` and serves it. Errors: kFailedPrecondition (mounted
  // already, or no mounter), the mounter's.
  virtual absl::Status Mount(const std::string& dir, const FuseMountOptions& options) = 0;
  // Serves the tree on the inherited connection `fuse_fd` mounted at `dir`. Errors as Mount.
  virtual absl::Status Adopt(int fuse_fd, const std::string& dir,
                             const FuseMountOptions& options) = 0;
  // Unmounts `dir` lazily whatever is mounted there. No-op without a mounter.
  virtual void LazyUnmount(const std::string& dir) = 0;
  // Stops serving: unmounts (lazily when busy), or with keep_mount leaves the mount and its
  // connection for a process that adopts it. OK when not mounted. Idempotent.
  virtual absl::Status Unmount(bool keep_mount = false) = 0;
  // The /dev/fuse fd of the mount; -1 when not mounted.
  virtual int fuse_fd() const = 0;

  // --- Registries ---
  // The pull client of `registry` ("host[:port]"), opened on first use and kept: the one the
  // host fetches that registry's layers through. Errors: the connector's (ConnectRegistry's).
  virtual absl::StatusOr<std::shared_ptr<RegistryClient>> Client(const std::string& registry) = 0;

  // --- Models ---
  // Serves `rm` as `name`: its layers read from rm.registry/rm.repository through the cache,
  // its files in the tree (already there is fine). Errors: Client's, ModelPipeline::Register's.
  virtual absl::StatusOr<LoadedModel> Register(const std::string& name, const ResolvedModel& rm,
                                               PrefetchStart prefetch) = 0;
  // The same with every layer read through the cache from `source` (containerd's content
  // store) instead of a registry.
  virtual absl::StatusOr<LoadedModel> RegisterFrom(const std::string& name, const ResolvedModel& rm,
                                                   std::shared_ptr<RemoteBlobSource> source,
                                                   PrefetchStart prefetch) = 0;
  // Serves `rm` as `name` with every layer read where the host's preferred reader holds it (the
  // daemon's content-store reader, which verifies them), not through the cache: tar layers are
  // read whole as their headers are (whole-layer verification). Errors: AssembleModel's, the
  // tree's.
  virtual absl::StatusOr<LoadedModel> RegisterInPlace(const std::string& name,
                                                      const ResolvedModel& rm) = 0;
  // Takes model `name` out of the mount (and the kernel's cached entries) or, unmounted, the
  // tree, and drops the cache references of `model_ref` (M's digest; "" for none). Errors:
  // kNotFound when the tree does not hold `name` (the references are dropped all the same).
  virtual absl::Status Remove(const std::string& name, const std::string& model_ref) = 0;
  // Takes model `name` out of the tree only (the kernel is not told) and drops the references
  // of `model_ref` ("" for none): a model registered a moment ago that no snapshot came to hold.
  virtual void Discard(const std::string& name, const std::string& model_ref) = 0;
  // Whether the tree serves a model `name` (a restart's registration may not have got to it).
  virtual bool HasModel(const std::string& name) = 0;
  // Starts the prefetch Register deferred (PrefetchStart::kOnStartPrefetch) for `model_ref`.
  virtual void StartPrefetch(const std::string& model_ref) = 0;

  // --- Records (host/model_records.h): what a restart registers again ---
  // Errors of each: kFailedPrecondition without a records directory, model_records.h's.
  virtual absl::Status SaveRecord(const std::string& name, const ResolvedModel& rm) = 0;
  virtual absl::StatusOr<ResolvedModel> LoadRecord(const std::string& name) = 0;
  // The names of the records kept (sorted); none without a records directory.
  virtual std::vector<std::string> ListRecords() = 0;
  virtual absl::Status DeleteRecord(const std::string& name) = 0;

  // --- The cache ---
  virtual CacheStats cache_stats() const = 0;
  virtual bool cache_disk_full() const = 0;
  // Every layer the cache knows (BlobCache::ListLayers), or one (kNotFound: none).
  virtual std::map<Digest, BlobCache::LayerInfo> CachedLayers() const = 0;
  virtual absl::StatusOr<BlobCache::LayerInfo> CachedLayer(const Digest& layer) const = 0;
  // The last fetch error per registry endpoint.
  virtual std::map<std::string, EndpointHealth::LastError> endpoint_errors() const = 0;
  // Starts fetching every byte of `layer` in the background (BlobCache::Prefetch, kAll).
  virtual absl::Status FetchLayer(const Digest& layer) = 0;
  // Drops the cached bytes of `layers` no registered model references (BlobCache::EvictLayers).
  virtual BlobCache::EvictResult EvictLayers(const std::vector<Digest>& layers) = 0;
  // Evicts unreferenced layers down to the cache's size bound (BlobCache::EnforceSizeLimit).
  virtual void EnforceCacheLimit() = 0;
};

}  // namespace modelfs
