// Media type and annotation names for OCI images, Docker v2 manifests, ModelPack artifacts
// (github.com/modelpack/model-spec, specs-go/v1) and modelfs's own volume-image profile, plus
// the mapping from any media type we accept to a {kind, encoding} pair. The encodings, and the
// media type names that follow from them, come from the codec table (layer_codec.h).
//
// Writers always emit the current `vnd.cncf.model` / `org.cncf.model` names; readers also accept
// the legacy `vnd.cnai.model` / `org.cnai.model` names that older modctl releases still emit.
//
// Thread safety: constants and pure functions only.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/oci/layer_codec.h"
#include "core/oci/layer_media_types.h"  // the image layers' media types

namespace modelfs {

// --- OCI image spec -------------------------------------------------------------------------
inline constexpr std::string_view kOciManifestMediaType =
    "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view kOciIndexMediaType = "application/vnd.oci.image.index.v1+json";
inline constexpr std::string_view kOciConfigMediaType = "application/vnd.oci.image.config.v1+json";
// "Empty" descriptor content is the two bytes "{}".
inline constexpr std::string_view kOciEmptyMediaType = "application/vnd.oci.empty.v1+json";
inline constexpr std::string_view kOciEmptyJson = "{}";

// --- Docker v2 (schema 2) -------------------------------------------------------------------
inline constexpr std::string_view kDockerManifestMediaType =
    "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr std::string_view kDockerManifestListMediaType =
    "application/vnd.docker.distribution.manifest.list.v2+json";
inline constexpr std::string_view kDockerConfigMediaType =
    "application/vnd.docker.container.image.v1+json";

// --- Docker model artifacts (`docker model package`, Docker Hub's ai/ catalogue) -----------------
// Config v0.1 lays files out by media type (docker/model-runner's bundle: model.gguf,
// model-00001-of-00002.gguf, model.mmproj, template.jinja, ...); v0.2 names each file with
// org.cncf.model.filepath. Facts from docker/model-runner pkg/distribution/types and
// modelpack/model-spec compat/docker/v0.
inline constexpr std::string_view kDockerModelConfigV01MediaType =
    "application/vnd.docker.ai.model.config.v0.1+json";
inline constexpr std::string_view kDockerModelConfigV02MediaType =
    "application/vnd.docker.ai.model.config.v0.2+json";
inline constexpr std::string_view kDockerGgufMediaType = "application/vnd.docker.ai.gguf.v3";
inline constexpr std::string_view kDockerGgufLoraMediaType =
    "application/vnd.docker.ai.gguf.v3.lora";
inline constexpr std::string_view kDockerGgufMmprojMediaType =
    "application/vnd.docker.ai.gguf.v3.mmproj";
inline constexpr std::string_view kDockerSafetensorsMediaType =
    "application/vnd.docker.ai.safetensors";
inline constexpr std::string_view kDockerDdufMediaType = "application/vnd.docker.ai.dduf";
inline constexpr std::string_view kDockerMmprojMediaType = "application/vnd.docker.ai.mmproj";
inline constexpr std::string_view kDockerLicenseMediaType = "application/vnd.docker.ai.license";
inline constexpr std::string_view kDockerChatTemplateMediaType =
    "application/vnd.docker.ai.chat.template.jinja";
inline constexpr std::string_view kDockerDirTarMediaType = "application/vnd.docker.ai.dir.tar";
inline constexpr std::string_view kDockerVllmConfigTarMediaType =
    "application/vnd.docker.ai.vllm.config.tar";
inline constexpr std::string_view kDockerModelFileMediaType =
    "application/vnd.docker.ai.model.file";

// --- ModelPack (model-spec v1) --------------------------------------------------------------
inline constexpr std::string_view kModelArtifactType =
    "application/vnd.cncf.model.manifest.v1+json";
inline constexpr std::string_view kModelConfigMediaType =
    "application/vnd.cncf.model.config.v1+json";
inline constexpr std::string_view kLegacyModelArtifactType =
    "application/vnd.cnai.model.manifest.v1+json";
inline constexpr std::string_view kLegacyModelConfigMediaType =
    "application/vnd.cnai.model.config.v1+json";

// Layer media types are "application/vnd.cncf.model.<kind>.v1.<encoding>", for example
// "application/vnd.cncf.model.weight.v1.raw"; use ModelLayerMediaType() to build one.

// Layer annotations.
inline constexpr std::string_view kAnnotationFilepath = "org.cncf.model.filepath";
inline constexpr std::string_view kAnnotationFileMetadata = "org.cncf.model.file.metadata+json";
inline constexpr std::string_view kAnnotationMediaTypeUntested =
    "org.cncf.model.file.mediatype.untested";
inline constexpr std::string_view kLegacyAnnotationFilepath = "org.cnai.model.filepath";
inline constexpr std::string_view kLegacyAnnotationFileMetadata =
    "org.cnai.model.file.metadata+json";
// Used by oras as the file name of a layer.
inline constexpr std::string_view kAnnotationTitle = "org.opencontainers.image.title";
inline constexpr std::string_view kAnnotationDescription = "org.opencontainers.image.description";
// RFC 3339 date and time the image (here: the model, or V) was made.
inline constexpr std::string_view kAnnotationCreated = "org.opencontainers.image.created";

// --- modelfs ----------------------------------------------------------------------------------
// The binary chunk index format of docs/chunk-index.md.
inline constexpr std::string_view kChunkIndexMediaType = "application/vnd.modelfs.chunk-index.v1";
// artifactType of a volume image manifest (docs/volume-image.md), so a referrers query for M can
// pick V out without fetching every referrer.
inline constexpr std::string_view kVolumeImageArtifactType =
    "application/vnd.modelfs.volume.v1+json";

// What a layer holds. kImage is an ordinary container image layer (OCI or Docker).
enum class LayerKind { kWeight, kWeightConfig, kDoc, kCode, kDataset, kImage };
// How the layer's bytes are packed is its LayerEncoding, a codec of the table (layer_codec.h).
// A compressed one (.tar+gzip, .tar+zstd) is decoded whole, or read by range through the seek
// index V carries for it (seek_index.h).
inline bool IsCompressedEncoding(LayerEncoding e) { return e.compressed(); }

struct LayerMediaTypeInfo {
  LayerKind kind;
  LayerEncoding encoding;
  bool legacy = false;  // a vnd.cnai.model name
  friend bool operator==(const LayerMediaTypeInfo&, const LayerMediaTypeInfo&) = default;
};

// Maps any accepted layer media type (ModelPack cncf or cnai, OCI layer, Docker rootfs.diff,
// Docker model artifact layers) to its kind and encoding; nullopt for anything else (configs,
// unknown types).
std::optional<LayerMediaTypeInfo> ClassifyLayerMediaType(std::string_view media_type);

// The cncf media type for a ModelPack layer, "application/vnd.cncf.model.<kind>.v1.<encoding
// name>". kImage gives the encoding's (first) OCI image layer type, a tar's for raw.
std::string ModelLayerMediaType(LayerKind kind, LayerEncoding encoding);

// "weight", "weight.config", "doc", "code", "dataset", "image".
std::string_view LayerKindName(LayerKind kind);
// "raw", "tar", "tar+gzip", "tar+zstd": the codec's name (LayerEncoding::name).
inline std::string_view LayerEncodingName(LayerEncoding encoding) { return encoding.name(); }

bool IsModelArtifactType(std::string_view s);           // cncf or cnai manifest artifactType
bool IsModelConfigMediaType(std::string_view s);        // cncf or cnai config
bool IsDockerModelConfigMediaType(std::string_view s);  // Docker model config v0.1 or v0.2
bool IsManifestMediaType(std::string_view s);           // OCI manifest or Docker v2 manifest
bool IsIndexMediaType(std::string_view s);              // OCI index or Docker manifest list

}  // namespace modelfs
