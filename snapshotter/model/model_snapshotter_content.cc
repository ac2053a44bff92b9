// ModelSnapshotter, the image-volume case of a plain ModelPack artifact M: containerd 2.1 has
// downloaded M into its content store, and modelfs serves the model from there (see
// model_snapshotter.h). The snapshot is an ordinary active snapshot with no parent, labelled
// with the model's directory and namespace; its mount is a read-only bind of that directory
// under <root>/mnt, which containerd mounts at the volume's host path and unmounts when the pod
// goes. The model leaves the tree with the last snapshot that uses it (Remove).
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/oci/media_types.h"
#include "core/status/status_macros.h"
#include "snapshotter/content/content_store_blob_source.h"
#include "snapshotter/content/content_store_model.h"
#include "snapshotter/model/model_snapshotter.h"

namespace modelfs::snapshotter {

namespace {

// How long a Prepare waits for containerd's socket to answer before it fails.
constexpr absl::Duration kContentStoreConnectTimeout = absl::Seconds(1);

std::vector<Mount> ModelBindMount(const std::filesystem::path& dir) {
  return {Mount{"bind", dir.string(), "", {"ro", "rbind"}}};
}

}  // namespace

absl::Status ModelSnapshotter::EnsureContentModel(const std::string& name, const ResolvedModel& rm,
                                                  const std::string& ns) {
  ASSIGN_OR_RETURN(bool mine, BeginRegistration(name, rm.model_descriptor.digest.str()));
  DescribeModel(name, rm);
  if (!mine) return absl::OkStatus();
  const std::string model_ref = rm.model_descriptor.digest.str();
  if (HasCompressedLayer(rm))
    return FinishRegistration(name, RegisterDecodedContentModel(name, rm, ns));
  absl::Status st;
  for (const ModelLayer& l : rm.layers) {
    st = content_reader_->AddLayer(model_ref, ns, l.descriptor.digest, l.descriptor.size);
    if (!st.ok()) break;
  }
  // Read in place: tar layers are verified whole here (their headers are read), raw layers on
  // first use.
  absl::StatusOr<LoadedModel> loaded =
      st.ok() ? host_->RegisterInPlace(name, rm) : absl::StatusOr<LoadedModel>(st);
  st = loaded.status();
  if (!st.ok()) content_reader_->RemoveModel(model_ref);
  if (st.ok()) {
    Log(absl::StrCat("model ", model_ref, " from containerd's content store (namespace \"", ns,
                     "\") registered at ", (mnt_dir_ / name).string(), " (", loaded->files.size(),
                     " files, whole-layer verification)"));
  }
  return FinishRegistration(name, std::move(st));
}

bool ModelSnapshotter::HasCompressedLayer(const ResolvedModel& rm) {
  for (const ModelLayer& l : rm.layers) {
    if (IsCompressedEncoding(l.encoding)) return true;
  }
  return false;
}

absl::Status ModelSnapshotter::RegisterDecodedContentModel(const std::string& name,
                                                           const ResolvedModel& rm,
                                                           const std::string& ns) {
  // A compressed tar layer cannot be served from containerd's copy in place: the cache reads
  // every layer of the model from the content store instead (each checked against its digest;
  // the compressed ones decompressed and checked against the config's diffIds before the
  // model is served), as it reads them from a registry for V.
  ASSIGN_OR_RETURN(
      LoadedModel loaded,
      host_->RegisterFrom(name, rm, std::make_shared<ContentStoreBlobSource>(content_store_, ns),
                          PrefetchStart::kAtOnce));
  Log(absl::StrCat(
      "model ", rm.model_descriptor.digest.str(), " from containerd's content store (namespace \"",
      ns, "\") registered at ", (mnt_dir_ / name).string(), " (", loaded.files.size(), " files, ",
      loaded.verification, " verification; its compressed layers decoded into the cache)"));
  return absl::OkStatus();
}

absl::Status ModelSnapshotter::CheckContentModelPolicy(const ImageVolumeKey& volume) {
  if (!policy_gate_) return absl::OkStatus();
  // The Prepare names M by digest only; the references the pod may have used are the names
  // containerd's image store gives that manifest (what CRI pulled). The policy judges M under
  // each of them, and all must accept. (The content's distribution-source labels are no
  // substitute: containerd records the host there without its port.)
  ASSIGN_OR_RETURN(std::vector<std::string> names,
                   content_store_->ImageNames(volume.ns, volume.image));
  std::vector<std::string> judged;
  for (const std::string& name : names) {
    absl::StatusOr<ImageReference> ref = ImageReference::Parse(name);
    if (!ref.ok()) continue;  // CRI's "sha256:<id>" records name no registry
    RETURN_IF_ERROR(CheckPolicy(*ref, volume.image, "model"));
    judged.push_back(ref->String());
  }
  if (judged.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("model ", volume.image.str(), " from containerd's content store refused by ",
                     "policy ", options_.policy, ": containerd's image store (namespace \"",
                     volume.ns, "\") names no image reference for it, so no policy scope applies"));
  }
  Log(absl::StrCat("model ", volume.image.str(), " from containerd's content store: the policy ",
                   "accepts it as ", absl::StrJoin(judged, ", ")));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Mount>> ModelSnapshotter::PrepareFromContentStore(
    const std::string& key, const ImageVolumeKey& volume, const Labels& labels) {
  if (content_reader_ == nullptr) {
    return absl::FailedPreconditionError(
        "containerd_address is not set, so containerd's content store cannot be read");
  }
  // Fail this Prepare now, naming the address, rather than wait out a read's deadline and leave
  // the pod an empty volume (kUnavailable: Prepare returns it, see model_snapshotter.cc).
  if (absl::Status reach = content_store_->CheckReachable(kContentStoreConnectTimeout);
      !reach.ok()) {
    return absl::UnavailableError(absl::StrCat("image volume ", key, ": ", reach.message()));
  }
  ASSIGN_OR_RETURN(ResolvedModel rm, ResolveContentStoreModel(*content_store_, volume, clock_));
  RETURN_IF_ERROR(CheckContentModelPolicy(volume));
  const std::string name = absl::StrCat("sha256-", std::string(rm.model_descriptor.digest.hex()));
  RETURN_IF_ERROR(EnsureContentModel(name, rm, volume.ns));

  Labels with = labels;
  with[kLabelContentModel] = name;
  with[kLabelContentNamespace] = volume.ns;
  absl::StatusOr<std::vector<Mount>> made = base_->Prepare(key, "", with);
  absl::StatusOr<SnapshotRecord> rec =
      made.ok() ? base_->Record(key) : absl::StatusOr<SnapshotRecord>(made.status());
  if (!rec.ok()) {
    // Not kept: take the model back out unless another snapshot uses it.
    bool drop = false;
    {
      absl::MutexLock lock(&mu_);
      auto it = models_.find(name);
      if (it != models_.end() && it->second.snapshot_ids.empty()) {
        models_.erase(it);
        drop = true;
      }
    }
    if (drop) {
      host_->Discard(name, "");
      content_reader_->RemoveModel(rm.model_descriptor.digest.str());
    }
    // The caller then makes the ordinary snapshot, which reports the same error (an existing
    // key is kAlreadyExists, as containerd expects).
    return rec.status();
  }
  {
    absl::MutexLock lock(&mu_);
    model_of_snapshot_[rec->id] = name;
    models_[name].snapshot_ids.insert(rec->id);
  }
  Log(absl::StrCat("image volume ", key, " is model ", rm.model_descriptor.digest.str(),
                   " from containerd's content store"));
  return ModelBindMount(mnt_dir_ / name);
}

absl::Status ModelSnapshotter::RestoreContentSnapshot(const std::string& key, int64_t id,
                                                      const std::string& name,
                                                      const std::string& ns) {
  if (content_reader_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("snapshot ", key, " holds model ", name,
                     " from containerd's content store, and containerd_address is not set"));
  }
  std::optional<ImageVolumeKey> volume = ParseImageVolumeKey(key);
  if (!volume || volume->ns != ns ||
      name != absl::StrCat("sha256-", std::string(volume->image.hex()))) {
    return absl::DataLossError(absl::StrCat("snapshot ", key, ": its labels (model ", name,
                                            ", namespace \"", ns, "\") do not match its key"));
  }
  ASSIGN_OR_RETURN(ResolvedModel rm, ResolveContentStoreModel(*content_store_, *volume, clock_));
  RETURN_IF_ERROR(EnsureContentModel(name, rm, ns));
  absl::MutexLock lock(&mu_);
  model_of_snapshot_[id] = name;
  models_[name].snapshot_ids.insert(id);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ModelSnapshotter::ContentSnapshot>>
ModelSnapshotter::ListContentSnapshots() {
  std::vector<ContentSnapshot> out;
  RETURN_IF_ERROR(base_->Walk({absl::StrCat("labels.\"", kLabelContentModel, "\"")},
                              [&](const SnapshotInfo& info) -> absl::Status {
                                auto model = info.labels.find(kLabelContentModel);
                                auto ns = info.labels.find(kLabelContentNamespace);
                                if (model == info.labels.end() || ns == info.labels.end()) {
                                  return absl::OkStatus();
                                }
                                absl::StatusOr<SnapshotRecord> rec = base_->Record(info.name);
                                if (rec.ok()) {
                                  out.push_back({info.name, rec->id, model->second, ns->second});
                                }
                                return absl::OkStatus();
                              }));
  return out;
}

void ModelSnapshotter::RestoreContentSnapshots(const std::vector<ContentSnapshot>& snapshots) {
  for (const ContentSnapshot& c : snapshots) {
    if (stopping_) return;
    absl::Status st = RestoreContentSnapshot(c.key, c.id, c.name, c.ns);
    if (!st.ok()) {
      Log(absl::StrCat("image volume ", c.key, ": model ", c.name,
                       " could not be registered again from containerd's content store: ",
                       st.ToString(), " (the next Mounts tries again)"));
    }
  }
}

std::optional<absl::StatusOr<std::vector<Mount>>> ModelSnapshotter::ContentMounts(
    const std::string& key) {
  if (!ParseImageVolumeKey(key)) return std::nullopt;
  absl::StatusOr<SnapshotInfo> info = base_->Stat(key);
  if (!info.ok()) return std::nullopt;  // the overlay snapshotter reports it
  auto model = info->labels.find(kLabelContentModel);
  auto ns = info->labels.find(kLabelContentNamespace);
  if (model == info->labels.end() || ns == info->labels.end()) return std::nullopt;
  const std::string name = model->second;
  if (!host_->HasModel(name)) {
    // After a restart whose background registration has not got here yet (or failed).
    absl::StatusOr<SnapshotRecord> rec = base_->Record(key);
    absl::Status st =
        rec.ok() ? RestoreContentSnapshot(key, rec->id, name, ns->second) : rec.status();
    if (!st.ok()) return absl::StatusOr<std::vector<Mount>>(st);
  }
  return absl::StatusOr<std::vector<Mount>>(ModelBindMount(mnt_dir_ / name));
}

}  // namespace modelfs::snapshotter
