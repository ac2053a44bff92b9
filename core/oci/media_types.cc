#include "core/oci/media_types.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace modelfs {
namespace {

struct KindName {
  LayerKind kind;
  std::string_view name;
};
// Order matters for parsing: "weight.config" must be tried before "weight".
constexpr std::array<KindName, 5> kModelKinds = {{
    {LayerKind::kWeightConfig, "weight.config"},
    {LayerKind::kWeight, "weight"},
    {LayerKind::kDoc, "doc"},
    {LayerKind::kCode, "code"},
    {LayerKind::kDataset, "dataset"},
}};

bool ConsumePrefix(std::string_view& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  s.remove_prefix(prefix.size());
  return true;
}

}  // namespace

std::optional<LayerMediaTypeInfo> ClassifyLayerMediaType(std::string_view media_type) {
  if (const LayerCodec* c = FindLayerCodecByImageMediaType(media_type)) {
    return LayerMediaTypeInfo{LayerKind::kImage, LayerEncoding(*c)};
  }
  if (media_type == kDockerGgufMediaType || media_type == kDockerGgufLoraMediaType ||
      media_type == kDockerGgufMmprojMediaType || media_type == kDockerSafetensorsMediaType ||
      media_type == kDockerDdufMediaType || media_type == kDockerMmprojMediaType) {
    return LayerMediaTypeInfo{LayerKind::kWeight, LayerEncoding::kRaw};
  }
  if (media_type == kDockerChatTemplateMediaType) {
    return LayerMediaTypeInfo{LayerKind::kWeightConfig, LayerEncoding::kRaw};
  }
  if (media_type == kDockerLicenseMediaType || media_type == kDockerModelFileMediaType) {
    return LayerMediaTypeInfo{LayerKind::kDoc, LayerEncoding::kRaw};
  }
  if (media_type == kDockerDirTarMediaType || media_type == kDockerVllmConfigTarMediaType) {
    return LayerMediaTypeInfo{LayerKind::kWeightConfig, LayerEncoding::kTar};
  }
  std::string_view rest = media_type;
  bool legacy = false;
  if (!ConsumePrefix(rest, "application/vnd.cncf.model.")) {
    if (!ConsumePrefix(rest, "application/vnd.cnai.model.")) return std::nullopt;
    legacy = true;
  }
  for (const KindName& k : kModelKinds) {
    std::string_view r = rest;
    if (!ConsumePrefix(r, k.name) || !ConsumePrefix(r, ".v1.")) continue;
    if (const LayerCodec* c = FindLayerCodecByName(r)) {
      return LayerMediaTypeInfo{k.kind, LayerEncoding(*c), legacy};
    }
    return std::nullopt;
  }
  return std::nullopt;
}

std::string ModelLayerMediaType(LayerKind kind, LayerEncoding encoding) {
  if (kind == LayerKind::kImage) {
    const std::string_view image = encoding.codec().image_media_types[0];
    return std::string(image.empty() ? kOciLayerTarMediaType : image);
  }
  return absl::StrCat("application/vnd.cncf.model.", std::string(LayerKindName(kind)), ".v1.",
                      std::string(encoding.name()));
}

std::string_view LayerKindName(LayerKind kind) {
  switch (kind) {
    case LayerKind::kWeight:
      return "weight";
    case LayerKind::kWeightConfig:
      return "weight.config";
    case LayerKind::kDoc:
      return "doc";
    case LayerKind::kCode:
      return "code";
    case LayerKind::kDataset:
      return "dataset";
    case LayerKind::kImage:
      return "image";
  }
  return "unknown";
}

bool IsModelArtifactType(std::string_view s) {
  return s == kModelArtifactType || s == kLegacyModelArtifactType;
}
bool IsModelConfigMediaType(std::string_view s) {
  return s == kModelConfigMediaType || s == kLegacyModelConfigMediaType;
}
bool IsDockerModelConfigMediaType(std::string_view s) {
  return s == kDockerModelConfigV01MediaType || s == kDockerModelConfigV02MediaType;
}
bool IsManifestMediaType(std::string_view s) {
  return s == kOciManifestMediaType || s == kDockerManifestMediaType;
}
bool IsIndexMediaType(std::string_view s) {
  return s == kOciIndexMediaType || s == kDockerManifestListMediaType;
}

}  // namespace modelfs
