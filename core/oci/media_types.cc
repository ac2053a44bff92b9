#include "core/oci/media_types.h"

#include <array>

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

struct EncodingName {
  LayerEncoding encoding;
  std::string_view name;
};
constexpr std::array<EncodingName, 4> kEncodings = {{
    {LayerEncoding::kRaw, "raw"},
    {LayerEncoding::kTar, "tar"},
    {LayerEncoding::kTarGzip, "tar+gzip"},
    {LayerEncoding::kTarZstd, "tar+zstd"},
}};

bool ConsumePrefix(std::string_view& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  s.remove_prefix(prefix.size());
  return true;
}

}  // namespace

std::optional<LayerMediaTypeInfo> ClassifyLayerMediaType(std::string_view media_type) {
  if (media_type == kOciLayerTarMediaType) {
    return LayerMediaTypeInfo{LayerKind::kImage, LayerEncoding::kTar};
  }
  if (media_type == kOciLayerTarGzipMediaType || media_type == kDockerLayerTarGzipMediaType) {
    return LayerMediaTypeInfo{LayerKind::kImage, LayerEncoding::kTarGzip};
  }
  if (media_type == kOciLayerTarZstdMediaType) {
    return LayerMediaTypeInfo{LayerKind::kImage, LayerEncoding::kTarZstd};
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
    for (const EncodingName& e : kEncodings) {
      if (r == e.name) return LayerMediaTypeInfo{k.kind, e.encoding, legacy};
    }
    return std::nullopt;
  }
  return std::nullopt;
}

std::string_view ModelLayerMediaType(LayerKind kind, LayerEncoding encoding) {
  // Spelled out so callers get a string_view into static storage.
  switch (kind) {
    case LayerKind::kWeight:
      switch (encoding) {
        case LayerEncoding::kRaw:
          return "application/vnd.cncf.model.weight.v1.raw";
        case LayerEncoding::kTar:
          return "application/vnd.cncf.model.weight.v1.tar";
        case LayerEncoding::kTarGzip:
          return "application/vnd.cncf.model.weight.v1.tar+gzip";
        case LayerEncoding::kTarZstd:
          return "application/vnd.cncf.model.weight.v1.tar+zstd";
      }
      break;
    case LayerKind::kWeightConfig:
      switch (encoding) {
        case LayerEncoding::kRaw:
          return "application/vnd.cncf.model.weight.config.v1.raw";
        case LayerEncoding::kTar:
          return "application/vnd.cncf.model.weight.config.v1.tar";
        case LayerEncoding::kTarGzip:
          return "application/vnd.cncf.model.weight.config.v1.tar+gzip";
        case LayerEncoding::kTarZstd:
          return "application/vnd.cncf.model.weight.config.v1.tar+zstd";
      }
      break;
    case LayerKind::kDoc:
      switch (encoding) {
        case LayerEncoding::kRaw:
          return "application/vnd.cncf.model.doc.v1.raw";
        case LayerEncoding::kTar:
          return "application/vnd.cncf.model.doc.v1.tar";
        case LayerEncoding::kTarGzip:
          return "application/vnd.cncf.model.doc.v1.tar+gzip";
        case LayerEncoding::kTarZstd:
          return "application/vnd.cncf.model.doc.v1.tar+zstd";
      }
      break;
    case LayerKind::kCode:
      switch (encoding) {
        case LayerEncoding::kRaw:
          return "application/vnd.cncf.model.code.v1.raw";
        case LayerEncoding::kTar:
          return "application/vnd.cncf.model.code.v1.tar";
        case LayerEncoding::kTarGzip:
          return "application/vnd.cncf.model.code.v1.tar+gzip";
        case LayerEncoding::kTarZstd:
          return "application/vnd.cncf.model.code.v1.tar+zstd";
      }
      break;
    case LayerKind::kDataset:
      switch (encoding) {
        case LayerEncoding::kRaw:
          return "application/vnd.cncf.model.dataset.v1.raw";
        case LayerEncoding::kTar:
          return "application/vnd.cncf.model.dataset.v1.tar";
        case LayerEncoding::kTarGzip:
          return "application/vnd.cncf.model.dataset.v1.tar+gzip";
        case LayerEncoding::kTarZstd:
          return "application/vnd.cncf.model.dataset.v1.tar+zstd";
      }
      break;
    case LayerKind::kImage:
      switch (encoding) {
        case LayerEncoding::kRaw:
        case LayerEncoding::kTar:
          return kOciLayerTarMediaType;
        case LayerEncoding::kTarGzip:
          return kOciLayerTarGzipMediaType;
        case LayerEncoding::kTarZstd:
          return kOciLayerTarZstdMediaType;
      }
      break;
  }
  return kOciLayerTarMediaType;
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

std::string_view LayerEncodingName(LayerEncoding encoding) {
  for (const EncodingName& e : kEncodings) {
    if (e.encoding == encoding) return e.name;
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
