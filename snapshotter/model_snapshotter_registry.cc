// ModelSnapshotter, the remote Prepare of a volume layer: V's binding to the snapshot, the hosts
// V may send the node to, the policy, and registering M from its registry (see
// model_snapshotter.h).
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/model/model_pipeline.h"
#include "core/status/status_macros.h"
#include "snapshotter/model_records.h"
#include "snapshotter/model_snapshotter.h"

namespace modelfs::snapshotter {
namespace {

std::string ModelName(const Digest& model) {
  return absl::StrCat("sha256-", std::string(model.hex()));
}

}  // namespace

absl::StatusOr<std::shared_ptr<RegistryClient>> ModelSnapshotter::ClientFor(
    const std::string& registry) {
  {
    absl::MutexLock lock(&mu_);
    auto it = clients_.find(registry);
    if (it != clients_.end()) return it->second;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<RegistryClient> made, connect_registry_(registry));
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

absl::Status ModelSnapshotter::EnsureModel(const std::string& name, const ResolvedModel& rm,
                                           std::shared_ptr<RegistryClient> client) {
  ASSIGN_OR_RETURN(bool mine, BeginRegistration(name, rm.model_descriptor.digest.str()));
  if (!mine) return absl::OkStatus();
  absl::Status st = SaveModelRecord(models_dir_, name, rm);
  // containerd is pulling: prefetch waits until a container uses the model (WaitForModelIds).
  if (st.ok()) st = RegisterModel(name, rm, std::move(client), PrefetchStart::kOnStartPrefetch);
  return FinishRegistration(name, std::move(st));
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

}  // namespace modelfs::snapshotter
