// ModelSnapshotter, the remote Prepare of a volume layer: V's binding to the snapshot, the hosts
// V may send the node to, the policy, and registering M from its registry (see
// model_snapshotter.h).
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/model/model_pipeline.h"
#include "core/status/status_macros.h"
#include "snapshotter/model/model_snapshotter.h"
#include "snapshotter/policy/model_hosts.h"

namespace modelfs::snapshotter {
namespace {

std::string ModelName(const Digest& model) {
  return absl::StrCat("sha256-", std::string(model.hex()));
}

// The codes of a registry that did not answer as asked (down, slow, refusing the node's
// credentials, busy): a retry may succeed. Verification failures, malformed images and the
// daemon's own refusals are not among them.
bool UnreachableCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnknown:
      return true;
    default:
      return false;
  }
}

// `st`, from a step that asked `registry`, as the Prepare's answer: kUnavailable naming the
// registry and the reason when the registry could not be reached, so that containerd fails the
// pull and the kubelet retries it; otherwise `st` itself.
absl::Status AsUnreachable(const absl::Status& st, const ImageReference& volume,
                           const Digest& model, const std::string& registry) {
  if (st.ok() || !UnreachableCode(st.code())) return st;
  return absl::UnavailableError(absl::StrCat(
      "volume image ", volume.String(), ": model ", model.str(), " cannot be reached on registry ",
      registry, " (", absl::StatusCodeToString(st.code()), ": ", st.message(),
      "); the pull fails so that it is retried, rather than unpacking the volume's pointer "
      "files in place of the model"));
}

// Writes the files of V's `.modelfs/` (A over its index layers, all verified) under `dir`.
absl::Status WriteVolumeFiles(const std::filesystem::path& dir, const ResolvedModel& rm) {
  VolumeFiles files;
  for (const std::string& layer : rm.volume_index_layer_tars) {
    RETURN_IF_ERROR(AddVolumeLayerFiles(layer, files));
  }
  RETURN_IF_ERROR(AddVolumeLayerFiles(rm.volume_layer_tar, files));
  for (const auto& [path, bytes] : files) {
    // IndexTarBytes refused unsafe paths: each is relative and canonical.
    const std::filesystem::path p = dir / path;
    std::error_code ec;
    std::filesystem::create_directories(p.parent_path(), ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("mkdir ", p.parent_path().string(), ": ", ec.message()));
    }
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("write ", p.string(), " failed"));
    std::filesystem::permissions(p, std::filesystem::perms(0644), ec);
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<std::string> ModelSnapshotter::MissingCriLabel(const Labels& labels) {
  if (!labels.contains(kLabelCriImageRef)) {
    return absl::StrCat("no ", kLabelCriImageRef,
                        " label (CRI pulls with disable_snapshot_annotations = false pass it)");
  }
  if (!labels.contains(kLabelCriManifestDigest)) {
    return absl::StrCat("no ", kLabelCriManifestDigest,
                        " label: the layer cannot be bound to a verified volume manifest");
  }
  return std::nullopt;
}

absl::Status ModelSnapshotter::RegisterModel(const std::string& name, const ResolvedModel& rm,
                                             PrefetchStart prefetch) {
  ASSIGN_OR_RETURN(LoadedModel loaded, host_->Register(name, rm, prefetch));
  Log(absl::StrCat("model ", rm.model_descriptor.digest.str(), " from ", rm.ref.String(),
                   " registered at ", (mnt_dir_ / name).string(), " (", loaded.files.size(),
                   " files, ", loaded.verification, " verification)"));
  return absl::OkStatus();
}

absl::Status ModelSnapshotter::EnsureModel(const std::string& name, const ResolvedModel& rm) {
  ASSIGN_OR_RETURN(bool mine, BeginRegistration(name, rm.model_descriptor.digest.str()));
  DescribeModel(name, rm);
  if (!mine) return absl::OkStatus();
  absl::Status st = host_->SaveRecord(name, rm);
  // containerd is pulling: prefetch waits until a container uses the model (WaitForModelIds).
  if (st.ok()) st = RegisterModel(name, rm, PrefetchStart::kOnStartPrefetch);
  return FinishRegistration(name, std::move(st));
}

absl::Status ModelSnapshotter::CheckPolicy(const ImageReference& image, const Digest& digest,
                                           const std::string& what) {
  RETURN_IF_ERROR(CheckSignaturePolicy(image, digest, what));
  if (!attestation_gate_) return absl::OkStatus();
  AttestationGate::Outcome outcome = attestation_gate_->Check(image, digest);
  if (!outcome.status.ok()) {
    Log(log::Error("policy", absl::StrCat(what, " refused: no accepted equivalence attestation"))
            .Field("digest", digest.str())
            .Field("registry", image.registry())
            .Field("image", image.String())
            .Field("reason", "equivalence")
            .Field("detail", outcome.status.message()));
    return absl::PermissionDeniedError(absl::StrCat(what, " ", outcome.status.message()));
  }
  return absl::OkStatus();
}

absl::Status ModelSnapshotter::CheckSignaturePolicy(const ImageReference& image,
                                                    const Digest& digest, const std::string& what) {
  if (!policy_gate_) return absl::OkStatus();
  PolicyGate::Outcome outcome = policy_gate_->Check(image, digest);
  if (!outcome.status.ok()) {
    Log(log::Error("policy", absl::StrCat(what, " refused by policy"))
            .Field("digest", digest.str())
            .Field("registry", image.registry())
            .Field("image", image.String())
            .Field("reason", outcome.reason)
            .Field("detail", outcome.status.message()));
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
  return CheckSignaturePolicy(m, rm.model_descriptor.digest, "model");
}

std::map<std::string, uint64_t> ModelSnapshotter::policy_refusals() const {
  return policy_gate_ ? policy_gate_->refusals() : std::map<std::string, uint64_t>{};
}

std::map<std::string, uint64_t> ModelSnapshotter::equivalence_refusals() const {
  return attestation_gate_ ? attestation_gate_->refusals() : std::map<std::string, uint64_t>{};
}

uint64_t ModelSnapshotter::policy_evaluations() const {
  return policy_gate_ ? policy_gate_->evaluations() : 0;
}

absl::Status ModelSnapshotter::CheckModelHost(const ImageReference& volume, const Digest& model,
                                              const std::string& registry,
                                              const std::string& repository) const {
  return modelfs::snapshotter::CheckModelHost(options_.model_hosts, volume.String(),
                                              {volume.registry(), volume.repository()}, model.str(),
                                              {registry, repository});
}

absl::StatusOr<int> ModelSnapshotter::CountChildren(const std::string& key) {
  int n = 0;
  RETURN_IF_ERROR(base_->Walk({absl::StrCat("parent==", key)}, [&n](const SnapshotInfo&) {
    ++n;
    return absl::OkStatus();
  }));
  return n;
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
  // A snapshot of the target that no model backs was unpacked the ordinary way (a fallback,
  // by an earlier version or without the CRI labels): it holds the pointer files, never the
  // model, so it does not answer this Prepare. It is replaced once the model is registered.
  bool replace_unpacked = false;
  if (absl::StatusOr<SnapshotInfo> existing = base_->Stat(target); existing.ok()) {
    if (existing->labels.contains(kLabelRemoteModel)) {
      return absl::AlreadyExistsError(absl::StrCat("target snapshot \"", target, "\" exists"));
    }
    ASSIGN_OR_RETURN(int users, CountChildren(target));
    if (users > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "snapshot \"", target, "\" holds volume layer ", volume.model.digest.str(),
          "'s pointer files, unpacked in place of the model by an earlier Prepare, and ", users,
          " snapshot(s) use it; remove the containers that use it (or the image, `crictl rmi`) "
          "so that the model can be mounted in its place"));
    }
    replace_unpacked = true;
  }
  if (std::optional<std::string> missing = MissingCriLabel(labels)) {
    return absl::FailedPreconditionError(*missing);
  }
  auto image = labels.find(kLabelCriImageRef);
  // The binding is checked against V's manifest fetched by the digest containerd pinned, never
  // by a tag that may have moved since containerd resolved it.
  auto pinned = labels.find(kLabelCriManifestDigest);
  ASSIGN_OR_RETURN(ImageReference named, ImageReference::Parse(image->second));
  ASSIGN_OR_RETURN(Digest pinned_digest, Digest::Parse(pinned->second));
  // The policy judges the reference the pod named (its scope, and the identity a signature
  // must match) at the digest containerd resolved it to, before anything of V or M is read.
  RETURN_IF_ERROR(CheckPolicy(named, pinned_digest, "volume image"));
  ASSIGN_OR_RETURN(ImageReference ref,
                   ImageReference::Parse(absl::StrCat(named.Name(), "@", pinned->second)));
  const Digest& model = volume.model.digest;
  absl::StatusOr<std::shared_ptr<RegistryClient>> client = host_->Client(ref.registry());
  if (!client.ok()) return AsUnreachable(client.status(), ref, model, ref.registry());
  // ResolveModel asks for another registry only when V's record names M there, and before it
  // fetches anything of M: the one place to hold V to the hosts the admin allowed.
  std::string asking = ref.registry();  // the registry the resolution is talking to
  absl::Status host_refusal;
  absl::StatusOr<ResolvedModel> resolved = ResolveModel(
      **client, ref,
      [&](const std::string& registry) -> absl::StatusOr<std::shared_ptr<RegistryClient>> {
        asking = registry;
        return host_->Client(registry);
      },
      [&](const std::string& registry, const std::string& repository) {
        host_refusal = CheckModelHost(ref, model, registry, repository);
        return host_refusal;
      });
  if (!host_refusal.ok()) return host_refusal;
  if (!resolved.ok()) {
    NoteRegistryError(asking, resolved.status());
    return AsUnreachable(resolved.status(), ref, model, asking);
  }
  ResolvedModel& rm = *resolved;
  if (absl::Status st = CheckBinding(**client, rm, parent, target); !st.ok()) {
    return AsUnreachable(st, ref, model, ref.registry());
  }
  RETURN_IF_ERROR(CheckModelLocation(rm));
  if (rm.model_descriptor.digest != volume.model.digest) {
    return absl::DataLossError(absl::StrCat(
        "volume image ", ref.String(), " points to model ", rm.model_descriptor.digest.str(),
        ", but its layer annotation says ", volume.model.digest.str()));
  }
  const std::string name = ModelName(rm.model_descriptor.digest);
  // M's layers are read from M's registry, which V's record may name apart from V's.
  absl::StatusOr<std::shared_ptr<RegistryClient>> model_client = host_->Client(rm.registry);
  if (!model_client.ok()) return AsUnreachable(model_client.status(), ref, model, rm.registry);
  if (absl::Status st = EnsureModel(name, rm); !st.ok()) {
    NoteRegistryError(rm.registry, st);
    return AsUnreachable(st, ref, model, rm.registry);
  }

  if (replace_unpacked) {
    // Fails (kFailedPrecondition) if a container took the unpacked layer meanwhile.
    RETURN_IF_ERROR(base_->Remove(target));
    Log(absl::StrCat("snapshot ", target, ": the volume layer unpacked in place of model ",
                     model.str(), " was removed; the model is mounted lazily in its place"));
  }
  // CheckBinding parsed V's manifest already: this cannot fail.
  ASSIGN_OR_RETURN(Manifest v, ParseManifest(rm.volume_manifest_json));
  // The view must be what containerd would unpack: M's files and V's `.modelfs/`.
  RETURN_IF_ERROR(CommitModelSnapshot(key, parent, target, labels, name, {named, pinned_digest},
                                      IsImageCompatibleVolume(v) ? &rm : nullptr,
                                      /*count_mounted=*/false));
  Log(absl::StrCat("snapshot ", target, " for ", ref.String(), " is model ", name));
  return absl::AlreadyExistsError(
      absl::StrCat("target snapshot \"", target, "\" exists (model mounted lazily)"));
}

absl::Status ModelSnapshotter::CommitModelSnapshot(
    const std::string& key, const std::string& parent, const std::string& target,
    const Labels& labels, const std::string& name, const VolumeOrigin& origin,
    const ResolvedModel* volume_files, bool count_mounted, bool image_tree) {
  RETURN_IF_ERROR(base_->Prepare(key, parent, labels).status());
  Labels committed = labels;
  committed[kLabelRemoteModel] = name;
  if (image_tree) committed[kLabelImageTree] = "true";
  if (volume_files != nullptr) {
    absl::Status st = absl::OkStatus();
    absl::StatusOr<SnapshotRecord> active = base_->Record(key);
    if (!active.ok()) st = active.status();
    if (st.ok()) st = WriteVolumeFiles(base_->UpperPath(active->id), *volume_files);
    if (!st.ok()) {
      (void)base_->Remove(key);
      return st;
    }
    committed[kLabelRemoteFiles] = "true";
  }
  if (absl::Status st = base_->Commit(target, key, committed); !st.ok()) {
    (void)base_->Remove(key);
    return st;
  }
  ASSIGN_OR_RETURN(SnapshotRecord rec, base_->Record(target));
  absl::MutexLock lock(&mu_);
  model_of_snapshot_[rec.id] = name;
  models_[name].snapshot_ids.insert(rec.id);
  volume_of_snapshot_[rec.id] = origin;
  if (volume_files != nullptr) with_volume_files_.insert(rec.id);
  if (image_tree) image_trees_.insert(rec.id);
  if (count_mounted) counts_.mounted++;
  return absl::OkStatus();
}

absl::Status ModelSnapshotter::PrepareRemoteLower(const std::string& key, const std::string& parent,
                                                  const std::string& target, const Labels& labels) {
  if (base_->Stat(target).ok()) {
    return absl::AlreadyExistsError(absl::StrCat("target snapshot \"", target, "\" exists"));
  }
  if (std::optional<std::string> missing = MissingCriLabel(labels)) {
    return absl::FailedPreconditionError(*missing);
  }
  ASSIGN_OR_RETURN(ImageReference named,
                   ImageReference::Parse(labels.find(kLabelCriImageRef)->second));
  const std::string& pinned = labels.find(kLabelCriManifestDigest)->second;
  ASSIGN_OR_RETURN(Digest pinned_digest, Digest::Parse(pinned));
  RETURN_IF_ERROR(CheckPolicy(named, pinned_digest, "volume image"));
  ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client, host_->Client(named.registry()));
  ASSIGN_OR_RETURN(ManifestResult top, client->GetManifest(named.repository(), pinned));
  if (top.digest != pinned_digest) {
    return absl::DataLossError(absl::StrCat("volume image ", named.String(), " has digest ",
                                            top.digest.str(), ", not the pinned ", pinned));
  }
  ASSIGN_OR_RETURN(Manifest v, ParseManifest(top.bytes));
  if (!IsVolumeImageManifest(v)) {
    return absl::FailedPreconditionError(
        absl::StrCat(named.String(), "@", pinned, " is not a volume image"));
  }
  ASSIGN_OR_RETURN(std::string config,
                   FetchVerifiedBlob(*client, named.repository(), v.config, 1u << 20));
  ASSIGN_OR_RETURN(std::vector<Digest> diff_ids, ParseImageConfigDiffIds(config));
  ASSIGN_OR_RETURN(const size_t i, CheckVolumeLowerBinding(v, diff_ids, parent, target));
  RETURN_IF_ERROR(base_->Prepare(key, parent, labels).status());
  Labels committed = labels;
  committed[kLabelRemoteLower] = pinned;
  if (absl::Status st = base_->Commit(target, key, committed); !st.ok()) {
    (void)base_->Remove(key);
    return st;
  }
  Log(absl::StrCat("snapshot ", target, " for ", named.String(), "@", pinned, ": layer ", i, " (",
                   v.layers[i].digest.str(), ") answered as remote"));
  return absl::AlreadyExistsError(
      absl::StrCat("target snapshot \"", target, "\" exists (a lower layer of a volume image)"));
}

absl::StatusOr<std::optional<Descriptor>> ModelSnapshotter::LazyVolumeFor(
    RegistryClient& client, const ImageReference& image, const Digest& digest) {
  {
    absl::MutexLock lock(&mu_);
    auto it = lazy_volumes_.find(digest);
    if (it != lazy_volumes_.end()) return it->second;
  }
  // The referrers API, else the fallback tag "sha256-<hex>" (`modelfs convert IMAGE` writes
  // both where it can), filtered to volume images.
  ASSIGN_OR_RETURN(
      std::string index_json,
      client.GetReferrers(image.repository(), digest, std::string(kVolumeImageArtifactType)));
  ASSIGN_OR_RETURN(Index index, ParseIndex(index_json));
  std::optional<Descriptor> found;
  for (const Descriptor& d : index.manifests) {
    if (d.artifact_type != kVolumeImageArtifactType) continue;
    // The same answer whatever order the registry lists them in.
    if (!found || d.digest.str() < found->digest.str()) found = d;
  }
  absl::MutexLock lock(&mu_);
  lazy_volumes_[digest] = found;
  return found;
}

bool ModelSnapshotter::LazyImagesList(const ImageReference& image) const {
  for (const std::string& entry : options_.lazy_images) {
    if (ModelHostAllows(entry, image.registry(), image.repository())) return true;
  }
  return false;
}

absl::Status ModelSnapshotter::CheckLazyImagePolicy(const Labels& labels) {
  if (!policy_gate_) return absl::OkStatus();
  absl::StatusOr<ImageReference> named =
      ImageReference::Parse(labels.find(kLabelCriImageRef)->second);
  // Not an image lazy_images could serve: PrepareLazyImage says why, and it is unpacked.
  if (!named.ok() || !LazyImagesList(*named)) return absl::OkStatus();
  const std::string& pinned = labels.find(kLabelCriManifestDigest)->second;
  absl::StatusOr<Digest> pinned_digest = Digest::Parse(pinned);
  if (!pinned_digest.ok()) {
    return absl::PermissionDeniedError(absl::StrCat("image ", named->String(), " pinned to \"",
                                                    pinned,
                                                    "\", not a digest the policy can judge"));
  }
  // Kept acceptances make every layer after the first cost no registry request.
  return CheckPolicy(*named, *pinned_digest, "image");
}

absl::Status ModelSnapshotter::PrepareLazyImage(const std::string& key, const std::string& parent,
                                                const std::string& target, const Labels& labels) {
  ASSIGN_OR_RETURN(ImageReference named,
                   ImageReference::Parse(labels.find(kLabelCriImageRef)->second));
  if (!LazyImagesList(named)) return absl::NotFoundError("not in lazy_images");
  const std::string& pinned = labels.find(kLabelCriManifestDigest)->second;
  ASSIGN_OR_RETURN(Digest pinned_digest, Digest::Parse(pinned));
  ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client, host_->Client(named.registry()));
  ASSIGN_OR_RETURN(std::optional<Descriptor> volume, LazyVolumeFor(*client, named, pinned_digest));
  if (!volume) return absl::NotFoundError("no volume image among its referrers");
  // The top layer is answered as the model; the layers below it (a base image other images
  // share) are unpacked by the snapshotter itself, exactly as containerd would, so that
  // containerd fetches no blob of the image (PrepareLazyLower).
  ASSIGN_OR_RETURN(ManifestResult top, client->GetManifest(named.repository(), pinned));
  if (top.digest != pinned_digest) {
    return absl::DataLossError(absl::StrCat("image ", named.String(), " has digest ",
                                            top.digest.str(), ", not the pinned ", pinned));
  }
  ASSIGN_OR_RETURN(Manifest image, ParseManifest(top.bytes));
  ASSIGN_OR_RETURN(std::string config,
                   FetchVerifiedBlob(*client, named.repository(), image.config, 1u << 20));
  ASSIGN_OR_RETURN(std::vector<Digest> diff_ids, ParseImageConfigDiffIds(config));
  if (diff_ids.empty() || diff_ids.size() != image.layers.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("image ", named.String(), ": its config lists ", diff_ids.size(),
                     " diff_ids for ", image.layers.size(), " layers"));
  }
  size_t index = diff_ids.size();
  for (size_t i = 0; i < diff_ids.size() && index == diff_ids.size(); ++i) {
    if (ChainIdOf({diff_ids.begin(), diff_ids.begin() + static_cast<ptrdiff_t>(i + 1)}).str() ==
        target) {
      index = i;
    }
  }
  if (index == diff_ids.size()) return absl::NotFoundError("not a layer of the image");
  std::vector<Digest> below(diff_ids.begin(), diff_ids.begin() + static_cast<ptrdiff_t>(index));
  const std::string want_parent = below.empty() ? "" : ChainIdOf(below).str();
  if (!(want_parent.empty()
            ? parent.empty()
            : (parent == want_parent || absl::EndsWith(parent, "/" + want_parent)))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "parent snapshot \"", parent, "\" is not the chain below the image's layer ", index));
  }
  // The policy judged the image the pod named before this was called (CheckLazyImagePolicy).
  if (index + 1 < diff_ids.size()) {
    return PrepareLazyLower(key, parent, target, labels,
                            {named, pinned_digest, image, diff_ids, index, volume->digest},
                            *client);
  }
  ASSIGN_OR_RETURN(ImageReference vref,
                   ImageReference::Parse(absl::StrCat(named.Name(), "@", volume->digest.str())));
  absl::Status host_refusal;
  ASSIGN_OR_RETURN(
      ResolvedModel rm,
      ResolveModel(
          *client, vref,
          [&](const std::string& registry) -> absl::StatusOr<std::shared_ptr<RegistryClient>> {
            return host_->Client(registry);
          },
          [&](const std::string& registry, const std::string& repository) {
            host_refusal = CheckModelHost(vref, pinned_digest, registry, repository);
            return host_refusal;
          }));
  RETURN_IF_ERROR(host_refusal);
  ASSIGN_OR_RETURN(Manifest v, ParseManifest(rm.volume_manifest_json));
  if (!v.subject || v.subject->digest != pinned_digest) {
    return absl::FailedPreconditionError(absl::StrCat(
        "volume image ", vref.String(), " is not a referrer of ", named.String(), "@", pinned));
  }
  // Only V of the image itself (what `modelfs convert IMAGE` writes) stands for it: the model's
  // tree is then the image's merged tree, every layer applied with its whiteouts, verified
  // against the image's own layers. A V of another model (a ModelPack M) would put M's bytes
  // where the image's top layer is, checked against nothing the pod pinned, and anyone who can
  // push a referrer to the repository could do that: such a V is not followed (unpacked as
  // ever). Snapshots on the top mount the tree alone: the lower layers' directories under it
  // would bring back what the top layer deletes.
  if (!rm.image || rm.model_descriptor.digest != pinned_digest || !rm.path_prefix.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "volume image ", vref.String(), " shows ", rm.model_descriptor.digest.str(),
        rm.path_prefix.empty() ? "" : absl::StrCat(" under ", rm.path_prefix), ", not the tree of ",
        named.String(), "@", pinned, " itself (write one with `modelfs convert IMAGE`)"));
  }
  // Nobody pinned this V: its records of the layers' tar headers could name the image's files
  // otherwise than the layers do, which no chunk hash would catch. The tree is built from them
  // (the mount is ready without reading a header from the layers), but nothing of the model is
  // served until every byte the records were read for matches the layer's verified bytes
  // (core/model/tar_records_check.h); the model's record keeps that across a restart.
  rm.tar_headers_unpinned = true;
  const std::string name = ModelName(rm.model_descriptor.digest);
  RETURN_IF_ERROR(host_->Client(rm.registry).status());
  RETURN_IF_ERROR(EnsureModel(name, rm));
  RETURN_IF_ERROR(CommitModelSnapshot(key, parent, target, labels, name, {named, pinned_digest},
                                      /*volume_files=*/nullptr, /*count_mounted=*/true,
                                      /*image_tree=*/true));
  Log(absl::StrCat("snapshot ", target, " for image ", named.String(), "@", pinned, " is model ",
                   name, " (volume image ", volume->digest.str(), ")", ", the image's whole tree",
                   rm.tar_headers.empty() ? ""
                                          : ", listed from its tar header records (checked "
                                            "against the layers before a byte is served)"));
  return absl::AlreadyExistsError(
      absl::StrCat("target snapshot \"", target, "\" exists (image served lazily)"));
}

absl::Status ModelSnapshotter::CheckNotOnRemoteLower(const std::string& key,
                                                     const std::string& parent) {
  if (parent.empty()) return absl::OkStatus();
  absl::StatusOr<SnapshotInfo> info = base_->Stat(parent);
  if (!info.ok()) return absl::OkStatus();  // the overlay snapshotter reports it
  auto it = info->labels.find(kLabelRemoteLower);
  if (it == info->labels.end()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "snapshot ", key, ": parent \"", parent, "\" is a lower layer of volume image ", it->second,
      ", answered without its files; only that image's next layer can be prepared on it"));
}

}  // namespace modelfs::snapshotter
