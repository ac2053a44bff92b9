// Model inspection: one summary of a model file, URL, sharded index or directory, built from
// headers only (safetensors JSON, GGUF metadata and tensor infos, config.json). Used by
// `modelfs inspect`, `modelfs memory`, `modelfs push` (to fill the ModelPack config) and the
// filesystem's .modelinfo.json.
//
// Thread safety: pure functions over the RangeReaders they are given.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/formats/model_shape.h"
#include "core/formats/sharded_index.h"
#include "core/io/range_reader.h"
#include "nlohmann/json.hpp"

namespace modelfs {

struct InspectedTensor {
  std::string name;
  std::string dtype;            // "BF16", "Q8_0", ...
  std::vector<uint64_t> shape;  // as the file lists it (GGUF: row length first)
  uint64_t elements = 0;
  uint64_t bytes = 0;
  uint64_t offset = 0;  // absolute byte offset in the file
};

// One model file (or a sharded checkpoint, summed over its shards).
struct InspectedFile {
  std::string location;  // path or URL as given
  std::string format;    // "safetensors", "gguf", "safetensors-index"
  uint64_t file_size = 0;
  uint64_t header_bytes = 0;  // bytes before the tensor data (GGUF: data_offset; safetensors: 8+N)
  uint64_t tensor_bytes = 0;
  uint64_t padding_bytes = 0;
  uint64_t parameters = 0;
  uint64_t tensor_count = 0;
  std::map<std::string, DtypeTotals> by_dtype;  // dtype -> tensors, parameters, bytes
  std::vector<InspectedTensor> tensors;         // in file order (empty for sharded indexes)
  std::string architecture;                     // GGUF general.architecture, when known
  std::string model_name;                       // GGUF general.name, when known
  std::string file_type;                        // GGUF general.file_type name ("MOSTLY_Q8_0")
  std::string quantization;                     // dominant quantized dtype, or "" if none
  std::string precision;                        // dominant dtype by bytes ("BF16", "Q8_0")
  uint32_t gguf_version = 0;
  uint64_t metadata_count = 0;      // GGUF metadata keys, safetensors __metadata__ entries
  nlohmann::json metadata;          // GGUF metadata (long arrays summarized) or __metadata__
  std::optional<ModelShape> shape;  // from GGUF metadata (safetensors: from config.json)
  std::vector<std::string> warnings;
  RangeReadStats read_stats;  // what reading the headers cost
  std::optional<ShardedCheckpoint> sharded;
};

// A directory or a set of files: the model files, the config.json shape, and totals.
struct InspectedModel {
  std::vector<InspectedFile> files;
  std::optional<nlohmann::json> config;  // config.json, when present
  std::optional<ModelShape> shape;       // config.json's, else the first GGUF's
  uint64_t parameters = 0;
  uint64_t tensor_bytes = 0;
  std::map<std::string, DtypeTotals> by_dtype;
  std::string format;        // "gguf", "safetensors", or "mixed"
  std::string precision;     // dominant dtype by bytes
  std::string quantization;  // dominant quantized dtype, or ""
  std::string architecture;
  std::vector<std::string> warnings;
};

struct InspectOptions {
  HttpReaderOptions http;
  // Opens a path or URL; defaults to OpenRangeReader(location, http).
  std::function<absl::StatusOr<std::unique_ptr<RangeReader>>(const std::string&)> open;
};

enum class SniffedFormat { kSafetensors, kGguf, kShardedIndex, kConfigJson, kUnknown };

// Decides a file's format from its name and first bytes ("GGUF" magic; an 8-byte length then
// '{'; *.index.json; config.json).
SniffedFormat SniffFormat(const std::string& name, std::string_view first_bytes);

// Inspects one safetensors or GGUF source. Errors: kInvalidArgument when it is neither, or
// the parser's error (naming the file, tensor and offset).
absl::StatusOr<InspectedFile> InspectReader(RangeReader& reader);

// Inspects a file, URL or sharded index (model.safetensors.index.json).
absl::StatusOr<InspectedFile> InspectLocation(const std::string& location,
                                              const InspectOptions& options = {});

// Inspects a directory (every *.safetensors / *.gguf, an index instead of its shards, and
// config.json) or a single location; also used with several paths (push).
absl::StatusOr<InspectedModel> InspectModel(const std::vector<std::string>& locations,
                                            const InspectOptions& options = {});

// Sums files into model totals, and picks the shape from config.json or GGUF metadata.
void SummarizeModel(InspectedModel& model);

// Name of a GGUF general.file_type value ("MOSTLY_Q4_K_M"), or "" when unknown.
std::string GgufFileTypeName(uint64_t file_type);

// Whether a dtype name is a block-quantized or sub-byte integer/float format.
bool IsQuantizedDtype(const std::string& dtype);

// The JSON and text forms of an inspection are the CLI's: cmd/modelfs/inspect_render.h.

// First n values of a tensor as floats (GGUF: F32, F16, BF16, Q8_0, Q4_0; safetensors: F32,
// F16, BF16). Errors: kNotFound (no such tensor), kUnimplemented (dtype).
absl::StatusOr<std::vector<float>> PeekTensor(RangeReader& reader, const InspectedFile& file,
                                              const std::string& tensor, size_t n);

}  // namespace modelfs
