// Lazily mounted model layers over the overlay snapshotter (see model_snapshotter.h).
#include "snapshotter/model/model_snapshotter.h"

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
#include "host/model_host.h"

namespace modelfs::snapshotter {
namespace fs = std::filesystem;

ModelSnapshotter::ModelSnapshotter(ModelSnapshotterOptions options, ModelSnapshotterParts parts)
    : options_(std::move(options)),
      mnt_dir_(options_.root / "mnt"),
      lock_fd_(parts.root_lock_fd),
      clock_(parts.clock != nullptr ? parts.clock : Clock::Real()) {
  owned_content_store_ = std::move(parts.owned_content_store);
  content_store_ =
      parts.content_store != nullptr ? parts.content_store : owned_content_store_.get();
  content_reader_ = std::move(parts.content_reader);
  host_ = std::move(parts.host);
  base_ = std::move(parts.base);
}

void ModelSnapshotter::Log(const log::Event& event) const {
  if (options_.log) {
    options_.log(event);
  } else {
    log::WriteToStderr(event);
  }
}

void ModelSnapshotter::Log(const std::string& line) const { Log(log::Info("snapshotter", line)); }

namespace {

// What the host of a snapshotter with options `o` does for it: its prefetch, the models'
// records under <root>/models, and the check of a lazy image's tar header records logged.
ModelHostOptions HostOptions(const ModelSnapshotterOptions& o) {
  ModelHostOptions ho{o.prefetch, o.insecure_stream, o.root / "models"};
  // A lazy image's V nobody pinned: the model is served once its tar header records match
  // the layers; if they do not, nothing of it is served (every read fails).
  ho.on_records_checked = [sink = o.log](const std::string& model, const absl::Status& result) {
    const log::Event event =
        result.ok()
            ? log::Info("snapshotter", "volume image's tar header records match the layers")
                  .Field("model", model)
            : log::Error("snapshotter",
                         "volume image's tar header records refused; the model serves no byte")
                  .Field("model", model)
                  .Field("reason", result.message());
    if (sink) {
      sink(event);
    } else {
      log::WriteToStderr(event);
    }
  };
  return ho;
}

// The real collaborators of a snapshotter on options.root, in the order Open has always made
// them (the metadata store, containerd's content store, the host with its cache), each failing
// Open as before.
absl::Status BuildParts(const ModelSnapshotterOptions& o, ModelSnapshotterParts& parts) {
  ASSIGN_OR_RETURN(parts.base, OverlaySnapshotter::Open(o.root, o.overlay, parts.clock));
  if (o.content_store != nullptr) {
    parts.content_store = o.content_store;
  } else if (!o.containerd_address.empty()) {
    ASSIGN_OR_RETURN(parts.owned_content_store,
                     ConnectContentStore(o.containerd_address, parts.clock));
  }
  ContentStore* store =
      parts.content_store != nullptr ? parts.content_store : parts.owned_content_store.get();
  if (store != nullptr) {
    ContentStoreReaderOptions ro;
    ro.clock = parts.clock;
    parts.content_reader = std::make_unique<ContentStoreBlobReader>(store, ro);
  }
  ModelHostConfig hc;
  hc.options = HostOptions(o);
  hc.cache = o.cache;
  if (hc.cache.dir.empty()) hc.cache.dir = (o.root / "cache").string();
  hc.registry = o.registry;
  hc.preferred = parts.content_reader.get();
  ASSIGN_OR_RETURN(std::unique_ptr<ModelHost> host, ModelHost::Open(std::move(hc)));
  parts.host = std::move(host);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelSnapshotter>> ModelSnapshotter::Open(
    ModelSnapshotterOptions options) {
  if (options.root.empty()) return absl::InvalidArgumentError("snapshotter: empty root");
  const ModelSnapshotterOptions& o = options;
  std::error_code ec;
  fs::create_directories(o.root, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("snapshotter: create ", o.root.string(), ": ", ec.message()));
  }
  ModelSnapshotterParts parts;
  // One daemon per root: two would share the database and fight over <root>/mnt.
  const fs::path lock_path = o.root / "lock";
  parts.root_lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  absl::Status st;
  if (parts.root_lock_fd < 0 || ::flock(parts.root_lock_fd, LOCK_EX | LOCK_NB) != 0) {
    st = absl::FailedPreconditionError(absl::StrCat("snapshotter: ", o.root.string(),
                                                    " is in use by another modelfs-snapshotter (",
                                                    lock_path.string(), " is locked)"));
  } else {
    st = BuildParts(o, parts);
  }
  if (!st.ok()) {
    if (parts.root_lock_fd >= 0) ::close(parts.root_lock_fd);
    return st;
  }
  return Create(std::move(options), std::move(parts));
}

absl::StatusOr<std::unique_ptr<ModelSnapshotter>> ModelSnapshotter::Create(
    ModelSnapshotterOptions options, ModelSnapshotterParts parts) {
  // Made first, so that it owns (and closes) the root's lock whatever fails below.
  std::unique_ptr<ModelSnapshotter> s(new ModelSnapshotter(std::move(options), std::move(parts)));
  const ModelSnapshotterOptions& o = s->options_;
  if (o.root.empty()) return absl::InvalidArgumentError("snapshotter: empty root");
  if (!s->host_ || !s->base_) {
    return absl::InvalidArgumentError(
        "snapshotter: the model host and the overlay snapshotter are both required");
  }
  if ((s->content_store_ == nullptr) != (s->content_reader_ == nullptr)) {
    return absl::InvalidArgumentError(
        "snapshotter: a content store and its reader go together (one is missing)");
  }
  std::error_code ec;
  s->base_->set_lower_resolver([raw = s.get()](int64_t id) { return raw->ModelDirFor(id); });
  if (!o.policy.empty()) {
    ModelSnapshotter* raw = s.get();
    s->policy_gate_ = std::make_unique<PolicyGate>(
        o.policy, [raw](const std::string& registry) -> absl::StatusOr<SignatureStore*> {
          ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client, raw->host_->Client(registry));
          absl::MutexLock lock(&raw->mu_);
          std::unique_ptr<RegistrySignatureStore>& store = raw->signature_stores_[registry];
          // The host keeps the client as long as the snapshotter.
          if (!store) store = std::make_unique<RegistrySignatureStore>(client.get());
          return store.get();
        });
  }
  if (!o.require_equivalence.empty()) {
    ModelSnapshotter* raw = s.get();
    ASSIGN_OR_RETURN(s->attestation_gate_,
                     AttestationGate::Create(
                         o.require_equivalence, o.equivalence_keys,
                         [raw](const std::string& registry) -> absl::StatusOr<RegistryClient*> {
                           ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client,
                                            raw->host_->Client(registry));
                           // The host keeps the client as long as the snapshotter.
                           return client.get();
                         }));
  }

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
                       if (info.labels.contains(kLabelRemoteFiles)) {
                         absl::MutexLock lock(&s->mu_);
                         s->with_volume_files_.insert(rec->id);
                       }
                       if (info.labels.contains(kLabelImageTree)) {
                         absl::MutexLock lock(&s->mu_);
                         s->image_trees_.insert(rec->id);
                       }
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
  for (const std::string& name : s->host_->ListRecords()) {
    if (!used.count(name)) (void)s->host_->DeleteRecord(name);
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
  if (fuse_options.clock == nullptr) fuse_options.clock = s->clock_;
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
    absl::Status adopted = s->host_->Adopt(o.inherited_fuse_fd, s->mnt_dir_.string(), fuse_options);
    if (adopted.ok()) {
      s->Log(absl::StrCat("serving the inherited FUSE connection of ", s->mnt_dir_.string(), " (",
                          names.size(), " models)"));
    } else {
      // A connection that cannot be resumed must not keep the daemon down: mount afresh
      // (containers holding the old mount see errors, as without a store).
      s->Log(absl::StrCat("cannot resume the inherited FUSE connection (", adopted.ToString(),
                          "); mounting afresh"));
      ::close(o.inherited_fuse_fd);
      s->host_->LazyUnmount(s->mnt_dir_.string());
      fs::create_directories(s->mnt_dir_, ec);
      RETURN_IF_ERROR(s->host_->Mount(s->mnt_dir_.string(), fuse_options));
    }
  } else {
    fs::create_directories(s->mnt_dir_, ec);
    RETURN_IF_ERROR(s->host_->DetachStaleMount(s->mnt_dir_.string()));
    RETURN_IF_ERROR(s->host_->Mount(s->mnt_dir_.string(), fuse_options));
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
    ++changes_;
  }
  stopping_ = true;
  if (restorer_.joinable()) restorer_.join();
  absl::Status st;
  if (host_) st = host_->Unmount(keep_mount);
  return st;
}

std::optional<OverlaySnapshotter::LowerDir> ModelSnapshotter::ModelDirFor(int64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = model_of_snapshot_.find(id);
  if (it == model_of_snapshot_.end()) return std::nullopt;
  if (with_volume_files_.contains(id)) {
    // An image-compatible V: its `.modelfs/` above the model, as containerd would unpack it.
    return OverlaySnapshotter::LowerDir{
        absl::StrCat(base_->UpperPath(id).string(), ":", (mnt_dir_ / it->second).string())};
  }
  return OverlaySnapshotter::LowerDir{(mnt_dir_ / it->second).string(), image_trees_.contains(id)};
}

bool ModelSnapshotter::TimedOutWaitingForChange(absl::Time deadline) {
  const uint64_t seen = changes_;
  auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return changes_ != seen; };
  return !clock_->AwaitWithDeadline(mu_, absl::Condition(&changed), deadline);
}

absl::StatusOr<bool> ModelSnapshotter::BeginRegistration(const std::string& name,
                                                         const std::string& model_ref) {
  absl::MutexLock lock(&mu_);
  absl::Time deadline = clock_->Now() + options_.model_wait;
  while (true) {
    auto it = models_.find(name);
    if (it == models_.end() || it->second.state == ModelState::kFailed) break;
    if (it->second.state == ModelState::kReady) return false;
    if (shut_down_) return absl::UnavailableError("snapshotter is shutting down");
    if (TimedOutWaitingForChange(deadline)) {
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
  ++changes_;
  return st;
}

void ModelSnapshotter::RestoreModels(std::vector<std::string> names) {
  for (const std::string& name : names) {
    if (stopping_) return;
    absl::Status st;
    absl::StatusOr<ResolvedModel> rm = host_->LoadRecord(name);
    if (rm.ok()) {
      DescribeModel(name, *rm);
      // The model was in use before the restart: its prefetch goes on at once.
      st = RegisterModel(name, *rm, PrefetchStart::kAtOnce);
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
      ++changes_;
    }
    if (orphaned && st.ok()) host_->Discard(name, rm->model_descriptor.digest.str());
  }
}

bool ModelSnapshotter::WaitRestored(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  absl::Time deadline = clock_->Now() + timeout;
  auto loading = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [name, e] : models_) {
      if (e.state == ModelState::kLoading) return true;
    }
    return false;
  };
  while (loading()) {
    if (TimedOutWaitingForChange(deadline)) return !loading();
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
  absl::Time deadline = clock_->Now() + options_.model_wait;
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
      if (TimedOutWaitingForChange(deadline)) {
        return absl::DeadlineExceededError(
            absl::StrCat("model ", name, " is still being registered after a restart"));
      }
    }
  }
  lock.Release();
  // A container is about to use these models: their deferred prefetch starts now.
  for (const std::string& model_ref : used) host_->StartPrefetch(model_ref);
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

absl::StatusOr<std::vector<Mount>> ModelSnapshotter::Prepare(const std::string& key,
                                                             const std::string& parent,
                                                             const Labels& labels) {
  // No Evict between finding a model registered and committing the snapshot that holds it.
  absl::ReaderMutexLock evict_lock(&evict_mu_);
  auto target = labels.find(kLabelTargetRef);
  if (target != labels.end()) {
    absl::StatusOr<std::optional<VolumeLabels>> volume = ParseVolumeLabels(labels);
    if (!volume.ok()) {
      Log(absl::StrCat("snapshot ", key, ": malformed modelfs labels (", volume.status().ToString(),
                       "); unpacking it as an ordinary layer"));
      absl::MutexLock lock(&mu_);
      counts_.fallback++;
    } else if (!volume->has_value() && !options_.lazy_images.empty() &&
               !labels.contains(std::string(kLabelRole)) && !MissingCriLabel(labels)) {
      // Fails closed: with a policy, a listed image it refuses is refused here (unless the node
      // opted out), before anything else of it is asked for.
      if (absl::Status refused = CheckLazyImagePolicy(labels); !refused.ok()) {
        if (!options_.lazy_images_unpack_refused) {
          absl::MutexLock lock(&mu_);
          counts_.error++;
          return refused;
        }
        Log(log::Warn("snapshotter",
                      "image refused by policy; unpacking it (lazy_images_unpack_refused)")
                .Field("snapshot", key)
                .Field("reason", refused.message()));
      } else {
        // Counts its own answers (a model, or a lower layer unpacked here).
        absl::Status st = PrepareLazyImage(key, parent, target->second, labels);
        if (absl::IsAlreadyExists(st)) return st;
        // Never blocks the image: without a volume image (or on any error) it is unpacked.
        if (!absl::IsNotFound(st)) {
          Log(absl::StrCat("snapshot ", key, ": not served lazily (", st.ToString(),
                           "); unpacking it"));
        }
      }
    } else if (!volume->has_value() && labels.contains(std::string(kLabelRole))) {
      absl::Status st = PrepareRemoteLower(key, parent, target->second, labels);
      if (absl::IsAlreadyExists(st)) return st;
      // It holds only index files: unpacking it the ordinary way is always right.
      Log(absl::StrCat("snapshot ", key, ": lower layer of a volume image not answered as remote (",
                       st.ToString(), "); unpacking it"));
    } else if (volume->has_value()) {
      if (std::optional<std::string> missing = MissingCriLabel(labels);
          missing && base_->Stat(target->second).ok()) {
        // Nothing to bind the layer to a model with: what is there answers, as before.
        absl::MutexLock lock(&mu_);
        counts_.mounted++;
        return absl::AlreadyExistsError(
            absl::StrCat("target snapshot \"", target->second, "\" exists"));
      } else if (missing) {
        // A node configuration error (CRI's snapshot annotations off), named in the log: the
        // only case where the pointer layer is unpacked in place of the model.
        Log(absl::StrCat("snapshot ", key, ": model ", (*volume)->model.digest.str(),
                         " not mounted lazily (", *missing,
                         "); unpacking the volume layer instead"));
        absl::MutexLock lock(&mu_);
        counts_.fallback++;
      } else {
        absl::Status st = PrepareRemote(key, parent, target->second, **volume, labels);
        absl::MutexLock lock(&mu_);
        if (absl::IsAlreadyExists(st)) {
          counts_.mounted++;
          return st;
        }
        // Any other outcome fails the Prepare: unpacking the layer instead would hand the pod
        // its pointer files where it asked for a model. An unreachable model is kUnavailable,
        // which the kubelet's pull retries.
        counts_.error++;
        Log(log::Error("snapshotter", "model not mounted")
                .Field("snapshot", key)
                .Field("digest", (*volume)->model.digest.str())
                .Field("reason", st.ToString()));
        return st;
      }
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
  RETURN_IF_ERROR(CheckNotOnRemoteLower(key, parent));
  RETURN_IF_ERROR(WaitForModelsBelow(parent));
  return base_->Prepare(key, parent, labels);
}

absl::StatusOr<std::vector<Mount>> ModelSnapshotter::View(const std::string& key,
                                                          const std::string& parent,
                                                          const Labels& labels) {
  RETURN_IF_ERROR(CheckNotOnRemoteLower(key, parent));
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
  // Removing a model's last snapshot takes the model away: as an evict, it excludes the
  // Prepares under way, so that none of them falls between finding the model registered and
  // committing a snapshot of it (it finishes first and keeps the model, or registers it
  // again). Taken for every snapshot that holds a model (image GC removes those rarely), so
  // that two removes of a model's last two snapshots cannot both miss it.
  bool holds_model = false;
  {
    absl::MutexLock lock(&mu_);
    holds_model = model_of_snapshot_.contains(rec.id);
  }
  std::optional<absl::WriterMutexLock> evict_lock;
  if (holds_model) evict_lock.emplace(&evict_mu_);
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
    image_trees_.erase(rec.id);
    auto it = models_.find(name);
    if (it == models_.end()) return absl::OkStatus();
    it->second.snapshot_ids.erase(rec.id);
    // A prefetched model stays registered until `modelfs node evict`.
    if (!it->second.snapshot_ids.empty() || it->second.prefetched) return absl::OkStatus();
    model_ref = it->second.model_ref;
    models_.erase(it);
    origins_.erase(name);
  }
  // The last snapshot of the model is gone: take it out of the tree and the cache's references.
  if (absl::Status st = host_->Remove(name, model_ref); !st.ok() && !absl::IsNotFound(st)) {
    Log(absl::StrCat("model ", name, ": ", st.ToString()));
  }
  if (!model_ref.empty() && content_reader_) content_reader_->RemoveModel(model_ref);
  (void)host_->DeleteRecord(name);
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
  host_->EnforceCacheLimit();
  return absl::OkStatus();
}

}  // namespace modelfs::snapshotter
