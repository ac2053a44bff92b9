// What the snapshotter checks of V before it answers for one of V's layers: the Prepare labels,
// the shape of V's manifest (which layer is A, which are index layers), the chain IDs that bind
// a snapshot to A or to a lower layer, and model.json against the verified M.
#include "core/oci/volume_image.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/oci/media_types.h"
#include "core/oci/oci_json.h"
#include "core/status/status_macros.h"

namespace modelfs {

using oci_json::AV;
using oci_json::Json;

std::map<std::string, std::string> MakeVolumeLabels(const Descriptor& model_manifest,
                                                    std::string_view repository) {
  std::map<std::string, std::string> labels;
  labels[std::string(kLabelModel)] = model_manifest.digest.str();
  labels[std::string(kLabelModelSize)] = std::to_string(model_manifest.size);
  labels[std::string(kLabelModelMediaType)] = model_manifest.media_type;
  if (!repository.empty()) labels[std::string(kLabelRepository)] = std::string(repository);
  labels[std::string(kLabelProfile)] = std::string(kVolumeProfileV1);
  return labels;
}

absl::StatusOr<std::optional<VolumeLabels>> ParseVolumeLabels(
    const std::map<std::string, std::string>& labels) {
  auto get = [&](std::string_view key) -> const std::string* {
    auto it = labels.find(std::string(key));
    return it == labels.end() ? nullptr : &it->second;
  };
  const std::string* model = get(kLabelModel);
  if (model == nullptr) return std::optional<VolumeLabels>();
  VolumeLabels out;
  absl::StatusOr<Digest> d = Digest::Parse(*model);
  if (!d.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("label ", AV(kLabelModel), ": ", d.status().message()));
  }
  out.model.digest = *d;
  if (const std::string* size = get(kLabelModelSize)) {
    if (!absl::SimpleAtoi(*size, &out.model.size) || size->empty() || (*size)[0] == '+' ||
        (*size)[0] == '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", AV(kLabelModelSize), ": '", *size, "' is not a size"));
    }
  }
  if (const std::string* mt = get(kLabelModelMediaType)) out.model.media_type = *mt;
  if (const std::string* repo = get(kLabelRepository)) out.repository = *repo;
  const std::string* profile = get(kLabelProfile);
  out.profile = profile ? *profile : std::string(kVolumeProfileV1);
  if (out.profile != kVolumeProfileV1) {
    return absl::InvalidArgumentError(absl::StrCat("label ", AV(kLabelProfile), ": '", out.profile,
                                                   "' is not a known profile (v1)"));
  }
  return std::optional<VolumeLabels>(std::move(out));
}

bool IsVolumeImageManifest(const Manifest& v) {
  if (v.artifact_type == kVolumeImageArtifactType) return true;
  return v.layers.size() == 1 && v.layers[0].Annotation(kLabelModel) != nullptr;
}

bool IsImageCompatibleVolume(const Manifest& v) {
  for (const Descriptor& l : v.layers) {
    const std::string* role = l.Annotation(kLabelRole);
    if (role != nullptr && *role == kVolumeRoleModel) return true;
  }
  return false;
}

absl::StatusOr<size_t> VolumeLayerIndex(const Manifest& v) {
  std::optional<size_t> found;
  for (size_t i = 0; i < v.layers.size(); ++i) {
    if (v.layers[i].Annotation(kLabelModel) == nullptr) continue;
    if (found) {
      return absl::InvalidArgumentError(absl::StrCat("volume image has two layers annotated ",
                                                     AV(kLabelModel), " (", *found, " and ", i,
                                                     ")"));
    }
    found = i;
  }
  if (!found) {
    return absl::InvalidArgumentError(
        absl::StrCat("volume image has no layer annotated ", AV(kLabelModel)));
  }
  return *found;
}

absl::StatusOr<std::vector<size_t>> VolumeIndexLayerIndexes(const Manifest& v) {
  ASSIGN_OR_RETURN(const size_t a, VolumeLayerIndex(v));
  std::vector<size_t> out;
  for (size_t i = 0; i < v.layers.size(); ++i) {
    const std::string* role = v.layers[i].Annotation(kLabelRole);
    if (role == nullptr || *role != kVolumeRoleIndex) continue;
    if (i > a) {
      return absl::InvalidArgumentError(absl::StrCat("volume image: index layer ", i, " (",
                                                     v.layers[i].digest.str(), ") is above A"));
    }
    if (v.layers[i].media_type != kOciLayerTarMediaType) {
      return absl::InvalidArgumentError(absl::StrCat(
          "volume image: index layer ", i, " (", v.layers[i].digest.str(), ") has media type ",
          v.layers[i].media_type, ", not ", AV(kOciLayerTarMediaType)));
    }
    out.push_back(i);
  }
  return out;
}

absl::StatusOr<size_t> CheckVolumeLowerBinding(const Manifest& v,
                                               const std::vector<Digest>& diff_ids,
                                               std::string_view parent, std::string_view target) {
  absl::StatusOr<size_t> a = VolumeLayerIndex(v);
  if (!a.ok()) return absl::FailedPreconditionError(a.status().message());
  if (diff_ids.size() != v.layers.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "image config lists ", diff_ids.size(), " diff_ids for ", v.layers.size(), " layers"));
  }
  std::vector<Digest> chain;
  for (size_t i = 0; i < *a; ++i) {
    chain.push_back(diff_ids[i]);
    if (ChainIdOf(chain).str() != target) continue;
    const Descriptor& l = v.layers[i];
    if (l.Annotation(kLabelRole) == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("layer ", i, " (", l.digest.str(), ") carries no ", AV(kLabelRole)));
    }
    if (l.media_type != kOciLayerTarMediaType || diff_ids[i] != l.digest) {
      return absl::FailedPreconditionError(
          absl::StrCat("layer ", i, " (", l.digest.str(), ", ", l.media_type,
                       ") is not an uncompressed tar whose diff ID the config names"));
    }
    chain.pop_back();
    const std::string want_parent = chain.empty() ? "" : ChainIdOf(chain).str();
    const bool parent_ok = want_parent.empty() ? parent.empty()
                                               : (parent == want_parent ||
                                                  absl::EndsWith(AV(parent), "/" + want_parent));
    if (!parent_ok) {
      return absl::FailedPreconditionError(absl::StrCat("parent snapshot \"", AV(parent),
                                                        "\" is not the chain ID below layer ", i,
                                                        " (\"", want_parent, "\")"));
    }
    return i;
  }
  return absl::FailedPreconditionError(absl::StrCat("target snapshot \"", AV(target),
                                                    "\" is the chain ID of no layer of V below A"));
}

Digest ChainIdOf(const std::vector<Digest>& diff_ids) {
  Digest chain = diff_ids.at(0);
  for (size_t i = 1; i < diff_ids.size(); ++i) {
    chain = Digest::Of(absl::StrCat(chain.str(), " ", diff_ids[i].str()));
  }
  return chain;
}

absl::StatusOr<std::vector<Digest>> ParseImageConfigDiffIds(std::string_view config_json) {
  Json j = Json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("image config is not a JSON object");
  auto rootfs = j.find("rootfs");
  if (rootfs == j.end() || !rootfs->is_object()) {
    return absl::InvalidArgumentError("image config has no rootfs object");
  }
  auto ids = rootfs->find("diff_ids");
  if (ids == rootfs->end() || !ids->is_array()) {
    return absl::InvalidArgumentError("image config has no rootfs.diff_ids array");
  }
  std::vector<Digest> out;
  for (const Json& id : *ids) {
    if (!id.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("image config rootfs.diff_ids[", out.size(), "] is not a string"));
    }
    absl::StatusOr<Digest> d = Digest::Parse(id.get<std::string>());
    if (!d.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("image config rootfs.diff_ids[", out.size(), "]: ", d.status().message()));
    }
    out.push_back(*std::move(d));
  }
  return out;
}

absl::Status CheckVolumeSnapshotBinding(const Manifest& v, const std::vector<Digest>& diff_ids,
                                        std::string_view parent, std::string_view target) {
  absl::StatusOr<size_t> index = VolumeLayerIndex(v);
  if (!index.ok()) return absl::FailedPreconditionError(index.status().message());
  const size_t i = *index;
  const Descriptor& a = v.layers[i];
  if (a.media_type != kOciLayerTarMediaType) {
    return absl::FailedPreconditionError(
        absl::StrCat("volume layer ", a.digest.str(), " has media type ", a.media_type, ", not ",
                     AV(kOciLayerTarMediaType), " (its diff ID would not be its digest)"));
  }
  if (diff_ids.size() != v.layers.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "image config lists ", diff_ids.size(), " diff_ids for ", v.layers.size(), " layers"));
  }
  if (diff_ids[i] != a.digest) {
    return absl::FailedPreconditionError(absl::StrCat("image config rootfs.diff_ids[", i, "] is ",
                                                      diff_ids[i].str(), ", not the volume layer ",
                                                      a.digest.str()));
  }
  std::vector<Digest> below(diff_ids.begin(), diff_ids.begin() + i);
  const std::string want_parent = below.empty() ? "" : ChainIdOf(below).str();
  // containerd's metadata store names a backend snapshot "<namespace>/<id>/<its own name>", and
  // its own name for a committed layer is the chain ID.
  const bool parent_ok = want_parent.empty() ? parent.empty()
                                             : (parent == want_parent ||
                                                absl::EndsWith(AV(parent), "/" + want_parent));
  if (!parent_ok) {
    return absl::FailedPreconditionError(
        absl::StrCat("parent snapshot \"", AV(parent),
                     "\" is not the chain ID below the volume layer (\"", want_parent, "\")"));
  }
  below.push_back(a.digest);
  const std::string want_target = ChainIdOf(below).str();
  if (target != want_target) {
    return absl::FailedPreconditionError(absl::StrCat("target snapshot \"", AV(target),
                                                      "\" is not the chain ID of volume layer ",
                                                      a.digest.str(), " (", want_target, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckVolumeMatchesModel(const VolumeModelInfo& info, const Descriptor& model_manifest,
                                     const Manifest& model) {
  if (info.manifest.digest != model_manifest.digest) {
    return absl::DataLossError(absl::StrCat("model.json names ", info.manifest.digest.str(),
                                            " but the model is ", model_manifest.digest.str()));
  }
  if (info.layers.size() != model.layers.size()) {
    return absl::DataLossError(absl::StrCat("model.json lists ", info.layers.size(), " layers but ",
                                            model_manifest.digest.str(), " has ",
                                            model.layers.size()));
  }
  for (size_t i = 0; i < info.layers.size(); ++i) {
    const VolumeLayerRecord& a = info.layers[i];
    const Descriptor& b = model.layers[i];
    if (a.digest != b.digest || a.size != b.size || a.media_type != b.media_type) {
      return absl::DataLossError(absl::StrCat("model.json layer ", i, " is ", a.digest.str(), " (",
                                              a.size, " bytes, ", a.media_type, ") but ",
                                              model_manifest.digest.str(), " has ", b.digest.str(),
                                              " (", b.size, " bytes, ", b.media_type, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace modelfs
