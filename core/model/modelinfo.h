// .modelinfo.json: the synthetic file at the root of every mounted model that says what the
// model is (files, formats, parameters, dtypes, quantization, architecture shape, KV-cache cost
// per token) and where it came from (manifest digests, provenance, verification mode). The
// schema is versioned ("schemaVersion": 1) and documented in docs/modelinfo.md.
//
// Two steps, so the pure part is testable without I/O:
//   InspectTreeFiles: reads the headers of the model's files through BlobReader (the same
//     verified path the filesystem serves) with the core/formats inspectors;
//   BuildModelInfo: turns files + inspection + context into the JSON document.
// MakeModelInfoFile does both and returns the file's bytes (deterministic for the same input).
//
// Thread safety: pure functions; InspectTreeFiles only needs a thread-safe BlobReader.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cache/blob_reader.h"
#include "core/formats/model_inspect.h"
#include "core/model/tree_file.h"
#include "nlohmann/json.hpp"

namespace modelfs {

inline constexpr int kModelInfoSchemaVersion = 1;
inline constexpr char kModelInfoFileName[] = ".modelinfo.json";

// What the caller knows from the manifest chain (not from the files' bytes).
struct ModelInfoContext {
  std::string reference;  // as the user or kubelet gave it: "reg/models/llama@sha256:..."
  // Named digests: "manifest" (ModelPack manifest M), "config" (its config blob),
  // "volumeManifest" (V), "chunkIndex:<layer digest>" ... Written as given.
  std::map<std::string, std::string> digests;
  // ModelPack config fields and manifest annotations worth showing ("org.opencontainers.image.
  // source", "modelpack.family", "name", "createdAt", ...). Written as given.
  std::map<std::string, std::string> provenance;
  // How served bytes are verified: "chunk-index" (per-chunk hashes from a chunk index),
  // "whole-layer" (the blob's digest before any byte is served) or "unverified" (opt-in).
  std::string verification = "whole-layer";
  // The chunk indexes' hash algorithms, sorted ("blake3", "sha256"); written as
  // "chunkDigest" ("blake3", or "blake3,sha256" for a mix) when not empty.
  std::vector<std::string> chunk_digests;
  // How each layer of M (by digest) is served (LoadedModel::layer_serving): "layerServing",
  // written only when not empty.
  std::map<std::string, std::string> layer_serving;
  // V's tensor indexes (docs/tensor-index.md) by layer digest ("sha256:..."): each file of
  // that layer gets "tensorIndex": {"digest", "tensors", "mediaType"}; the index itself is not
  // copied (a 405B model's would be megabytes): `modelfs inspect --tensors REF` prints it.
  struct TensorIndexInfo {
    std::string digest;
    uint64_t tensors = 0;
  };
  std::map<std::string, TensorIndexInfo> tensor_indexes;
  // A tar layer's weight files' indexes, by (layer digest, the file's data offset in the tar).
  std::map<std::pair<std::string, uint64_t>, TensorIndexInfo> tar_tensor_indexes;
  // The identity record (core/oci/model_identity.h IdentityToJson); written as given, null if
  // unset.
  nlohmann::json identity;
  // For a state artifact (core/oci/state_artifact.h): its config and the model it belongs to,
  // written by MakeModelInfoFile as "state" when set (docs/modelinfo.md); absent for a model.
  nlohmann::json state;
};

// Header inspection of a model's files.
struct TreeInspection {
  InspectedModel model;                       // files' summaries, totals, shape, config.json
  std::map<std::string, std::string> errors;  // path -> why its header could not be read
};

// Inspects every *.safetensors and *.gguf file (InspectReader) and a top-level config.json
// (for the architecture shape) through BlobReader. A file that fails is recorded in `errors`
// (a model with one unreadable header still mounts); nothing here fails the whole call.
// Tensor lists are dropped after summing, to keep the result small.
TreeInspection InspectTreeFiles(BlobReader& reader, const std::vector<TreeFile>& files);

// The .modelinfo.json document (schema: docs/modelinfo.md). `files` are listed in path order.
nlohmann::json BuildModelInfo(const std::vector<TreeFile>& files, const TreeInspection& inspection,
                              const ModelInfoContext& context);

// InspectTreeFiles + BuildModelInfo, serialized with two-space indentation and a final newline:
// the bytes to pass as synthetic file kModelInfoFileName to ModelTree.
std::string MakeModelInfoFile(BlobReader& reader, const std::vector<TreeFile>& files,
                              const ModelInfoContext& context);

}  // namespace modelfs
