// ModelPack (github.com/modelpack/model-spec v1): the model config blob
// (application/vnd.cncf.model.config.v1+json), the per-file layer annotations, choosing a layer
// kind for a file, building a model manifest M, and reading M back as a list of files.
//
// Writers emit the cncf names; readers accept the cncf and the legacy cnai names. Serialization
// is compact JSON with sorted keys and no timestamp unless one is set explicitly, so the same
// files always give the same config and manifest digests.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/oci/descriptor.h"
#include "core/oci/manifest.h"
#include "core/oci/media_types.h"

namespace modelfs {

// "descriptor" in the config (ModelDescriptor in specs-go/v1/config.go).
struct ModelDescriptor {
  std::optional<std::string> created_at;  // "createdAt", RFC 3339; omitted unless set
  std::vector<std::string> authors;
  std::string family;
  std::string name;
  std::string doc_url;                    // "docURL"
  std::string source_url;                 // "sourceURL"
  std::vector<std::string> datasets_url;  // "datasetsURL"
  std::string version;
  std::string revision;
  std::string vendor;
  std::vector<std::string> licenses;
  std::string title;
  std::string description;
  friend bool operator==(const ModelDescriptor&, const ModelDescriptor&) = default;
};

struct ModelCapabilities {
  std::vector<std::string>
      input_types;  // "inputTypes": text, image, audio, video, embedding, other
  std::vector<std::string> output_types;  // "outputTypes"
  std::string knowledge_cutoff;           // "knowledgeCutoff", RFC 3339; empty = absent
  std::optional<bool> reasoning;
  std::optional<bool> tool_usage;  // "toolUsage"
  std::optional<bool> reward;
  std::vector<std::string> languages;
  friend bool operator==(const ModelCapabilities&, const ModelCapabilities&) = default;
};

// "config" in the config (ModelConfig).
struct ModelConfig {
  std::string architecture;  // transformer, cnn, ...
  std::string format;        // safetensors, gguf, onnx, ...
  std::string param_size;    // "paramSize", e.g. "8b"
  std::string precision;     // bf16, fp16, int8, mixed, ...
  std::string quantization;  // awq, gptq, q4_k_m, ...
  std::optional<ModelCapabilities> capabilities;
  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

// "modelfs" in the config (ModelFS): the layers' DiffIDs (digest of the uncompressed content:
// for .raw and .tar layers the layer digest itself).
struct ModelFs {
  std::string type = "layers";
  std::vector<Digest> diff_ids;  // "diffIds"
  friend bool operator==(const ModelFs&, const ModelFs&) = default;
};

struct ModelPackConfig {
  ModelDescriptor descriptor;
  ModelConfig config;
  ModelFs modelfs;
  friend bool operator==(const ModelPackConfig&, const ModelPackConfig&) = default;
};

// Errors: kInvalidArgument naming the field ("config.modelfs.diffIds[2]: ..."). Unknown fields
// are ignored; modelfs.type must be "layers".
absl::StatusOr<ModelPackConfig> ParseModelPackConfig(std::string_view bytes);
std::string SerializeModelPackConfig(const ModelPackConfig& config);

// The value of org.cncf.model.file.metadata+json (FileMetadata in specs-go/v1/annotations.go).
struct FileMetadata {
  std::string name;  // base name
  uint32_t mode = 0644;
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t size = 0;
  std::string mtime = "1970-01-01T00:00:00Z";  // fixed by default, for reproducible digests
  uint8_t typeflag = '0';                      // tar typeflag as a number (48 = regular file)
  friend bool operator==(const FileMetadata&, const FileMetadata&) = default;
};
std::string SerializeFileMetadata(const FileMetadata& m);
absl::StatusOr<FileMetadata> ParseFileMetadata(std::string_view json);

// The layer kind for a file, from its name (directories ignored, case-insensitive):
//   weight:        *.safetensors *.gguf *.bin *.pt *.pth *.ckpt *.onnx *.h5 *.msgpack *.npz
//                  *.tflite *.mlmodel *.nemo *.ot
//   weight.config: *.json (config.json, generation_config.json, tokenizer*.json,
//                  special_tokens_map.json, *.safetensors.index.json, ...), tokenizer.model and
//                  other *.model, *.tiktoken, vocab.*, merges.txt, *.jinja (chat templates),
//                  *.yaml *.yml
//   dataset:       *.parquet *.arrow *.csv *.jsonl
//   code:          *.py *.sh *.ipynb *.js *.ts *.c *.cc *.cpp *.h *.cu *.go *.rs Dockerfile
//   doc:           README* LICENSE* LICENCE* NOTICE* COPYING* USE_POLICY* *.md *.txt *.rst
//                  *.pdf, and anything not listed above (never loaded as weights).
LayerKind ClassifyFile(std::string_view path);

// One file to package as one layer of M.
struct ModelLayerInput {
  std::string path;  // relative path in the model directory; must pass CheckRelativePath
  Digest digest;     // layer blob digest (for .raw: the file's SHA-256)
  uint64_t size = 0;
  LayerKind kind = LayerKind::kWeight;
  LayerEncoding encoding = LayerEncoding::kRaw;
  // The org.cncf.model.file.metadata+json value; when empty a FileMetadata{basename, 0644,
  // size} is written for .raw layers and none for tar layers.
  std::string file_metadata_json;
};

// Builds M: schemaVersion 2, OCI manifest media type, artifactType
// application/vnd.cncf.model.manifest.v1+json, config = descriptor of `config_blob` (model
// config media type), one layer per input in the given order, each annotated with
// org.cncf.model.filepath, org.opencontainers.image.title (both = path) and the file metadata.
// Errors: kPermissionDenied for an unsafe path, kInvalidArgument for a duplicate path or a
// kImage layer.
absl::StatusOr<Manifest> BuildModelManifest(
    std::string_view config_blob, const std::vector<ModelLayerInput>& layers,
    const std::map<std::string, std::string>& annotations = {});

// True when M is a ModelPack artifact (artifactType or config media type, cncf or cnai) or a
// Docker model artifact (config v0.1 or v0.2).
bool IsModelManifest(const Manifest& m);

// The largest layer modelfs accepts (4 TiB, several times the largest single weight file
// published today). A manifest is untrusted input: a declared size is only bytes on the wire,
// and the cache sizes its per-chunk state from it, so an absurd one must stop at parsing.
inline constexpr uint64_t kMaxModelLayerBytes = 4ull << 40;

// The file at the root of a mounted model that modelfs itself writes (see docs/modelinfo.md).
// No layer may provide it, or a directory of that name: `pull` and `mount` refuse such a model
// alike, so both always give the same tree.
inline constexpr std::string_view kReservedModelInfoPath = ".modelinfo.json";
// Errors: kInvalidArgument "<where>: path '<path>' is reserved ..." when `path` (canonical,
// relative) is kReservedModelInfoPath or lies under it.
absl::Status CheckNotReservedModelPath(std::string_view path, std::string_view where);

// One layer of M as the filesystem sees it.
struct ModelLayer {
  Descriptor descriptor;
  LayerKind kind = LayerKind::kWeight;
  LayerEncoding encoding = LayerEncoding::kRaw;
  // Canonical relative path from org.cncf.model.filepath (or the cnai name, or
  // org.opencontainers.image.title). For .raw layers it is where the file appears; for tar
  // layers it is informational (the tar's own entry names decide) and may be empty.
  std::string path;
};

// Where docker/model-runner lays out each layer of a Docker model artifact (config v0.1 or
// v0.2) that has no path annotation: model.gguf, model-00001-of-00003.gguf, model.safetensors,
// model.mmproj, template.jinja, LICENSE, ...; "" for annotated layers, tar layers and layers
// of any other manifest. One entry per layer.
std::vector<std::string> DockerLayerPaths(const Manifest& m);

// The layers of a ModelPack manifest (or a Docker model artifact), in order. A layer whose media
// type is not a known one but which has a path annotation is treated as a .raw doc layer
// (oras-style artifacts). Errors: kPermissionDenied naming an unsafe path; kInvalidArgument
// naming the layer for a .raw or unknown layer without a path, a duplicate .raw path, an unknown
// media type without one, a size over kMaxModelLayerBytes, or a .raw path that is
// kReservedModelInfoPath.
absl::StatusOr<std::vector<ModelLayer>> ResolveModelLayers(const Manifest& m);

}  // namespace modelfs
