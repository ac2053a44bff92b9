// Sharded safetensors checkpoints: reads `model.safetensors.index.json` (`metadata.total_size`,
// `weight_map` tensor -> shard file), inspects every shard it names through ParseSafetensors,
// and cross-checks the two: each tensor in exactly one shard, and the weight_map agreeing with
// the shards' actual contents in both directions.
//
// Thread safety: the functions are thread-compatible (no shared state); each call opens its own
// readers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/range_reader.h"

namespace modelfs {

// The index file itself, parsed but not yet checked against any shard.
struct ShardedIndex {
  std::optional<uint64_t> total_size;             // metadata.total_size, when an integer
  std::optional<uint64_t> total_parameters;       // metadata.total_parameters (newer transformers)
  std::map<std::string, std::string> weight_map;  // tensor -> shard file as written
  std::vector<std::string> warnings;              // e.g. a total_size that is not an integer
};

struct DtypeTotals {
  uint64_t tensors = 0;
  uint64_t parameters = 0;
  uint64_t bytes = 0;
};

struct ShardSummary {
  std::string file;      // as named in weight_map
  std::string location;  // the path or URL it was read from
  uint64_t file_size = 0;
  uint64_t header_size = 0;
  uint64_t tensors = 0;
  uint64_t parameters = 0;
  uint64_t tensor_bytes = 0;
};

struct ShardedCheckpoint {
  std::string index_location;
  std::optional<uint64_t> declared_total_size;  // metadata.total_size as written
  std::optional<uint64_t> declared_total_parameters;
  uint64_t tensor_bytes = 0;  // computed: sum of every tensor's byte size
  uint64_t parameters = 0;    // computed: sum of every tensor's element count
  uint64_t tensors = 0;
  uint64_t file_bytes = 0;  // sum of the shard files' sizes (headers included)
  std::map<std::string, DtypeTotals> by_dtype;
  std::vector<ShardSummary> shards;  // sorted by file name
  // Disagreements that do not make the checkpoint unusable, such as metadata.total_size
  // differing from the computed tensor_bytes (published indexes are often off).
  std::vector<std::string> warnings;
};

struct ShardedIndexOptions {
  HttpReaderOptions http;
  // Opens a shard or the index by resolved path/URL. Defaults to OpenRangeReader(.., http).
  std::function<absl::StatusOr<std::unique_ptr<RangeReader>>(const std::string&)> open;
  // Index files above this size are refused (kInvalidArgument) rather than read into memory.
  uint64_t max_index_bytes = 64ull << 20;
};

// Parses index JSON. Errors (kInvalidArgument, naming `name`): not JSON, duplicate keys, no
// weight_map object, a weight_map value that is not a string. Shard names are not checked here.
absl::StatusOr<ShardedIndex> ParseShardedIndex(std::string_view json, std::string_view name);

// Checks a shard name from a weight_map and resolves it against the index location's directory
// (a path or an http(s) URL, where it is percent-encoded). Names that are empty, start with '/',
// contain a ".." component, a backslash, a NUL or a URL scheme are kPermissionDenied.
absl::StatusOr<std::string> ResolveShardLocation(const std::string& index_path_or_url,
                                                 const std::string& shard);

// Reads the index at a path or http(s) URL and inspects every shard it names. Errors: the
// index's or a shard's parse error (prefixed with the shard name); kPermissionDenied for a
// refused shard name; kInvalidArgument when a tensor appears in two shards, or when weight_map
// and a shard's contents disagree (naming the tensor and both files).
absl::StatusOr<ShardedCheckpoint> InspectShardedIndex(const std::string& index_path_or_url,
                                                      const ShardedIndexOptions& options = {});

}  // namespace modelfs
