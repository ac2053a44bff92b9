// ModelHost: what serves models on a node, for both binaries. It owns the registry clients
// (one per registry), the cache with its remote side (RegistryRoutingSource, optionally under a
// DecodingBlobSource), the pipeline that registers models with the cache, the tree of models the
// FUSE mount serves (read through a LayerRoutingReader when some layers are served elsewhere),
// the mount itself, and the models' records on disk. It knows nothing of containerd:
// ModelSnapshotter (snapshotter/model) is containerd's snapshot decorator over a host, which it
// sees only as a ModelService (model_service.h), as stargz-snapshotter's snapshot/ sits over
// its fs/. Open builds a host from a configuration (ModelHostConfig: what both binaries have);
// Create takes parts made by the caller (tests).
//
//   Register(name, rm)   routes rm's layers to rm's registry, registers them with the cache and
//                        serves the model's files as <mount>/<name>
//   Remove(name, ref)    takes the model out of the mount and drops its cache references
//   SaveRecord/Restore   keeps rm under <records>/<name> (host/model_records.h) and registers
//                        it again from there after a restart, without the registry
//   Mount/Adopt          serves the tree at a directory, or on an inherited FUSE connection
//                        (DetachStaleMount first clears what a crashed process left there)
//   MountModel           `modelfs mount`'s one model: rm is the ROOT of a mount of its own
//                        (Load registers a model to be shown inside it: `mount --state`)
//
// Thread safety: every method may be called concurrently, except Mount/Adopt/MountModel/Unmount,
// which the owner calls once each (Unmount may race with Wait). The host holds no lock of its own
// across calls: the parts it owns are thread-safe (RegistryClients, RegistryRoutingSource,
// BlobCache, ModelPipeline, ModelTree).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/cache/blob_cache.h"
#include "core/cache/decoding_blob_source.h"
#include "core/model/layer_routing_reader.h"
#include "core/model/model_pipeline.h"
#include "core/registry/registry_routing_source.h"
#include "core/resolve/model_ref.h"
#include "core/resolve/registry_clients.h"
#include "fuse/fuse_adapter.h"
#include "fuse/model_tree.h"
#include "host/model_mounter.h"
#include "host/model_service.h"

namespace modelfs {

struct ModelHostOptions {
  PrefetchPolicy prefetch = PrefetchPolicy::kHeadersOnly;
  bool insecure_stream = false;
  // Where the models' records are kept (host/model_records.h); empty: SaveRecord, Restore and
  // DeleteRecord are refused (kFailedPrecondition).
  std::filesystem::path records;
  // PipelineOptions::on_records_checked: the result of checking a model's tar header records
  // nobody pinned against its layers (logged by the owner). May be empty.
  std::function<void(const std::string& model, const absl::Status&)> on_records_checked;
};

// What a host works with; Create refuses a missing required part (kInvalidArgument).
struct ModelHostParts {
  // Opens the pull client of a registry by name; the host keeps one per registry. Required,
  // unless `registry` is given: the client map the owner resolved its model with (the CLI).
  RegistryConnector connect_registry;
  std::unique_ptr<RegistryClients> registry;
  // The cache's remote side, and the cache over it (or over `decoding`). Both required.
  std::unique_ptr<RegistryRoutingSource> source;
  // Over `source`, and the cache's source when set: compressed layers with a seek index are
  // served lazily. Optional.
  std::unique_ptr<DecodingBlobSource> decoding;
  std::unique_ptr<BlobCache> cache;
  // Mounts the tree. Required for Mount and Adopt.
  std::unique_ptr<ModelMounter> mounter;
  // Layers served from elsewhere (the daemon's containerd content store); the tree reads every
  // other layer from the cache. Optional; not owned, must outlive the host.
  SelectiveBlobReader* preferred = nullptr;
};

// What ModelHost::Open builds a host from: the settings both binaries have.
struct ModelHostConfig {
  ModelHostOptions options;
  // The cache (core/cache/blob_cache.h); `cache.dir` is required, and made when missing.
  CacheOptions cache;
  // How the host reaches a registry: its pull client is opened on first use by ConnectRegistry
  // with these options (hosts.toml, credentials, client timeouts; the daemon's).
  RegistryAccessOptions registry;
  // Instead of `registry`: the client map the owner resolved its model with, kept by the host
  // (the CLI: `modelfs mount`, `modelfs attest`). Optional.
  std::unique_ptr<RegistryClients> clients;
  // A DecodingBlobSource between the cache and its remote side, so that compressed layers with
  // a seek index are served span by span. false: such layers are fetched whole and
  // decompressed first (`modelfs attest`).
  bool decode = true;
  // Mounts through FUSE (NewFuseModelMounter). false: no mounter (Mount, Adopt and MountModel
  // are refused: `modelfs attest` reads through the host without a mount).
  bool mount = true;
  // ModelHostParts::preferred. Not owned; must outlive the host.
  SelectiveBlobReader* preferred = nullptr;
};

class ModelHost final : public ModelService {
 public:
  // Builds the host's parts from `config` (the routing source, the decoding source, the cache
  // under config.cache.dir, the registry clients, the FUSE mounter) and the host over them:
  // what `modelfs-snapshotter`, `modelfs mount` and `modelfs attest` serve models through.
  // Errors: kInvalidArgument (no cache directory), BlobCache::Open's (kFailedPrecondition:
  // another process holds the cache directory).
  static absl::StatusOr<std::unique_ptr<ModelHost>> Open(ModelHostConfig config);
  // The host over parts made by the caller (tests hand in fakes).
  static absl::StatusOr<std::unique_ptr<ModelHost>> Create(ModelHostOptions options,
                                                           ModelHostParts parts);
  ~ModelHost() override;

  // Clears a dead FUSE mount a crashed process left at `dir` (fuse/stale_mount.h). Errors: the
  // mounter's; kFailedPrecondition without one.
  absl::Status DetachStaleMount(const std::string& dir) override;
  // Mounts the tree at `dir` and serves it. Errors: kFailedPrecondition (mounted already, or no
  // mounter), the mounter's.
  absl::Status Mount(const std::string& dir, const FuseMountOptions& options) override;
  // Serves the tree on the inherited connection `fuse_fd` mounted at `dir`. Errors as Mount,
  // and the mounter's Adopt.
  absl::Status Adopt(int fuse_fd, const std::string& dir, const FuseMountOptions& options) override;
  // Unmounts `dir` lazily whatever is mounted there (an inherited mount that could not be
  // adopted). No-op without a mounter.
  void LazyUnmount(const std::string& dir) override;
  // Stops serving: unmounts (lazily when busy), or with keep_mount leaves the mount and its
  // connection for a process that adopts it. OK when not mounted. Idempotent.
  absl::Status Unmount(bool keep_mount = false) override;
  // The /dev/fuse fd of the mount; -1 when not mounted.
  int fuse_fd() const override;
  // Blocks until the mount stops serving (Unmount, or an external umount). OK when not mounted.
  absl::Status Wait();

  // Serves `rm` as `name`: routes its layers to rm.registry/rm.repository (through the host's
  // client of that registry), registers them with the cache and puts its files in the tree
  // (already there is fine). Errors: the registry connector's, ModelPipeline::Register's.
  absl::StatusOr<LoadedModel> Register(const std::string& name, const ResolvedModel& rm,
                                       PrefetchStart prefetch) override;
  // The same with every layer read from `source` instead of a registry (containerd's content
  // store).
  absl::StatusOr<LoadedModel> RegisterFrom(const std::string& name, const ResolvedModel& rm,
                                           std::shared_ptr<RemoteBlobSource> source,
                                           PrefetchStart prefetch) override;
  // ModelService: AssembleModel through the tree's reader, then the tree.
  absl::StatusOr<LoadedModel> RegisterInPlace(const std::string& name,
                                              const ResolvedModel& rm) override;
  // Takes model `name` out of the mount (and the kernel's dentries) or, unmounted, the tree,
  // and drops the cache references of `model_ref` (M's digest; "" for none). Errors: kNotFound
  // when the tree does not hold `name` (the references are dropped all the same).
  absl::Status Remove(const std::string& name, const std::string& model_ref) override;
  void Discard(const std::string& name, const std::string& model_ref) override;
  bool HasModel(const std::string& name) override;
  void StartPrefetch(const std::string& model_ref) override;

  // A model shown inside MountModel's model, under `dir` (a path relative to its root): its
  // files and .modelinfo.json. `mount --state` shows the model's state under .state/.
  struct NestedModel {
    std::string dir;
    LoadedModel model;
  };
  // `modelfs mount`'s one model, in a mount of its own (the daemon's models are directories
  // <mount>/<name> of one mount): routes rm's layers to rm's registry (or to `from` when given,
  // as RegisterFrom), registers them with the cache, and in the pipeline's serve step makes a
  // tree whose ROOT is rm (`reference` is shown in its .modelinfo.json), with `nested` under
  // nested->dir/, and mounts it at `dir`; prefetch starts after that, at once. So a failed mount
  // leaves no cache reference and no prefetch. Instead of Mount, once, on a host that serves no
  // model yet; afterwards Register and Remove are refused (kFailedPrecondition: the tree holds a
  // single model). Errors: kFailedPrecondition (mounted already, a model registered, no
  // mounter), Register's, ModelTree::SingleModel's, the mounter's.
  absl::StatusOr<LoadedModel> MountModel(const std::string& dir, const FuseMountOptions& options,
                                         const ResolvedModel& rm, const std::string& reference,
                                         const NestedModel* nested = nullptr,
                                         std::shared_ptr<RemoteBlobSource> from = nullptr);
  // Routes rm's layers as MountModel does and registers them with the cache, without putting
  // its files in the tree (they go in MountModel's `nested`). Prefetch starts at once. Errors:
  // Register's.
  absl::StatusOr<LoadedModel> Load(const ResolvedModel& rm, const std::string& reference,
                                   std::shared_ptr<RemoteBlobSource> from = nullptr);

  // Keeps rm as <records>/<name> (OK when it is there already).
  absl::Status SaveRecord(const std::string& name, const ResolvedModel& rm) override;
  absl::StatusOr<ResolvedModel> LoadRecord(const std::string& name) override;
  std::vector<std::string> ListRecords() override;
  // Registers the model of record <records>/<name> again; returns what it registered.
  // Errors: LoadModelRecord's (kNotFound, kDataLoss), then Register's.
  absl::StatusOr<ResolvedModel> Restore(const std::string& name, PrefetchStart prefetch);
  absl::Status DeleteRecord(const std::string& name) override;

  absl::StatusOr<std::shared_ptr<RegistryClient>> Client(const std::string& registry) override;

  CacheStats cache_stats() const override;
  bool cache_disk_full() const override;
  std::map<Digest, BlobCache::LayerInfo> CachedLayers() const override;
  absl::StatusOr<BlobCache::LayerInfo> CachedLayer(const Digest& layer) const override;
  std::map<std::string, EndpointHealth::LastError> endpoint_errors() const override;
  absl::Status FetchLayer(const Digest& layer) override;
  BlobCache::EvictResult EvictLayers(const std::vector<Digest>& layers) override;
  void EnforceCacheLimit() override;

  // The parts, for the CLI (`modelfs mount`'s stats, `modelfs attest`'s reads) and tests; the
  // snapshotter sees none of them.
  RegistryClients& registry() { return *registry_; }
  BlobCache& cache() { return *cache_; }
  const BlobCache& cache() const { return *cache_; }
  ModelPipeline& pipeline() { return *pipeline_; }
  // The decoding source over the cache's remote side; null when the host has none.
  const DecodingBlobSource* decoding() const { return decoding_.get(); }
  // What the tree reads through: the preferred reader's layers there, the rest from the cache.
  BlobReader& reader() { return *reader_; }
  ModelTree& tree() { return *tree_; }

 private:
  ModelHost(ModelHostOptions options, ModelHostParts parts);
  absl::StatusOr<LoadedModel> Serve(const std::string& name, const ResolvedModel& rm,
                                    PrefetchStart prefetch);
  absl::Status CheckRecords() const;
  // Fetches rm's layers from rm's registry through the host's client of it, or from `from`.
  absl::Status Route(const ResolvedModel& rm, std::shared_ptr<RemoteBlobSource> from);

  const ModelHostOptions options_;
  std::unique_ptr<RegistryClients> registry_;
  std::unique_ptr<RegistryRoutingSource> source_;
  std::unique_ptr<DecodingBlobSource> decoding_;  // over source_; may be null
  std::unique_ptr<BlobCache> cache_;
  std::unique_ptr<ModelPipeline> pipeline_;  // over cache_
  std::unique_ptr<LayerRoutingReader> reader_;
  std::shared_ptr<ModelTree> tree_;  // replaced by MountModel's single-model tree
  std::unique_ptr<ModelMounter> mounter_;
  std::unique_ptr<ModelMount> mount_;  // null until Mount/Adopt
  bool stopped_ = false;               // Unmount was called
};

}  // namespace modelfs
