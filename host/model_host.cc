// The model host both binaries serve models through (see model_host.h).
#include "host/model_host.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/model/model_loader.h"
#include "core/status/status_macros.h"
#include "host/model_records.h"

namespace modelfs {

ModelHost::ModelHost(ModelHostOptions options, ModelHostParts parts)
    : options_(std::move(options)),
      registry_(parts.registry != nullptr
                    ? std::move(parts.registry)
                    : std::make_unique<RegistryClients>(std::move(parts.connect_registry))),
      source_(std::move(parts.source)),
      decoding_(std::move(parts.decoding)),
      cache_(std::move(parts.cache)),
      mounter_(std::move(parts.mounter)) {
  if (cache_ != nullptr) {
    pipeline_ = std::make_unique<ModelPipeline>(
        cache_.get(), PipelineOptions{options_.prefetch, options_.insecure_stream, decoding_.get(),
                                      options_.on_records_checked});
    reader_ = std::make_unique<LayerRoutingReader>(parts.preferred, cache_.get());
    tree_ = std::make_shared<ModelTree>(reader_.get());
  }
}

ModelHost::~ModelHost() { (void)Unmount(); }

absl::StatusOr<std::unique_ptr<ModelHost>> ModelHost::Create(ModelHostOptions options,
                                                             ModelHostParts parts) {
  if ((!parts.connect_registry && parts.registry == nullptr) || !parts.source || !parts.cache) {
    return absl::InvalidArgumentError(
        "model host: the registry connector and the cache with its source are required");
  }
  return std::unique_ptr<ModelHost>(new ModelHost(std::move(options), std::move(parts)));
}

absl::StatusOr<std::unique_ptr<ModelHost>> ModelHost::Open(ModelHostConfig config) {
  if (config.cache.dir.empty()) {
    return absl::InvalidArgumentError("model host: no cache directory");
  }
  ModelHostParts parts;
  if (config.clients != nullptr) {
    parts.registry = std::move(config.clients);
  } else {
    parts.connect_registry =
        [access = std::move(config.registry)](
            const std::string& registry) -> absl::StatusOr<std::shared_ptr<RegistryClient>> {
      return ConnectRegistry(registry, HostCapability::kPull, access);
    };
  }
  parts.source = std::make_unique<RegistryRoutingSource>();
  if (config.decode) parts.decoding = std::make_unique<DecodingBlobSource>(parts.source.get());
  std::error_code ec;
  std::filesystem::create_directories(config.cache.dir, ec);
  RemoteBlobSource* remote = parts.decoding != nullptr
                                 ? static_cast<RemoteBlobSource*>(parts.decoding.get())
                                 : parts.source.get();
  ASSIGN_OR_RETURN(parts.cache, BlobCache::Open(config.cache, remote));
  if (config.mount) parts.mounter = NewFuseModelMounter();
  parts.preferred = config.preferred;
  return Create(std::move(config.options), std::move(parts));
}

absl::Status ModelHost::DetachStaleMount(const std::string& dir) {
  if (mounter_ == nullptr) return absl::FailedPreconditionError("model host: no mounter");
  return mounter_->DetachStaleMount(dir);
}

absl::Status ModelHost::Mount(const std::string& dir, const FuseMountOptions& options) {
  if (mounter_ == nullptr) return absl::FailedPreconditionError("model host: no mounter");
  if (mount_ != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("model host: mounted already (", dir, ")"));
  }
  ASSIGN_OR_RETURN(mount_, mounter_->Mount(dir, tree_, options));
  return absl::OkStatus();
}

absl::Status ModelHost::Adopt(int fuse_fd, const std::string& dir,
                              const FuseMountOptions& options) {
  if (mounter_ == nullptr) return absl::FailedPreconditionError("model host: no mounter");
  if (mount_ != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("model host: mounted already (", dir, ")"));
  }
  ASSIGN_OR_RETURN(mount_, mounter_->Adopt(fuse_fd, dir, tree_, options));
  return absl::OkStatus();
}

void ModelHost::LazyUnmount(const std::string& dir) {
  if (mounter_ != nullptr) mounter_->LazyUnmount(dir);
}

absl::Status ModelHost::Unmount(bool keep_mount) {
  if (mount_ == nullptr || stopped_) return absl::OkStatus();
  stopped_ = true;
  return keep_mount ? mount_->Detach() : mount_->Unmount();
}

int ModelHost::fuse_fd() const { return mount_ != nullptr ? mount_->fuse_fd() : -1; }

absl::Status ModelHost::Wait() { return mount_ != nullptr ? mount_->Wait() : absl::OkStatus(); }

absl::StatusOr<LoadedModel> ModelHost::Serve(const std::string& name, const ResolvedModel& rm,
                                             PrefetchStart prefetch) {
  auto serve = [&](const LoadedModel& m) {
    absl::Status added =
        tree_->AddModel(name, m.files, m.synthetic, ModelOptions{.mtime_sec = m.mtime_sec});
    return absl::IsAlreadyExists(added) ? absl::OkStatus() : added;
  };
  return pipeline_->Register(rm, rm.ref.String(), serve, prefetch);
}

absl::Status ModelHost::Route(const ResolvedModel& rm, std::shared_ptr<RemoteBlobSource> from) {
  if (from != nullptr) {
    for (const ModelLayer& l : rm.layers) source_->AddSource(l.descriptor.digest, from);
    return absl::OkStatus();
  }
  // M's layers are read from M's registry, which V's record may name apart from V's.
  ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client, registry_->For(rm.registry));
  for (const ModelLayer& l : rm.layers) source_->Add(l.descriptor.digest, client, rm.repository);
  // V's windows layers (read a window at a time): resolve uses them only when V lies in M's
  // repository.
  for (const auto& [layer, w] : rm.seek_windows) source_->Add(w.layer, client, rm.repository);
  return absl::OkStatus();
}

absl::StatusOr<LoadedModel> ModelHost::Register(const std::string& name, const ResolvedModel& rm,
                                                PrefetchStart prefetch) {
  RETURN_IF_ERROR(Route(rm, nullptr));
  return Serve(name, rm, prefetch);
}

absl::StatusOr<LoadedModel> ModelHost::RegisterFrom(const std::string& name,
                                                    const ResolvedModel& rm,
                                                    std::shared_ptr<RemoteBlobSource> source,
                                                    PrefetchStart prefetch) {
  RETURN_IF_ERROR(Route(rm, std::move(source)));
  return Serve(name, rm, prefetch);
}

absl::StatusOr<LoadedModel> ModelHost::Load(const ResolvedModel& rm, const std::string& reference,
                                            std::shared_ptr<RemoteBlobSource> from) {
  RETURN_IF_ERROR(Route(rm, std::move(from)));
  return pipeline_->Register(rm, reference, [](const LoadedModel&) { return absl::OkStatus(); });
}

absl::StatusOr<LoadedModel> ModelHost::MountModel(const std::string& dir,
                                                  const FuseMountOptions& options,
                                                  const ResolvedModel& rm,
                                                  const std::string& reference,
                                                  const NestedModel* nested,
                                                  std::shared_ptr<RemoteBlobSource> from) {
  if (mounter_ == nullptr) return absl::FailedPreconditionError("model host: no mounter");
  if (mount_ != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("model host: mounted already (", dir, ")"));
  }
  if (!tree_->Models().empty()) {
    return absl::FailedPreconditionError(
        "model host: a model at the root needs a host that serves no model yet");
  }
  RETURN_IF_ERROR(Route(rm, std::move(from)));
  auto serve = [&](const LoadedModel& m) -> absl::Status {
    std::vector<TreeFile> files = m.files;
    SyntheticFiles synthetic = m.synthetic;
    if (nested != nullptr) {
      for (TreeFile f : nested->model.files) {
        f.path = absl::StrCat(nested->dir, "/", f.path);
        files.push_back(std::move(f));
      }
      for (const auto& [path, file] : nested->model.synthetic) {
        synthetic[absl::StrCat(nested->dir, "/", path)] = file;
      }
    }
    ASSIGN_OR_RETURN(std::unique_ptr<ModelTree> tree,
                     ModelTree::SingleModel(reader_.get(), std::move(files), std::move(synthetic),
                                            ModelOptions{.mtime_sec = m.mtime_sec}));
    std::shared_ptr<ModelTree> root(std::move(tree));
    ASSIGN_OR_RETURN(mount_, mounter_->Mount(dir, root, options));
    tree_ = std::move(root);
    return absl::OkStatus();
  };
  return pipeline_->Register(rm, reference, serve);
}

absl::Status ModelHost::Remove(const std::string& name, const std::string& model_ref) {
  absl::Status st = mount_ != nullptr ? mount_->RemoveModel(name) : tree_->RemoveModel(name);
  if (!model_ref.empty()) pipeline_->Unregister(model_ref);
  return st;
}

void ModelHost::Discard(const std::string& name, const std::string& model_ref) {
  (void)tree_->RemoveModel(name);
  if (!model_ref.empty()) pipeline_->Unregister(model_ref);
}

bool ModelHost::HasModel(const std::string& name) { return tree_->HasModel(name); }

void ModelHost::StartPrefetch(const std::string& model_ref) { pipeline_->StartPrefetch(model_ref); }

absl::StatusOr<LoadedModel> ModelHost::RegisterInPlace(const std::string& name,
                                                       const ResolvedModel& rm) {
  LoadOptions lo;
  lo.reference = rm.ref.String();
  // Tar layers are verified whole here (their headers are read); raw layers on first use.
  ASSIGN_OR_RETURN(LoadedModel loaded, AssembleModel(rm, *reader_, "whole-layer", lo));
  absl::Status added = tree_->AddModel(name, loaded.files, loaded.synthetic,
                                       ModelOptions{.mtime_sec = loaded.mtime_sec});
  if (!added.ok() && !absl::IsAlreadyExists(added)) return added;
  return loaded;
}

absl::StatusOr<std::shared_ptr<RegistryClient>> ModelHost::Client(const std::string& registry) {
  return registry_->For(registry);
}

absl::Status ModelHost::CheckRecords() const {
  if (options_.records.empty()) {
    return absl::FailedPreconditionError("model host: no records directory");
  }
  return absl::OkStatus();
}

absl::Status ModelHost::SaveRecord(const std::string& name, const ResolvedModel& rm) {
  RETURN_IF_ERROR(CheckRecords());
  return SaveModelRecord(options_.records, name, rm);
}

absl::StatusOr<ResolvedModel> ModelHost::Restore(const std::string& name, PrefetchStart prefetch) {
  RETURN_IF_ERROR(CheckRecords());
  ASSIGN_OR_RETURN(ResolvedModel rm, LoadModelRecord(options_.records, name));
  RETURN_IF_ERROR(Register(name, rm, prefetch).status());
  return rm;
}

absl::Status ModelHost::DeleteRecord(const std::string& name) {
  RETURN_IF_ERROR(CheckRecords());
  return DeleteModelRecord(options_.records, name);
}

absl::StatusOr<ResolvedModel> ModelHost::LoadRecord(const std::string& name) {
  RETURN_IF_ERROR(CheckRecords());
  return LoadModelRecord(options_.records, name);
}

std::vector<std::string> ModelHost::ListRecords() {
  if (options_.records.empty()) return {};
  return ListModelRecords(options_.records);
}

CacheStats ModelHost::cache_stats() const { return cache_->stats(); }

bool ModelHost::cache_disk_full() const { return cache_->disk_full(); }

std::map<Digest, BlobCache::LayerInfo> ModelHost::CachedLayers() const {
  return cache_->ListLayers();
}

absl::StatusOr<BlobCache::LayerInfo> ModelHost::CachedLayer(const Digest& layer) const {
  return cache_->GetLayerInfo(layer);
}

std::map<std::string, EndpointHealth::LastError> ModelHost::endpoint_errors() const {
  return cache_->endpoint_errors();
}

absl::Status ModelHost::FetchLayer(const Digest& layer) {
  return cache_->Prefetch(layer, PrefetchPolicy::kAll);
}

BlobCache::EvictResult ModelHost::EvictLayers(const std::vector<Digest>& layers) {
  return cache_->EvictLayers(layers);
}

void ModelHost::EnforceCacheLimit() { cache_->EnforceSizeLimit(); }

}  // namespace modelfs
