// Publishing models: `modelfs push` (files -> ModelPack artifact M plus volume image V) and
// `modelfs convert` (an existing M -> V, streaming each layer once to verify and index it).
//
// Both are deterministic: the same files give the same digests (no timestamps, sorted paths,
// fixed file metadata), and blobs the registry already has are not uploaded again.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/oci/chunk_index.h"
#include "core/oci/descriptor.h"
#include "core/oci/model_identity.h"
#include "core/oci/tar_headers.h"
#include "core/oci/tensor_index.h"
#include "core/publish/tar_tensor_indexer.h"
#include "core/registry/reference.h"
#include "core/registry/registry_client.h"
#include "nlohmann/json.hpp"

namespace modelfs {

// Progress of one blob transfer, for a TTY progress line.
struct TransferProgress {
  std::string name;  // file path or blob role ("config", "volume layer")
  uint64_t done = 0;
  uint64_t total = 0;
};
using ProgressFn = std::function<void(const TransferProgress&)>;

// Streams the file at `path` through a chunk index builder: one read gives its digest and its
// chunk index (`progress`, when set, is told as "hashing <role>"); `headers`, when set, follows
// the file as a tar in the same read, `tensors`, when set, hashes the tensors of the weight
// file in it, and `tar_tensors`, when set, those of every weight file inside the tar.
// Errors: kNotFound (cannot open), kInternal (read error), `tar_tensors`' Feed errors.
absl::StatusOr<ChunkIndex> IndexFile(const std::string& path, uint64_t chunk_size,
                                     ChunkDigestAlgorithm algorithm, const std::string& role,
                                     const ProgressFn& progress,
                                     TarHeaderRecorder* headers = nullptr,
                                     TensorIndexBuilder* tensors = nullptr,
                                     TarTensorIndexer* tar_tensors = nullptr);

struct PushOptions {
  std::vector<std::string> inputs;  // files and directories
  bool tar = false;                 // one .tar layer per file instead of .raw
  // One .tar+zstd layer per file (implies tar): independent zstd frames of chunk_size bytes of
  // the tar each, level 3; the config's diffIds name the tars. V has no chunk index for them.
  bool compress_zstd = false;
  std::string volume_tag;                          // default "<tag>-volume"
  std::map<std::string, std::string> annotations;  // on M
  std::vector<std::string> mount_from;  // repositories (same registry) to mount blobs from
  // 0: the smallest from 1 MiB up with which every index fits the volume layer
  // (ChunkSizeForLayers); otherwise exactly this, refused when the indexes would not fit.
  uint64_t chunk_size = 0;
  ChunkDigestAlgorithm chunk_digest = ChunkDigestAlgorithm::kBlake3;
  std::string name;      // ModelPack descriptor.name (default: the repository's last part)
  std::string revision;  // ModelPack descriptor.revision, e.g. the Hugging Face commit
  // Pickle checkpoints (named so by IsPickleFileName, and whose bytes are a zip with a .pkl
  // entry or a pickle stream) are refused unless this is set; then M's manifest records them
  // (kAnnotationPickleAllowed, ...Files, ...Flagged).
  bool allow_pickle = false;
  // The identity record from flags (core/oci/model_identity.h). It overrides what README.md's model
  // card front matter says; the tokenizer hash is computed from the files; source_url and
  // revision come from a directory's modelfs.lock.json.
  ModelIdentity identity;
  // V shows M's files under this directory ("models" for KServe's oci+native://); M's paths
  // are unchanged. Empty: at the root.
  std::string path_prefix;
  // With `tar`: V's image layers are M's own tar blobs, then V's `.modelfs/` layer
  // (docs/volume-image.md, "The image-compatible profile"), so a node without modelfs unpacks
  // the model itself. The tars' members are then written under `path_prefix`.
  bool image_compatible = false;
  // V carries a tensor index per safetensors/GGUF file in a .raw layer (docs/tensor-index.md),
  // hashed in the same read. false (--no-tensor-index): V as a build
  // before the index wrote it.
  bool tensor_index = true;
  ProgressFn progress;
};

// Annotations on M when --allow-pickle let pickle files in: "true"; the files, comma-separated;
// and "<path>: <global> <global>; ..." for imports outside the scanner's allow-list.
inline constexpr std::string_view kAnnotationPickleAllowed = "dev.modelfs.pickle.allowed";
inline constexpr std::string_view kAnnotationPickleFiles = "dev.modelfs.pickle.files";
inline constexpr std::string_view kAnnotationPickleFlagged = "dev.modelfs.pickle.flagged";

struct PushedBlob {
  std::string role;  // path, "config", "volume layer", "volume config"
  Descriptor descriptor;
  std::string action;  // "uploaded", "present", "mounted"
};

struct PushResult {
  std::string repository;        // registry/repo of V (and of M, unless model_repository says)
  std::string model_repository;  // registry/repo of M when it is not `repository` (convert --to)
  ModelIdentity identity;        // what the config and annotations record
  std::string lock;              // the modelfs.lock.json the files were checked against, or ""
  Descriptor model;              // M
  std::string model_tag;
  Descriptor volume;  // V
  std::string volume_tag;
  std::vector<PushedBlob> blobs;
  uint64_t bytes_uploaded = 0;  // request body bytes sent to the registry
  int uploaded = 0, present = 0, mounted = 0;
  // Compressed tar layers that cannot be entered in the middle (a single zstd frame): mounts
  // fetch each whole, check it against its digest and decompress it before serving any of its
  // files. Other compressed layers get a seek index and are served lazily.
  std::vector<Digest> verified_whole;
  // push --compress zstd: the tars' bytes and the compressed layers' bytes (0 otherwise).
  uint64_t uncompressed_bytes = 0, compressed_bytes = 0;
};

// A directory holding modelfs.lock.json (from `modelfs fetch`) keeps its origin: the lock's
// sourceURL and commit go into descriptor.sourceURL and descriptor.revision, every other file
// of that directory must be in the lock with the same size and SHA-256, and the lock itself is
// pushed as a layer (so a pull can `modelfs verify`).
// Errors: kPermissionDenied for a pickle file without allow_pickle (before anything is
// uploaded); kDataLoss for a file of a locked directory that the lock lacks or whose bytes
// differ from it (before that file is uploaded; no manifest is written); kInvalidArgument for
// two locks, a --revision other than the lock's commit, or a bad identity field; the
// registry's errors; inspection errors for malformed model files.
absl::StatusOr<PushResult> PushModel(RegistryClient& client, const ImageReference& ref,
                                     const PushOptions& options);

struct ConvertOptions {
  std::string volume_tag;   // default "<tag>-volume", or "sha256-<hex>.volume" for a digest ref
  uint64_t chunk_size = 0;  // as PushOptions::chunk_size
  ChunkDigestAlgorithm chunk_digest = ChunkDigestAlgorithm::kBlake3;
  std::string path_prefix;  // as PushOptions::path_prefix
  // As PushOptions::image_compatible, for an M whose layers are all uncompressed tars; with a
  // path prefix, every member of each tar must be under it. V in another repository of the same
  // registry mounts M's blobs there; on another registry it is refused (it would copy them).
  bool image_compatible = false;
  bool tensor_index = true;  // as PushOptions::tensor_index (.raw weight layers)
  ProgressFn progress;
};

// Writes V for the ModelPack artifact at ref into ref's repository: every layer is streamed
// once, its digest verified and its chunk index built; weights are not uploaded again.
// Compressed tar layers (.tar+gzip, .tar+zstd) get a seek index and the chunk index of their
// uncompressed tar, built in the same pass (docs/seek-index.md).
absl::StatusOr<PushResult> ConvertModel(RegistryClient& client, const ImageReference& ref,
                                        const ConvertOptions& options);

// `convert SRC --to DST`: the same, but V goes into `target_repository` through `target` (a
// push client, possibly of another registry) while M and its weights stay at `source_ref`,
// read through `source` (a pull client). V's record names SRC's repository, so mount and the
// snapshotter read the weights from there. Only V's own small blobs (its layer and config) are
// uploaded. The tag is options.volume_tag, else "<SRC tag>-volume".
// Errors: as ConvertModel; kInvalidArgument when SRC already is a volume image.
absl::StatusOr<PushResult> ConvertModelTo(RegistryClient& source, const ImageReference& source_ref,
                                          RegistryClient& target,
                                          const std::string& target_repository,
                                          const ConvertOptions& options);

nlohmann::json PushResultToJson(const PushResult& r);

// "135m", "8b", "1.5b": the ModelPack paramSize label for a parameter count.
std::string ParamSizeLabel(uint64_t parameters);

}  // namespace modelfs
