// How push and convert index a model's layers: each layer's chunk index, and from the same
// pass over it a compressed layer's seek index (its codec's builder, layer_codec.h) and the chunk
// index of its tar, a tar layer's header records and the tensor indexes of its weight files, a
// .raw weight file's tensor index. What they give is what V carries (LayerIndexes). Internal to
// core/publish (push.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/oci/chunk_index.h"
#include "core/oci/media_types.h"
#include "core/oci/seek_index.h"
#include "core/oci/tar_headers.h"
#include "core/oci/tensor_index.h"
#include "core/publish/push.h"
#include "core/publish/tar_tensor_indexer.h"
#include "core/registry/registry_client.h"
#include "core/resolve/model_ref.h"

namespace modelfs::publish_internal {

// What V carries for a model's layers.
struct LayerIndexes {
  std::vector<ChunkIndex> chunks;
  std::vector<SeekIndex> seeks;         // compressed layers; their chunk index covers the diffId
  std::vector<TarHeaders> tar_headers;  // tar layers' header records
  std::vector<TensorIndex> tensors;     // weight files' tensor indexes
  std::vector<TarTensorIndexes> tar_tensors;  // the weight files inside tar layers
};

// The chunk size of a model's indexes: `asked` when given (and the indexes fit the volume
// image with it), else the smallest that fits from 1 MiB up. Errors: kInvalidArgument when
// `asked` is too small for the model, naming the size that fits.
absl::StatusOr<uint64_t> PickChunkSize(const std::vector<uint64_t>& layer_sizes, uint64_t asked,
                                       ChunkDigestAlgorithm algorithm);

// Streams the compressed layer file at `path` (in `encoding`) once: its seek index and the
// chunk index of its uncompressed tar (content kUncompressed: blob digest = diffId);
// `headers` and `tar_tensors`, when set, follow that tar in the same pass. Errors: the codec's
// (kDataLoss for a corrupt stream), kNotFound, kInternal (read error).
absl::StatusOr<std::pair<SeekIndex, ChunkIndex>> IndexCompressedFile(
    const std::string& path, LayerEncoding encoding, uint64_t chunk_size,
    ChunkDigestAlgorithm algorithm, const std::string& role, const ProgressFn& progress,
    TarHeaderRecorder* headers, TarTensorIndexer* tar_tensors);

// The tensor index builder for the file at `path` (named `rel`) streamed as the blob at
// `blob_path`, where it starts at `file_offset`; nullopt for a file that is not safetensors or
// GGUF. Reads the file's header only; the layer digest is set once the layer is hashed.
absl::StatusOr<std::optional<TensorIndexBuilder>> StartTensorIndex(const std::string& path,
                                                                   const std::string& rel,
                                                                   const std::string& blob_path,
                                                                   uint64_t file_offset);

// Streams every layer of M once from `source`, checking its digest and size, and returns
// their chunk indexes in layer order (for a compressed layer: its seek index and the chunk
// index of its uncompressed tar, from the same pass); each layer is listed in `result` as
// "present".
absl::StatusOr<LayerIndexes> IndexLayers(RegistryClient& source, const ResolvedModel& rm,
                                         const ConvertOptions& o, PushResult& result);

}  // namespace modelfs::publish_internal
