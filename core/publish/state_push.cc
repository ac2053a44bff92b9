#include "core/publish/state_push.h"

#include <unistd.h>

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/oci/chunk_index.h"
#include "core/oci/media_types.h"
#include "core/oci/volume_image.h"
#include "core/publish/blob_upload.h"
#include "core/publish/push_inputs.h"
#include "core/status/status_macros.h"

namespace modelfs {

using publish_internal::Fd;
using publish_internal::OpenForReading;
using publish_internal::PushedBlobsToJson;
using publish_internal::PutManifestChecked;
using publish_internal::Uploader;

absl::StatusOr<StatePushResult> PushState(RegistryClient& client, const ResolvedModel& model,
                                          const StatePushOptions& o) {
  if (model.state) {
    return absl::InvalidArgumentError(
        absl::StrCat(model.ref.String(), " is a state (of model ", model.state->model.digest.str(),
                     "), not a model: give the model a state belongs to"));
  }
  StateConfig config;
  config.name = o.name;
  config.format = o.format;
  config.tokens = o.tokens;
  config.precision = o.precision;
  config.model.media_type = model.model_descriptor.media_type;
  config.model.digest = model.model_descriptor.digest;
  config.model.size = model.model_descriptor.size;
  const std::string config_json = SerializeStateConfig(config);
  // The writer's checks are the reader's: what push writes, list and mount accept.
  RETURN_IF_ERROR(ParseStateConfig(config_json).status());
  const std::string tag = o.tag.empty() ? absl::StrCat("state-", o.name) : o.tag;

  ASSIGN_OR_RETURN(std::vector<publish_internal::InputFile> inputs,
                   publish_internal::CollectInputs(o.inputs));
  std::vector<uint64_t> sizes;
  for (const auto& f : inputs) {
    ASSIGN_OR_RETURN(Fd fd, OpenForReading(f.path));
    sizes.push_back(static_cast<uint64_t>(lseek(fd.get(), 0, SEEK_END)));
  }
  ASSIGN_OR_RETURN(const uint64_t chunk_size,
                   ChunkSizeForLayers(sizes, ChunkDigestAlgorithm::kBlake3));
  std::vector<StateFile> files;
  std::vector<ChunkIndex> indexes;
  for (const auto& f : inputs) {
    ASSIGN_OR_RETURN(ChunkIndex idx, IndexFile(f.path, chunk_size, ChunkDigestAlgorithm::kBlake3,
                                               f.rel, o.progress));
    files.push_back(StateFile{f.rel, idx.blob_digest, idx.blob_size});
    indexes.push_back(std::move(idx));
  }
  ASSIGN_OR_RETURN(Manifest s, BuildStateManifest(config_json, model.model_descriptor, files));

  StatePushResult result;
  result.repository = absl::StrCat(model.registry, "/", model.repository);
  result.model = model.model_descriptor;
  result.config = config;
  const std::string& repo = model.repository;
  Uploader up(client, repo, result);
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSIGN_OR_RETURN(Fd fd, OpenForReading(inputs[i].path));
    RETURN_IF_ERROR(up.Upload(inputs[i].rel, s.layers[i], BlobReadAtFd(fd.get())));
  }
  RETURN_IF_ERROR(up.UploadBytes("state config", s.config, config_json));
  const std::string s_json = SerializeManifest(s);
  result.state = DescribeBlob(kOciManifestMediaType, s_json);
  result.state.artifact_type = std::string(kStateArtifactType);
  result.state.annotations = s.annotations;
  RETURN_IF_ERROR(PutManifestChecked(client, repo, tag, s_json, result.state.digest, "state"));
  result.state_tag = tag;

  // VS: a volume image whose "model" is S, so the snapshotter and `modelfs mount` serve the
  // state's files lazily, chunk-verified, exactly as a model's.
  VolumeImageInput vin;
  vin.model_manifest = result.state;
  vin.model_manifest.annotations.clear();
  vin.model = s;
  vin.repository = result.repository;
  vin.chunk_indexes = std::move(indexes);
  ASSIGN_OR_RETURN(VolumeImage v, BuildVolumeImage(vin));
  RETURN_IF_ERROR(up.UploadBytes("volume layer", v.layer_descriptor, v.layer));
  RETURN_IF_ERROR(up.UploadBytes("volume config", v.config_descriptor, v.config));
  result.volume_tag = tag + "-volume";
  RETURN_IF_ERROR(PutManifestChecked(client, repo, result.volume_tag, v.manifest_json,
                                     v.manifest_descriptor.digest, "state volume"));
  result.volume = v.manifest_descriptor;

  // A registry with the referrers API lists S under M (and VS under S) by their subjects;
  // without it, the fallback tags say so (merged with what they already list).
  ASSIGN_OR_RETURN(const bool api, client.HasReferrersApi(repo, model.model_descriptor.digest));
  result.referrers = api ? "api" : "tag";
  if (!api) {
    RETURN_IF_ERROR(client.PutReferrersFallback(repo, model.model_descriptor.digest,
                                                SerializeDescriptor(result.state)));
    RETURN_IF_ERROR(
        client.PutReferrersFallback(repo, result.state.digest, SerializeDescriptor(result.volume)));
  }
  return result;
}

absl::StatusOr<std::vector<StateListing>> ListStates(RegistryClient& client,
                                                     const ResolvedModel& model) {
  if (model.state) {
    return absl::InvalidArgumentError(absl::StrCat(model.ref.String(), " is a state (of model ",
                                                   model.state->model.digest.str(),
                                                   "), not a model"));
  }
  const std::string& repo = model.repository;
  const Digest& m = model.model_descriptor.digest;
  ASSIGN_OR_RETURN(std::string index_json,
                   client.GetReferrers(repo, m, std::string(kStateArtifactType)));
  ASSIGN_OR_RETURN(Index index, ParseIndex(index_json));
  std::vector<StateListing> out;
  for (const Descriptor& d : index.manifests) {
    if (!IsManifestMediaType(d.media_type)) continue;
    ASSIGN_OR_RETURN(ManifestResult got, client.GetManifest(repo, d.digest.str()));
    if (got.digest != d.digest) {
      return absl::DataLossError(absl::StrCat("state manifest ", d.digest.str(), " in ", repo,
                                              " has digest ", got.digest.str()));
    }
    ASSIGN_OR_RETURN(Manifest s, ParseManifest(got.bytes));
    // A listing is a hint; only what S itself says counts.
    if (!IsStateManifest(s) || !s.subject || s.subject->digest != m) continue;
    if (s.config.media_type != kStateConfigMediaType) continue;
    ASSIGN_OR_RETURN(std::string config_json,
                     FetchVerifiedBlob(client, repo, s.config, kMaxStateConfigBytes));
    absl::StatusOr<StateConfig> config = ParseStateConfig(config_json);
    if (!config.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("state ", d.digest.str(), ": ", config.status().message()));
    }
    RETURN_IF_ERROR(CheckStateMatchesSubject(s, *config));
    StateListing l;
    l.state = d;
    l.state.size = got.bytes.size();
    l.config = *std::move(config);
    ASSIGN_OR_RETURN(std::vector<ModelLayer> layers, ResolveModelLayers(s));
    for (const ModelLayer& layer : layers) {
      l.files.push_back(StateFile{layer.path, layer.descriptor.digest, layer.descriptor.size});
    }
    ASSIGN_OR_RETURN(std::string volumes_json,
                     client.GetReferrers(repo, d.digest, std::string(kVolumeImageArtifactType)));
    ASSIGN_OR_RETURN(Index volumes, ParseIndex(volumes_json));
    if (!volumes.manifests.empty()) l.volume = volumes.manifests.front();
    out.push_back(std::move(l));
  }
  std::sort(out.begin(), out.end(), [](const StateListing& a, const StateListing& b) {
    if (a.config.name != b.config.name) return a.config.name < b.config.name;
    return a.state.digest.str() < b.state.digest.str();
  });
  return out;
}

namespace {

nlohmann::json ConfigJson(const StateConfig& c) {
  return {
      {"name", c.name},
      {"format", c.format},
      {"tokens", c.tokens ? nlohmann::json(*c.tokens) : nlohmann::json(nullptr)},
      {"precision", c.precision.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.precision)}};
}

}  // namespace

nlohmann::json StatePushResultToJson(const StatePushResult& r) {
  nlohmann::json j = ConfigJson(r.config);
  j["repository"] = r.repository;
  j["model"] = {{"digest", r.model.digest.str()},
                {"reference", absl::StrCat(r.repository, "@", r.model.digest.str())}};
  j["state"] = {{"digest", r.state.digest.str()},
                {"size", r.state.size},
                {"tag", r.state_tag},
                {"reference", absl::StrCat(r.repository, "@", r.state.digest.str())}};
  j["volume"] = {{"digest", r.volume.digest.str()},
                 {"size", r.volume.size},
                 {"tag", r.volume_tag},
                 {"reference", absl::StrCat(r.repository, "@", r.volume.digest.str())}};
  j["referrers"] = r.referrers;
  j["blobs"] = PushedBlobsToJson(r.blobs);
  j["uploaded"] = r.uploaded;
  j["present"] = r.present;
  return j;
}

nlohmann::json StateListingToJson(const StateListing& s, const std::string& repository) {
  nlohmann::json files = nlohmann::json::array();
  uint64_t bytes = 0;
  for (const StateFile& f : s.files) {
    files.push_back({{"path", f.path}, {"digest", f.digest.str()}, {"size", f.size}});
    bytes += f.size;
  }
  nlohmann::json j = ConfigJson(s.config);
  j["digest"] = s.state.digest.str();
  j["reference"] = absl::StrCat(repository, "@", s.state.digest.str());
  j["files"] = files;
  j["bytes"] = bytes;
  j["volume"] = s.volume ? nlohmann::json(absl::StrCat(repository, "@", s.volume->digest.str()))
                         : nlohmann::json(nullptr);
  return j;
}

}  // namespace modelfs
