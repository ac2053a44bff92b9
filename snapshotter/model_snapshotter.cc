// Lazily mounted model layers over the overlay snapshotter (see model_snapshotter.h).
#include "snapshotter/model_snapshotter.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/model/model_pipeline.h"
#include "core/status/status_macros.h"
#include "core/text/escape.h"
#include "fuse/stale_mount.h"
#include "snapshotter/model_records.h"

namespace modelfs::snapshotter {
namespace fs = std::filesystem;

// The cache's remote side for many models: each layer digest is fetched from the registry and
// repository of the model that registered it (any one will do: content is addressed by digest).
class ModelSnapshotter::RoutingSource final : public RemoteBlobSource {
 public:
  void Add(const Digest& layer, std::shared_ptr<RegistryClient> client,
           const std::string& repository) {
    absl::MutexLock lock(&mu_);
    routes_[layer.str()] = Route{std::move(client), repository};
  }

  absl::StatusOr<std::string> FetchRange(const Digest& blob, uint64_t offset, uint64_t length,
                                         absl::Time deadline) override {
    ASSIGN_OR_RETURN(Route route, RouteOf(blob));
    return route.client->GetBlobRange(route.repository, blob, offset, length, deadline);
  }

  absl::Status StreamRange(const Digest& blob, uint64_t offset, uint64_t length,
                           absl::Time deadline,
                           const std::function<absl::Status(absl::string_view)>& sink) override {
    ASSIGN_OR_RETURN(Route route, RouteOf(blob));
    return route.client->StreamBlobRange(route.repository, blob, offset, length, deadline, sink);
  }

  // The cache keeps health and fetch threads per registry, so one model's registry outage
  // does not touch reads of models from other registries.
  std::string EndpointOf(const Digest& blob) override {
    absl::MutexLock lock(&mu_);
    auto it = routes_.find(blob.str());
    return it == routes_.end() ? std::string() : it->second.client->registry();
  }

 private:
  struct Route {
    std::shared_ptr<RegistryClient> client;
    std::string repository;
  };
  absl::StatusOr<Route> RouteOf(const Digest& blob) {
    absl::MutexLock lock(&mu_);
    auto it = routes_.find(blob.str());
    if (it == routes_.end()) {
      return absl::NotFoundError(absl::StrCat("no registry is known for layer ", blob.str()));
    }
    return it->second;
  }
  absl::Mutex mu_;
  std::map<std::string, Route> routes_ ABSL_GUARDED_BY(mu_);
};

namespace {

std::string ModelName(const Digest& model) {
  return absl::StrCat("sha256-", std::string(model.hex()));
}

}  // namespace

ModelSnapshotter::ModelSnapshotter(ModelSnapshotterOptions options)
    : options_(std::move(options)),
      mnt_dir_(options_.root / "mnt"),
      models_dir_(options_.root / "models") {}

void ModelSnapshotter::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    fprintf(stderr, "modelfs-snapshotter: %s\n", EscapeUntrusted(line).c_str());
  }
}

absl::StatusOr<std::unique_ptr<ModelSnapshotter>> ModelSnapshotter::Open(
    ModelSnapshotterOptions options) {
  if (options.root.empty()) return absl::InvalidArgumentError("snapshotter: empty root");
  std::unique_ptr<ModelSnapshotter> s(new ModelSnapshotter(std::move(options)));
  const ModelSnapshotterOptions& o = s->options_;
  std::error_code ec;
  fs::create_directories(o.root, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("snapshotter: create ", o.root.string(), ": ", ec.message()));
  }
  // One daemon per root: two would share the database and fight over <root>/mnt.
  const fs::path lock_path = o.root / "lock";
  s->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (s->lock_fd_ < 0 || ::flock(s->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("snapshotter: ", o.root.string(),
                                                      " is in use by another modelfs-snapshotter (",
                                                      lock_path.string(), " is locked)"));
  }
  ASSIGN_OR_RETURN(s->base_, OverlaySnapshotter::Open(o.root, o.overlay));
  s->base_->set_lower_resolver([raw = s.get()](int64_t id) { return raw->ModelDirFor(id); });

  CacheOptions co = o.cache;
  if (co.dir.empty()) co.dir = (o.root / "cache").string();
  fs::create_directories(co.dir, ec);
  s->source_ = std::make_unique<RoutingSource>();
  ASSIGN_OR_RETURN(s->cache_, BlobCache::Open(co, s->source_.get()));
  s->pipeline_ = std::make_unique<ModelPipeline>(s->cache_.get(),
                                                 PipelineOptions{o.prefetch, o.insecure_stream});
  if (o.content_store != nullptr) {
    s->content_store_ = o.content_store;
  } else if (!o.containerd_address.empty()) {
    ASSIGN_OR_RETURN(s->owned_content_store_, ConnectContentStore(o.containerd_address));
    s->content_store_ = s->owned_content_store_.get();
  }
  if (s->content_store_ != nullptr) {
    s->content_reader_ = std::make_unique<ContentStoreBlobReader>(s->content_store_);
  }
  if (!o.policy.empty()) {
    ModelSnapshotter* raw = s.get();
    s->policy_gate_ = std::make_unique<PolicyGate>(
        o.policy, [raw](const std::string& registry) -> absl::StatusOr<SignatureStore*> {
          ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client, raw->ClientFor(registry));
          absl::MutexLock lock(&raw->mu_);
          std::unique_ptr<RegistrySignatureStore>& store = raw->signature_stores_[registry];
          // The client lives in clients_ as long as the snapshotter.
          if (!store) store = std::make_unique<RegistrySignatureStore>(client.get());
          return store.get();
        });
  }
  s->reader_ = std::make_unique<LayerRoutingReader>(s->content_reader_.get(), s->cache_.get());
  s->tree_ = std::make_shared<ModelTree>(s->reader_.get());

  // Models that committed snapshots still use; records nobody uses are dropped.
  std::map<std::string, std::set<int64_t>> used;
  RETURN_IF_ERROR(
      s->base_->Walk({absl::StrCat("labels.\"", kLabelRemoteModel, "\"")},
                     [&](const SnapshotInfo& info) -> absl::Status {
                       auto it = info.labels.find(kLabelRemoteModel);
                       if (info.kind != SnapshotKind::kCommitted || it == info.labels.end()) {
                         return absl::OkStatus();
                       }
                       absl::StatusOr<SnapshotRecord> rec = s->base_->Record(info.name);
                       if (!rec.ok()) return absl::OkStatus();
                       used[it->second].insert(rec->id);
                       auto image = info.labels.find(kLabelCriImageRef);
                       auto pinned = info.labels.find(kLabelCriManifestDigest);
                       if (image != info.labels.end() && pinned != info.labels.end()) {
                         absl::StatusOr<ImageReference> ref = ImageReference::Parse(image->second);
                         absl::StatusOr<Digest> digest = Digest::Parse(pinned->second);
                         if (ref.ok() && digest.ok()) {
                           absl::MutexLock lock(&s->mu_);
                           s->volume_of_snapshot_[rec->id] = {*ref, *digest};
                         }
                       }
                       return absl::OkStatus();
                     }));
  for (const std::string& name : ListModelRecords(s->models_dir_)) {
    if (!used.count(name)) (void)DeleteModelRecord(s->models_dir_, name);
  }
  ASSIGN_OR_RETURN(std::vector<ContentSnapshot> content, s->ListContentSnapshots());
  std::vector<std::string> names;
  {
    absl::MutexLock lock(&s->mu_);
    for (auto& [name, ids] : used) {
      ModelEntry& e = s->models_[name];
      e.snapshot_ids = ids;
      for (int64_t id : ids) s->model_of_snapshot_[id] = name;
      names.push_back(name);
    }
  }

  // The open-file table goes with the connection to the next process (fuse/passthrough.h).
  FuseMountOptions fuse_options = o.fuse;
  if (fuse_options.open_files_state.empty()) {
    fuse_options.open_files_state = (o.root / "fuse-open-files").string();
  }
  if (o.inherited_fuse_fd >= 0) {
    // The kernel still holds the inode numbers and open files of the previous process; they
    // must resolve before the first request is answered, so register every model first. Until
    // then containers' requests wait in the kernel's queue. (Nothing may touch <root>/mnt here:
    // with no one serving it yet, a stat would block.)
    s->RestoreModels(names);
    s->RestoreContentSnapshots(content);
    absl::StatusOr<std::unique_ptr<FuseMount>> adopted =
        FuseMount::Adopt(o.inherited_fuse_fd, s->mnt_dir_.string(), s->tree_, fuse_options);
    if (adopted.ok()) {
      s->fuse_ = *std::move(adopted);
      s->Log(absl::StrCat("serving the inherited FUSE connection of ", s->mnt_dir_.string(), " (",
                          names.size(), " models)"));
    } else {
      // A connection that cannot be resumed must not keep the daemon down: mount afresh
      // (containers holding the old mount see errors, as without a store).
      s->Log(absl::StrCat("cannot resume the inherited FUSE connection (",
                          adopted.status().ToString(), "); mounting afresh"));
      ::close(o.inherited_fuse_fd);
      ::umount2(s->mnt_dir_.c_str(), MNT_DETACH);
      fs::create_directories(s->mnt_dir_, ec);
      ASSIGN_OR_RETURN(s->fuse_, FuseMount::Mount(s->mnt_dir_.string(), s->tree_, fuse_options));
    }
  } else {
    fs::create_directories(s->mnt_dir_, ec);
    RETURN_IF_ERROR(DetachStaleMount(s->mnt_dir_.string()));
    ASSIGN_OR_RETURN(s->fuse_, FuseMount::Mount(s->mnt_dir_.string(), s->tree_, fuse_options));
    if (!names.empty() || !content.empty()) {
      s->restorer_ = std::thread([raw = s.get(), names, content] {
        raw->RestoreModels(names);
        raw->RestoreContentSnapshots(content);
      });
    }
  }
  return s;
}

ModelSnapshotter::~ModelSnapshotter() {
  (void)Shutdown();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

absl::Status ModelSnapshotter::Shutdown(bool keep_mount) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return absl::OkStatus();
    shut_down_ = true;
    changed_.SignalAll();
  }
  stopping_ = true;
  if (restorer_.joinable()) restorer_.join();
  absl::Status st;
  if (fuse_) st = keep_mount ? fuse_->Detach() : fuse_->Unmount();
  return st;
}

std::optional<std::string> ModelSnapshotter::ModelDirFor(int64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = model_of_snapshot_.find(id);
  if (it == model_of_snapshot_.end()) return std::nullopt;
  return (mnt_dir_ / it->second).string();
}

absl::StatusOr<std::shared_ptr<RegistryClient>> ModelSnapshotter::ClientFor(
    const std::string& registry) {
  {
    absl::MutexLock lock(&mu_);
    auto it = clients_.find(registry);
    if (it != clients_.end()) return it->second;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<RegistryClient> made,
                   ConnectRegistry(registry, HostCapability::kPull, options_.registry));
  std::shared_ptr<RegistryClient> client(std::move(made));
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = clients_.emplace(registry, client);
  return it->second;
}

absl::Status ModelSnapshotter::RegisterModel(const std::string& name, const ResolvedModel& rm,
                                             std::shared_ptr<RegistryClient> client,
                                             PrefetchStart prefetch) {
  for (const ModelLayer& l : rm.layers) source_->Add(l.descriptor.digest, client, rm.repository);
  auto serve = [&](const LoadedModel& m) {
    absl::Status added =
        tree_->AddModel(name, m.files, m.synthetic, ModelOptions{.mtime_sec = m.mtime_sec});
    return absl::IsAlreadyExists(added) ? absl::OkStatus() : added;
  };
  ASSIGN_OR_RETURN(LoadedModel loaded, pipeline_->Register(rm, rm.ref.String(), serve, prefetch));
  Log(absl::StrCat("model ", rm.model_descriptor.digest.str(), " from ", rm.ref.String(),
                   " registered at ", (mnt_dir_ / name).string(), " (", loaded.files.size(),
                   " files, ", loaded.verification, " verification)"));
  return absl::OkStatus();
}

absl::StatusOr<bool> ModelSnapshotter::BeginRegistration(const std::string& name,
                                                         const std::string& model_ref) {
  absl::MutexLock lock(&mu_);
  absl::Time deadline = absl::Now() + options_.model_wait;
  while (true) {
    auto it = models_.find(name);
    if (it == models_.end() || it->second.state == ModelState::kFailed) break;
    if (it->second.state == ModelState::kReady) return false;
    if (shut_down_) return absl::UnavailableError("snapshotter is shutting down");
    if (changed_.WaitWithDeadline(&mu_, deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("model ", name, " is still being registered"));
    }
  }
  ModelEntry& e = models_[name];
  e.state = ModelState::kLoading;
  e.error = absl::OkStatus();
  e.model_ref = model_ref;
  return true;
}

absl::Status ModelSnapshotter::FinishRegistration(const std::string& name, absl::Status st) {
  absl::MutexLock lock(&mu_);
  ModelEntry& e = models_[name];
  e.state = st.ok() ? ModelState::kReady : ModelState::kFailed;
  e.error = st;
  if (!st.ok() && e.snapshot_ids.empty()) models_.erase(name);
  changed_.SignalAll();
  return st;
}

absl::Status ModelSnapshotter::EnsureModel(const std::string& name, const ResolvedModel& rm,
                                           std::shared_ptr<RegistryClient> client) {
  ASSIGN_OR_RETURN(bool mine, BeginRegistration(name, rm.model_descriptor.digest.str()));
  if (!mine) return absl::OkStatus();
  absl::Status st = SaveModelRecord(models_dir_, name, rm);
  // containerd is pulling: prefetch waits until a container uses the model (WaitForModelIds).
  if (st.ok()) st = RegisterModel(name, rm, std::move(client), PrefetchStart::kOnStartPrefetch);
  return FinishRegistration(name, std::move(st));
}

void ModelSnapshotter::RestoreModels(std::vector<std::string> names) {
  for (const std::string& name : names) {
    if (stopping_) return;
    absl::Status st;
    absl::StatusOr<ResolvedModel> rm = LoadModelRecord(models_dir_, name);
    if (rm.ok()) {
      absl::StatusOr<std::shared_ptr<RegistryClient>> client = ClientFor(rm->registry);
      // The model was in use before the restart: its prefetch goes on at once.
      st =
          client.ok() ? RegisterModel(name, *rm, *client, PrefetchStart::kAtOnce) : client.status();
    } else {
      st = rm.status();
    }
    if (!st.ok())
      Log(absl::StrCat("model ", name, " could not be registered again: ", st.ToString()));
    bool orphaned = false;
    {
      absl::MutexLock lock(&mu_);
      auto it = models_.find(name);
      if (it == models_.end()) {
        // Its last snapshot was removed while it was being registered.
        orphaned = true;
      } else {
        if (rm.ok()) it->second.model_ref = rm->model_descriptor.digest.str();
        it->second.state = st.ok() ? ModelState::kReady : ModelState::kFailed;
        it->second.error = st;
      }
      changed_.SignalAll();
    }
    if (orphaned && st.ok()) {
      (void)tree_->RemoveModel(name);
      pipeline_->Unregister(rm->model_descriptor.digest.str());
    }
  }
}

bool ModelSnapshotter::WaitRestored(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  absl::Time deadline = absl::Now() + timeout;
  auto loading = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [name, e] : models_) {
      if (e.state == ModelState::kLoading) return true;
    }
    return false;
  };
  while (loading()) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) return !loading();
  }
  return true;
}

std::vector<std::string> ModelSnapshotter::ActiveModels() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [name, e] : models_) {
    if (e.state == ModelState::kReady) out.push_back(name);
  }
  return out;
}

RemotePrepareCounts ModelSnapshotter::remote_counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

absl::Status ModelSnapshotter::WaitForModelIds(const std::vector<int64_t>& ids) {
  std::vector<std::string> used;  // model_refs
  absl::ReleasableMutexLock lock(&mu_);
  absl::Time deadline = absl::Now() + options_.model_wait;
  for (int64_t id : ids) {
    auto sit = model_of_snapshot_.find(id);
    if (sit == model_of_snapshot_.end()) continue;
    const std::string name = sit->second;
    while (true) {
      auto it = models_.find(name);
      if (it == models_.end()) {
        return absl::UnavailableError(absl::StrCat("model ", name, " is not registered"));
      }
      if (it->second.state == ModelState::kReady) {
        used.push_back(it->second.model_ref);
        break;
      }
      if (it->second.state == ModelState::kFailed) {
        return absl::UnavailableError(
            absl::StrCat("model ", name, " is not available: ", it->second.error.ToString()));
      }
      if (shut_down_) return absl::UnavailableError("snapshotter is shutting down");
      if (changed_.WaitWithDeadline(&mu_, deadline)) {
        return absl::DeadlineExceededError(
            absl::StrCat("model ", name, " is still being registered after a restart"));
      }
    }
  }
  lock.Release();
  // A container is about to use these models: their deferred prefetch starts now.
  for (const std::string& model_ref : used) pipeline_->StartPrefetch(model_ref);
  return absl::OkStatus();
}

absl::Status ModelSnapshotter::WaitForModelsBelow(const std::string& parent) {
  if (parent.empty()) return absl::OkStatus();
  absl::StatusOr<SnapshotRecord> rec = base_->Record(parent);
  if (!rec.ok()) return absl::OkStatus();  // the overlay snapshotter reports it
  std::vector<int64_t> ids = {rec->id};
  ids.insert(ids.end(), rec->parent_ids.begin(), rec->parent_ids.end());
  if (policy_gate_) {
    // Each container that is to use a model is held to the policy as it is now (a kept
    // verdict costs no registry request), so a model pulled before the policy was set or
    // tightened is refused too.
    std::vector<VolumeOrigin> origins;
    {
      absl::MutexLock lock(&mu_);
      for (int64_t id : ids) {
        auto it = volume_of_snapshot_.find(id);
        if (it != volume_of_snapshot_.end()) origins.push_back(it->second);
      }
    }
    for (const VolumeOrigin& o : origins) {
      RETURN_IF_ERROR(CheckPolicy(o.image, o.digest, "volume image"));
    }
  }
  return WaitForModelIds(ids);
}

absl::Status ModelSnapshotter::CheckPolicy(const ImageReference& image, const Digest& digest,
                                           const std::string& what) {
  if (!policy_gate_) return absl::OkStatus();
  PolicyGate::Outcome outcome = policy_gate_->Check(image, digest);
  if (!outcome.status.ok()) {
    Log(absl::StrCat(what, " refused by policy: ", outcome.status.message()));
    return absl::PermissionDeniedError(absl::StrCat(what, " ", outcome.status.message()));
  }
  return absl::OkStatus();
}

absl::Status ModelSnapshotter::CheckModelLocation(const ResolvedModel& rm) {
  if (!policy_gate_ || !rm.volume_descriptor) return absl::OkStatus();
  // V's signature covers M by digest; a location of M other than V's repository is a place
  // the node is sent to, and the policy must accept M there too.
  if (rm.registry == rm.ref.registry() && rm.repository == rm.ref.repository()) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(ImageReference m,
                   ImageReference::Parse(absl::StrCat(rm.registry, "/", rm.repository, "@",
                                                      rm.model_descriptor.digest.str())));
  return CheckPolicy(m, rm.model_descriptor.digest, "model");
}

std::map<std::string, uint64_t> ModelSnapshotter::policy_refusals() const {
  return policy_gate_ ? policy_gate_->refusals() : std::map<std::string, uint64_t>{};
}

uint64_t ModelSnapshotter::policy_evaluations() const {
  return policy_gate_ ? policy_gate_->evaluations() : 0;
}

absl::Status ModelSnapshotter::CheckModelHost(const ImageReference& volume, const Digest& model,
                                              const std::string& registry) const {
  if (registry == volume.registry()) return absl::OkStatus();
  for (const std::string& allowed : options_.model_hosts) {
    if (allowed == registry) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat("volume image ", volume.String(), " on registry ", volume.registry(),
                   " names its model ", model.str(), " on registry ", registry,
                   ", which this node does not follow volume images to; ",
                   "to allow it, add it to model_hosts in snapshotter.toml: model_hosts = [\"",
                   registry, "\"]"));
}

absl::Status ModelSnapshotter::CheckBinding(RegistryClient& client, const ResolvedModel& rm,
                                            const std::string& parent, const std::string& target) {
  if (!rm.volume_descriptor) {
    return absl::FailedPreconditionError(
        absl::StrCat(rm.ref.String(), " is not a volume image; only a volume layer is mounted"));
  }
  ASSIGN_OR_RETURN(Manifest v, ParseManifest(rm.volume_manifest_json));
  // V's config is small; 1 MiB bounds what a hostile one can make us hold.
  ASSIGN_OR_RETURN(std::string config,
                   FetchVerifiedBlob(client, rm.ref.repository(), v.config, 1u << 20));
  ASSIGN_OR_RETURN(std::vector<Digest> diff_ids, ParseImageConfigDiffIds(config));
  absl::Status st = CheckVolumeSnapshotBinding(v, diff_ids, parent, target);
  if (!st.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "volume image ", rm.ref.String(), " does not bind to this snapshot: ", st.message()));
  }
  return absl::OkStatus();
}

absl::Status ModelSnapshotter::PrepareRemote(const std::string& key, const std::string& parent,
                                             const std::string& target, const VolumeLabels& volume,
                                             const Labels& labels) {
  if (base_->Stat(target).ok()) {
    return absl::AlreadyExistsError(absl::StrCat("target snapshot \"", target, "\" exists"));
  }
  auto image = labels.find(kLabelCriImageRef);
  if (image == labels.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no ", kLabelCriImageRef,
                     " label (CRI pulls with disable_snapshot_annotations = false pass it)"));
  }
  // The binding is checked against V's manifest fetched by the digest containerd pinned, never
  // by a tag that may have moved since containerd resolved it.
  auto pinned = labels.find(kLabelCriManifestDigest);
  if (pinned == labels.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no ", kLabelCriManifestDigest,
                     " label: the layer cannot be bound to a verified volume manifest"));
  }
  ASSIGN_OR_RETURN(ImageReference named, ImageReference::Parse(image->second));
  ASSIGN_OR_RETURN(Digest pinned_digest, Digest::Parse(pinned->second));
  // The policy judges the reference the pod named (its scope, and the identity a signature
  // must match) at the digest containerd resolved it to, before anything of V or M is read.
  RETURN_IF_ERROR(CheckPolicy(named, pinned_digest, "volume image"));
  ASSIGN_OR_RETURN(ImageReference ref,
                   ImageReference::Parse(absl::StrCat(named.Name(), "@", pinned->second)));
  ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client, ClientFor(ref.registry()));
  // ResolveModel asks for another registry only when V's record names M there, and before it
  // fetches anything of M: the one place to hold V to the hosts the admin allowed.
  ASSIGN_OR_RETURN(
      ResolvedModel rm,
      ResolveModel(
          *client, ref,
          [&](const std::string& registry) -> absl::StatusOr<std::shared_ptr<RegistryClient>> {
            RETURN_IF_ERROR(CheckModelHost(ref, volume.model.digest, registry));
            return ClientFor(registry);
          }));
  RETURN_IF_ERROR(CheckBinding(*client, rm, parent, target));
  RETURN_IF_ERROR(CheckModelLocation(rm));
  if (rm.model_descriptor.digest != volume.model.digest) {
    return absl::DataLossError(absl::StrCat(
        "volume image ", ref.String(), " points to model ", rm.model_descriptor.digest.str(),
        ", but its layer annotation says ", volume.model.digest.str()));
  }
  const std::string name = ModelName(rm.model_descriptor.digest);
  // M's layers are read from M's registry, which V's record may name apart from V's.
  ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> model_client, ClientFor(rm.registry));
  RETURN_IF_ERROR(EnsureModel(name, rm, model_client));

  RETURN_IF_ERROR(base_->Prepare(key, parent, labels).status());
  Labels committed = labels;
  committed[kLabelRemoteModel] = name;
  if (absl::Status st = base_->Commit(target, key, committed); !st.ok()) {
    (void)base_->Remove(key);
    return st;
  }
  ASSIGN_OR_RETURN(SnapshotRecord rec, base_->Record(target));
  {
    absl::MutexLock lock(&mu_);
    model_of_snapshot_[rec.id] = name;
    models_[name].snapshot_ids.insert(rec.id);
    volume_of_snapshot_[rec.id] = {named, pinned_digest};
  }
  Log(absl::StrCat("snapshot ", target, " for ", ref.String(), " is model ", name));
  return absl::AlreadyExistsError(
      absl::StrCat("target snapshot \"", target, "\" exists (model mounted lazily)"));
}

absl::StatusOr<std::vector<Mount>> ModelSnapshotter::Prepare(const std::string& key,
                                                             const std::string& parent,
                                                             const Labels& labels) {
  auto target = labels.find(kLabelTargetRef);
  if (target != labels.end()) {
    absl::StatusOr<std::optional<VolumeLabels>> volume = ParseVolumeLabels(labels);
    if (!volume.ok()) {
      Log(absl::StrCat("snapshot ", key, ": malformed modelfs labels (", volume.status().ToString(),
                       "); unpacking it as an ordinary layer"));
      absl::MutexLock lock(&mu_);
      counts_.fallback++;
    } else if (volume->has_value()) {
      absl::Status st = PrepareRemote(key, parent, target->second, **volume, labels);
      absl::MutexLock lock(&mu_);
      if (absl::IsAlreadyExists(st)) {
        counts_.mounted++;
        return st;
      }
      // A verification failure or a refusal fails the Prepare: unpacking the layer instead
      // would still hand the pod what was refused (its pointer files).
      if (absl::IsDataLoss(st) || absl::IsPermissionDenied(st)) {
        counts_.error++;
        Log(absl::StrCat("snapshot ", key, ": refused: ", st.ToString()));
        return st;
      }
      counts_.fallback++;
      Log(absl::StrCat("snapshot ", key, ": model ", (*volume)->model.digest.str(),
                       " not mounted lazily (", st.ToString(),
                       "); unpacking the volume layer instead"));
    }
  }
  if (parent.empty()) {
    if (std::optional<ImageVolumeKey> volume = ParseImageVolumeKey(key)) {
      absl::StatusOr<std::vector<Mount>> mounts = PrepareFromContentStore(key, *volume, labels);
      // Unavailable: containerd_address reaches no containerd, so whether this is a model
      // cannot be known; an empty volume would hide the misconfiguration.
      if (mounts.ok() || absl::IsDataLoss(mounts.status()) ||
          absl::IsPermissionDenied(mounts.status()) || absl::IsUnavailable(mounts.status())) {
        return mounts;
      }
      Log(absl::StrCat("image volume ", key, ": not served from containerd's content store (",
                       mounts.status().ToString(), "); an ordinary empty snapshot"));
    }
  }
  RETURN_IF_ERROR(WaitForModelsBelow(parent));
  return base_->Prepare(key, parent, labels);
}

absl::StatusOr<std::vector<Mount>> ModelSnapshotter::View(const std::string& key,
                                                          const std::string& parent,
                                                          const Labels& labels) {
  RETURN_IF_ERROR(WaitForModelsBelow(parent));
  return base_->View(key, parent, labels);
}

absl::StatusOr<std::vector<Mount>> ModelSnapshotter::Mounts(const std::string& key) {
  if (auto content = ContentMounts(key)) return *std::move(content);
  ASSIGN_OR_RETURN(SnapshotRecord rec, base_->Record(key));
  RETURN_IF_ERROR(WaitForModelIds(rec.parent_ids));
  return base_->Mounts(key);
}

absl::Status ModelSnapshotter::Commit(const std::string& name, const std::string& key,
                                      const Labels& labels) {
  return base_->Commit(name, key, labels);
}

absl::Status ModelSnapshotter::Remove(const std::string& key) {
  ASSIGN_OR_RETURN(SnapshotRecord rec, base_->Record(key));
  RETURN_IF_ERROR(base_->Remove(key));
  std::string name;
  std::string model_ref;
  {
    absl::MutexLock lock(&mu_);
    auto sit = model_of_snapshot_.find(rec.id);
    if (sit == model_of_snapshot_.end()) return absl::OkStatus();
    name = sit->second;
    model_of_snapshot_.erase(sit);
    volume_of_snapshot_.erase(rec.id);
    auto it = models_.find(name);
    if (it == models_.end()) return absl::OkStatus();
    it->second.snapshot_ids.erase(rec.id);
    if (!it->second.snapshot_ids.empty()) return absl::OkStatus();
    model_ref = it->second.model_ref;
    models_.erase(it);
  }
  // The last snapshot of the model is gone: take it out of the tree and the cache's references.
  if (absl::Status st = fuse_->RemoveModel(name); !st.ok() && !absl::IsNotFound(st)) {
    Log(absl::StrCat("model ", name, ": ", st.ToString()));
  }
  if (!model_ref.empty()) pipeline_->Unregister(model_ref);
  if (!model_ref.empty() && content_reader_) content_reader_->RemoveModel(model_ref);
  (void)DeleteModelRecord(models_dir_, name);
  Log(absl::StrCat("model ", name, " removed with its last snapshot ", key));
  return absl::OkStatus();
}

absl::StatusOr<SnapshotInfo> ModelSnapshotter::Stat(const std::string& key) {
  return base_->Stat(key);
}

absl::StatusOr<SnapshotInfo> ModelSnapshotter::Update(const SnapshotInfo& info,
                                                      const std::vector<std::string>& paths) {
  return base_->Update(info, paths);
}

absl::Status ModelSnapshotter::Walk(const std::vector<std::string>& filters,
                                    const std::function<absl::Status(const SnapshotInfo&)>& fn) {
  return base_->Walk(filters, fn);
}

absl::StatusOr<Usage> ModelSnapshotter::GetUsage(const std::string& key) {
  return base_->GetUsage(key);
}

absl::Status ModelSnapshotter::Cleanup() {
  RETURN_IF_ERROR(base_->Cleanup());
  cache_->EnforceSizeLimit();
  return absl::OkStatus();
}

}  // namespace modelfs::snapshotter
