#include "core/resolve/model_ref.h"

#include <sys/utsname.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/oci/manifest.h"
#include "core/oci/media_types.h"
#include "core/status/status_macros.h"

namespace modelfs {

std::string HostArchitecture() {
  struct utsname u;
  if (uname(&u) != 0) return "";
  const std::string m = u.machine;
  if (m == "x86_64") return "amd64";
  if (m == "aarch64" || m == "arm64") return "arm64";
  if (m == "ppc64le") return "ppc64le";
  if (m == "s390x") return "s390x";
  if (m == "riscv64") return "riscv64";
  if (m == "i386" || m == "i686") return "386";
  return m;
}

absl::StatusOr<Descriptor> SelectPlatformManifest(const Index& index,
                                                  const std::string& architecture,
                                                  const std::string& what) {
  std::vector<std::string> offered;
  const Descriptor* unlabelled = nullptr;
  int manifests = 0;
  for (const Descriptor& d : index.manifests) {
    // BuildKit's attestations (platform unknown/unknown) are not images to run.
    const std::string* ref_type = d.Annotation("vnd.docker.reference.type");
    if (ref_type != nullptr && *ref_type == "attestation-manifest") continue;
    if (IsIndexMediaType(d.media_type)) continue;  // nested indexes are not followed
    ++manifests;
    if (!d.platform) {
      unlabelled = &d;
      continue;
    }
    offered.push_back(absl::StrCat(d.platform->os, "/", d.platform->architecture,
                                   d.platform->variant.empty() ? "" : "/", d.platform->variant));
    if (d.platform->os == "linux" && d.platform->architecture == architecture) return d;
  }
  // An index of one manifest without a platform (an artifact wrapped in an index) is that one.
  if (manifests == 1 && unlabelled != nullptr) return *unlabelled;
  return absl::NotFoundError(absl::StrCat(
      what, " is an image index with no manifest for linux/", architecture, " (it has ",
      offered.empty() ? std::string("none with a platform") : absl::StrJoin(offered, ", "),
      "); give the digest of the manifest to use"));
}

absl::StatusOr<ModelFetcher*> ModelFetcher::OnRegistry(const std::string& registry) {
  return absl::FailedPreconditionError(
      absl::StrCat("the model lives on registry ", registry, ", which this fetcher cannot reach"));
}

absl::StatusOr<ModelFetcher*> RegistryModelFetcher::OnRegistry(const std::string& registry) {
  if (registry == client_.registry()) return this;
  auto it = fetchers_.find(registry);
  if (it != fetchers_.end()) return it->second.get();
  if (!connect_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the model lives on registry ", registry, ", and no client for it was given"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> other, connect_(registry));
  others_[registry] = other;
  auto fetcher = std::make_unique<RegistryModelFetcher>(*other, connect_);
  ModelFetcher* raw = fetcher.get();
  fetchers_[registry] = std::move(fetcher);
  return raw;
}

absl::StatusOr<std::string> FetchVerifiedBlob(RegistryClient& client, const std::string& repo,
                                              const Descriptor& d, uint64_t max_bytes) {
  if (d.size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("blob ", d.digest.str(), " is ", d.size,
                                                   " bytes; refusing more than ", max_bytes));
  }
  std::string out;
  out.reserve(d.size);  // one allocation: a 13 MB index layer grown by doubling copied 20 MB more
  Sha256 h;
  RETURN_IF_ERROR(client.GetBlob(repo, d.digest, [&](std::string_view chunk) -> absl::Status {
    if (out.size() + chunk.size() > d.size) {
      return absl::DataLossError(absl::StrCat("blob ", d.digest.str(), " in ", repo,
                                              " is longer than its descriptor's ", d.size,
                                              " bytes"));
    }
    out.append(chunk);
    h.Update(chunk);
    return absl::OkStatus();
  }));
  Digest got = h.Finish();
  if (got != d.digest || out.size() != d.size) {
    return absl::DataLossError(absl::StrCat("blob ", d.digest.str(), " in ", repo,
                                            " failed verification: got ", got.str(), ", ",
                                            out.size(), " bytes"));
  }
  return out;
}

absl::StatusOr<ManifestResult> RegistryModelFetcher::GetManifest(const std::string& repository,
                                                                 const std::string& reference) {
  return client_.GetManifest(repository, reference);
}

absl::StatusOr<std::string> RegistryModelFetcher::GetBlob(const std::string& repository,
                                                          const Descriptor& d, uint64_t max_bytes) {
  return FetchVerifiedBlob(client_, repository, d, max_bytes);
}

absl::StatusOr<ResolvedModel> ResolveModel(RegistryClient& client, const ImageReference& ref,
                                           const RegistryConnector& connect,
                                           const ModelLocationCheck& check_location) {
  RegistryModelFetcher fetcher(client, connect);
  return ResolveModel(fetcher, ref, check_location);
}

absl::StatusOr<ResolvedModel> ResolveModel(ModelFetcher& client, const ImageReference& ref,
                                           const ModelLocationCheck& check_location) {
  ResolvedModel r;
  r.ref = ref;
  r.registry = ref.registry();
  r.repository = ref.repository();
  // Where M's manifest, config and layers come from (V's record may name another registry).
  ModelFetcher* model_fetcher = &client;
  ASSIGN_OR_RETURN(ManifestResult top,
                   client.GetManifest(ref.repository(), ref.ManifestReference()));
  if (ref.digest() && top.digest != *ref.digest()) {
    return absl::DataLossError(absl::StrCat("manifest for ", ref.String(), " has digest ",
                                            top.digest.str(), ", not the pinned one"));
  }
  if (IsIndexMediaType(top.media_type)) {
    // A multi-platform image (a modelcar built for several architectures): the manifest for
    // this node's platform, by the digest the (pinned or tagged) index gives, as containerd
    // picks it.
    absl::StatusOr<Index> index = ParseIndex(top.bytes);
    if (!index.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("image index ", ref.String(), ": ", index.status().message()));
    }
    ASSIGN_OR_RETURN(Descriptor chosen,
                     SelectPlatformManifest(*index, HostArchitecture(), ref.String()));
    ASSIGN_OR_RETURN(ManifestResult platform,
                     client.GetManifest(ref.repository(), chosen.digest.str()));
    if (platform.digest != chosen.digest) {
      return absl::DataLossError(absl::StrCat("manifest ", platform.digest.str(), " of ",
                                              ref.String(), " is not the index's ",
                                              chosen.digest.str()));
    }
    if (IsIndexMediaType(platform.media_type)) {
      return absl::InvalidArgumentError(
          absl::StrCat(ref.String(), ": the index names another index, ", chosen.digest.str()));
    }
    if (platform.media_type.empty()) platform.media_type = chosen.media_type;
    top = std::move(platform);
  }
  ASSIGN_OR_RETURN(Manifest m, ParseManifest(top.bytes));
  Descriptor top_desc;
  top_desc.media_type =
      top.media_type.empty() ? std::string(kOciManifestMediaType) : top.media_type;
  top_desc.digest = top.digest;
  top_desc.size = top.bytes.size();
  top_desc.artifact_type = std::string(EffectiveArtifactType(m));

  if (IsVolumeImageManifest(m)) {
    r.volume_descriptor = top_desc;
    ASSIGN_OR_RETURN(size_t a_index, VolumeLayerIndex(m));
    const Descriptor& a = m.layers[a_index];
    ASSIGN_OR_RETURN(std::string tar, client.GetBlob(ref.repository(), a, kMaxVolumeLayerBytes));
    // Seek windows (revision 2) are used when V lies beside M, where the cache's fetches go:
    // then the seek-fallback index layers (the inline seek indexes, windows and all, for
    // readers without windows support) are not fetched.
    bool use_windows = false;
    {
      VolumeFiles a_files;
      RETURN_IF_ERROR(AddVolumeLayerFiles(tar, a_files));
      auto mj = a_files.find(std::string(kVolumeModelJsonPath));
      if (mj != a_files.end()) {
        ASSIGN_OR_RETURN(VolumeModelInfo info, ParseVolumeModelJson(mj->second));
        const bool beside = info.repository.empty() ||
                            info.repository == absl::StrCat(ref.registry(), "/", ref.repository());
        for (const VolumeLayerRecord& l : info.layers) {
          use_windows = use_windows || (beside && l.seek_index && l.seek_index->windows);
        }
      }
    }
    // Index layers (docs/volume-image.md): uncompressed, so each diff ID V's config names is
    // the digest its bytes were checked against.
    ASSIGN_OR_RETURN(std::vector<size_t> index_layers, VolumeIndexLayerIndexes(m));
    if (!index_layers.empty()) {
      ASSIGN_OR_RETURN(r.volume_config_json, client.GetBlob(ref.repository(), m.config, 1u << 20));
      ASSIGN_OR_RETURN(std::vector<Digest> diff_ids, ParseImageConfigDiffIds(r.volume_config_json));
      if (diff_ids.size() != m.layers.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("volume image ", ref.String(), ": its config lists ", diff_ids.size(),
                         " diff_ids for ", m.layers.size(), " layers"));
      }
      for (size_t i : index_layers) {
        const Descriptor& l = m.layers[i];
        const std::string* fallback = l.Annotation(kAnnotationSeekFallback);
        if (use_windows && fallback != nullptr && *fallback == "true") continue;
        if (diff_ids[i] != l.digest) {
          return absl::DataLossError(absl::StrCat("volume image ", ref.String(), ": index layer ",
                                                  l.digest.str(), " has diff ID ",
                                                  diff_ids[i].str(), " in its config"));
        }
        // A little over kMaxIndexLayerBytes: the tar's headers and directories.
        ASSIGN_OR_RETURN(std::string bytes,
                         client.GetBlob(ref.repository(), l, kMaxIndexLayerBytes + (1u << 20)));
        r.volume_index_layer_tars.push_back(std::move(bytes));
      }
    }
    ASSIGN_OR_RETURN(VolumeLayerContents contents,
                     ParseVolumeLayers(tar, r.volume_index_layer_tars));
    // M lives where the record says ("host[:port]/path", written by push and convert), on this
    // registry or another; a record without a repository means V's own.
    if (!contents.model.repository.empty()) {
      absl::StatusOr<ImageReference> where = ImageReference::Parse(
          absl::StrCat(contents.model.repository, "@", contents.model.manifest.digest.str()));
      if (!where.ok() || !where->tag().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("volume image ", ref.String(), " names model repository \"",
                         contents.model.repository, "\", which is not registry/repository"));
      }
      r.registry = where->registry();
      r.repository = where->repository();
      if (check_location && (r.registry != ref.registry() || r.repository != ref.repository())) {
        RETURN_IF_ERROR(check_location(r.registry, r.repository));
      }
      if (r.registry != ref.registry()) {
        ASSIGN_OR_RETURN(model_fetcher, client.OnRegistry(r.registry));
      }
    }
    ASSIGN_OR_RETURN(ManifestResult mm, model_fetcher->GetManifest(
                                            r.repository, contents.model.manifest.digest.str()));
    if (mm.digest != contents.model.manifest.digest) {
      return absl::DataLossError(absl::StrCat("model manifest ", mm.digest.str(),
                                              " does not match the volume's record ",
                                              contents.model.manifest.digest.str()));
    }
    ASSIGN_OR_RETURN(r.model, ParseManifest(mm.bytes));
    r.model_manifest_json = mm.bytes;
    r.model_descriptor = contents.model.manifest;
    RETURN_IF_ERROR(CheckVolumeMatchesModel(contents.model, r.model_descriptor, r.model));
    r.chunk_indexes = std::move(contents.chunk_indexes);
    for (const VolumeLayerRecord& l : contents.model.layers) {
      if (l.tensor_index) r.tensor_index_refs.emplace(l.digest, *l.tensor_index);
      auto t = contents.tar_tensor_indexes.find(l.digest);
      if (!l.tar_tensor_indexes || t == contents.tar_tensor_indexes.end()) continue;
      // ParseVolumeLayers read them in model.json's order.
      for (size_t i = 0; i < l.tar_tensor_indexes->size() && i < t->second.size(); ++i) {
        r.tar_tensor_index_refs.emplace(std::make_pair(l.digest, t->second[i].index.file_offset),
                                        (*l.tar_tensor_indexes)[i]);
      }
    }
    if (use_windows) {
      for (const VolumeLayerRecord& l : contents.model.layers) {
        auto t = contents.seek_windows.find(l.digest);
        if (!l.seek_index || !l.seek_index->windows || t == contents.seek_windows.end() ||
            r.seek_windows.count(l.digest)) {
          continue;
        }
        const VolumeSeekWindowsRef& w = *l.seek_index->windows;
        const Descriptor* holder = nullptr;
        for (const Descriptor& d : m.layers) {
          const std::string* role = d.Annotation(kLabelRole);
          if (d.digest == w.layer && role != nullptr && *role == kVolumeRoleWindows) holder = &d;
        }
        if (holder == nullptr || w.offset > holder->size ||
            t->second.file_size() > holder->size - w.offset) {
          return absl::InvalidArgumentError(
              absl::StrCat("volume image ", ref.String(), ": the seek windows of ", l.digest.str(),
                           " are in ", w.layer.str(), " at ", w.offset,
                           ", which is no windows layer of V "
                           "holding ",
                           t->second.file_size(), " bytes there"));
        }
        ResolvedModel::SeekWindowsLocation loc;
        loc.table = std::make_shared<const SeekWindowsTable>(std::move(t->second));
        loc.layer = w.layer;
        loc.offset = w.offset;
        r.seek_indexes[l.digest] = std::shared_ptr<const SeekIndex>(loc.table, &loc.table->index);
        r.seek_windows.emplace(l.digest, std::move(loc));
      }
    }
    for (auto& [layer, seek] : contents.seek_indexes) {
      if (r.seek_windows.count(layer)) continue;
      r.seek_indexes.emplace(layer, std::make_shared<const SeekIndex>(std::move(seek)));
    }
    for (auto& [layer, headers] : contents.tar_headers) {
      r.tar_headers.emplace(layer, std::make_shared<const TarHeaders>(std::move(headers)));
    }
    r.path_prefix = contents.model.path_prefix;
    r.volume_manifest_json = std::move(top.bytes);
    r.volume_layer_tar = std::move(tar);
  } else {
    r.model = std::move(m);
    r.model_manifest_json = std::move(top.bytes);
    r.model_descriptor = top_desc;
  }
  if (IsContainerImageManifest(r.model)) {
    r.image = true;
    for (size_t i = 0; i < r.model.layers.size(); ++i) {
      const Descriptor& d = r.model.layers[i];
      if (d.size > kMaxModelLayerBytes) {
        return absl::InvalidArgumentError(absl::StrCat("image ", r.model_descriptor.digest.str(),
                                                       ": layer ", d.digest.str(), " declares ",
                                                       d.size, " bytes"));
      }
      ModelLayer l;
      l.descriptor = d;
      l.kind = LayerKind::kImage;
      l.encoding = ClassifyLayerMediaType(d.media_type)->encoding;
      r.layers.push_back(std::move(l));
    }
    ASSIGN_OR_RETURN(r.config_json,
                     model_fetcher->GetBlob(r.repository, r.model.config, 16u << 20));
    auto ids = ParseImageConfigDiffIds(r.config_json);
    if (!ids.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("image config ", r.model.config.digest.str(), ": ", ids.status().message()));
    }
    if (ids->size() != r.layers.size()) {
      return absl::InvalidArgumentError(absl::StrCat("image ", r.model_descriptor.digest.str(),
                                                     ": its config lists ", ids->size(),
                                                     " diff_ids for ", r.layers.size(), " layers"));
    }
    r.image_diff_ids = *std::move(ids);
    return r;
  }
  if (IsStateManifest(r.model)) {
    // A state of a model (`modelfs state push`): its files mount like a model's, and its config
    // must name the model its subject names.
    if (r.model.config.media_type != kStateConfigMediaType) {
      return absl::InvalidArgumentError(absl::StrCat(ref.String(), ": state config media type \"",
                                                     r.model.config.media_type, "\" is not ",
                                                     std::string(kStateConfigMediaType)));
    }
    ASSIGN_OR_RETURN(r.config_json,
                     model_fetcher->GetBlob(r.repository, r.model.config, kMaxStateConfigBytes));
    ASSIGN_OR_RETURN(StateConfig state, ParseStateConfig(r.config_json));
    RETURN_IF_ERROR(CheckStateMatchesSubject(r.model, state));
    r.state = std::move(state);
  } else if (!IsModelManifest(r.model)) {
    return absl::InvalidArgumentError(absl::StrCat(
        ref.String(), " is not a ModelPack model (artifactType ", std::string(kModelArtifactType),
        "), a Docker model artifact, a container image, a modelfs state or a modelfs volume "
        "image"));
  }
  ASSIGN_OR_RETURN(r.layers, ResolveModelLayers(r.model));
  if (IsModelConfigMediaType(r.model.config.media_type)) {
    ASSIGN_OR_RETURN(r.config_json,
                     model_fetcher->GetBlob(r.repository, r.model.config, 16u << 20));
    auto cfg = ParseModelPackConfig(r.config_json);
    if (cfg.ok()) r.config = *std::move(cfg);
  }
  return r;
}

bool IsContainerImageManifest(const Manifest& m) {
  if (m.config.media_type != kOciConfigMediaType && m.config.media_type != kDockerConfigMediaType) {
    return false;
  }
  if (IsModelManifest(m) || IsVolumeImageManifest(m)) return false;
  for (const Descriptor& d : m.layers) {
    auto info = ClassifyLayerMediaType(d.media_type);
    if (!info || info->kind != LayerKind::kImage) return false;
  }
  return true;
}

absl::StatusOr<std::optional<Digest>> LayerDiffId(const ResolvedModel& model, size_t i) {
  const std::vector<Digest>* image_ids = model.image ? &model.image_diff_ids : nullptr;
  if (image_ids == nullptr && (!model.config || model.config->modelfs.diff_ids.empty())) {
    return std::nullopt;
  }
  const std::vector<Digest>& ids = image_ids ? *image_ids : model.config->modelfs.diff_ids;
  if (ids.size() != model.layers.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", model.model_descriptor.digest.str(), ": its config lists ",
                     ids.size(), " diffIds for ", model.layers.size(), " layers"));
  }
  if (i >= ids.size() || ids[i] == model.layers[i].descriptor.digest) return std::nullopt;
  return ids[i];
}

}  // namespace modelfs
