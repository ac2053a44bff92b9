// A model's tensors, file by file, for `modelfs inspect --tensors` and `modelfs diff`: from the
// tensor indexes V pins (docs/tensor-index.md) when it has them, reading no weight; otherwise
// (a V published before the index, a plain ModelPack M) from each weight file's header, read by
// range, and its tensors hashed from the layer streamed once and checked against its digest.
// Also what push and convert use to list a weight file's tensors before they stream it.
//
// Thread safety: free functions; the RegistryClient is thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/range_reader.h"
#include "core/oci/tensor_diff.h"
#include "core/oci/tensor_index.h"
#include "core/registry/reference.h"
#include "core/registry/registry_client.h"
#include "core/resolve/model_ref.h"
#include "nlohmann/json.hpp"

namespace modelfs {

// The tensors of the weight file `path` (a .safetensors or .gguf name; anything else: nullopt)
// read from its header through `file`, which starts at `file_offset` of the layer `layer`.
// Returns the index without hashes and the header bytes it was parsed from (for
// TensorIndexBuilder::Create). Errors: the parser's (naming the file, tensor and offset).
struct TensorSkeleton {
  TensorIndex index;
  std::string header;
};
absl::StatusOr<std::optional<TensorSkeleton>> ReadTensorSkeleton(RangeReader& file,
                                                                 const std::string& path,
                                                                 const Digest& layer,
                                                                 uint64_t layer_size,
                                                                 uint64_t file_offset);

// Where a file's tensor list came from.
enum class TensorSource {
  kIndex,         // V's tensor index (digest checked)
  kSharedLayer,   // the other model's index or header of the same layer digest (diff only)
  kHeaderHashed,  // the header read by range and the layer streamed, verified and hashed
};
std::string_view TensorSourceName(TensorSource source);

struct ModelTensorFile {
  std::string path;
  Digest layer;
  TensorSource source = TensorSource::kIndex;
  std::optional<Digest> index_digest;  // kIndex: the index file's SHA-256 (model.json's)
  TensorIndex index;
};

struct ModelTensors {
  std::string reference;
  Digest model;                  // M
  std::optional<Digest> volume;  // V, when the reference named one
  std::vector<ModelTensorFile> files;
  // Layers with no listing: tar layers that could not be followed as a tar, by path or digest
  // and why.
  std::vector<std::string> skipped;
  // Layers listed (a tar layer with no weight file too), so the other side of a diff reuses
  // them instead of reading them again.
  std::set<Digest> listed_layers;
  uint64_t hashed_bytes = 0;  // layer bytes streamed for the fallback
};

// Lists the model `rm` resolved to (by `client`, which fetched it), reading tensor indexes from
// V and falling back per file (a tar layer without indexes: streamed once, decoded when
// compressed, and its weight members followed). `shared`, when set, is the other side of a diff: a
// file whose layer digest it already lists is copied from it (same bytes, same tensors) instead of
// read. Errors: kDataLoss when an index or a streamed layer does not match its digest; the parsers'
// kInvalidArgument for a malformed header or index; the registry's.
absl::StatusOr<ModelTensors> ListModelTensors(RegistryClient& client, const ResolvedModel& rm,
                                              const ModelTensors* shared = nullptr);

// The diff of two listings (files by path, tensors by name; core/oci/tensor_diff.h).
TensorDiff DiffModelTensors(const ModelTensors& a, const ModelTensors& b);

// JSON renderings (docs/cli.md): the listing of `inspect --tensors --json` and the diff.
nlohmann::json ModelTensorsToJson(const ModelTensors& m);
nlohmann::json TensorDiffToJson(const TensorDiff& d);

}  // namespace modelfs
