// safetensors: the dtype table, a header parser that validates exactly as the Hugging Face
// reference (Rust crate `safetensors`, src/tensor.rs) does, and a deterministic writer.
//
// File layout: u64 LE header length N, N bytes of UTF-8 JSON (an object, optionally padded with
// trailing whitespace), then the data buffer, which the tensors tile exactly: sorted by offset,
// each tensor starts where the previous one ended and the last ends at the end of the file.
//
// Thread safety: the free functions are thread-compatible (no shared state). A
// SafetensorsWriter is not safe for concurrent use.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/io/range_reader.h"
#include "nlohmann/json.hpp"

namespace modelfs {

// The reference rejects headers above this many bytes (a guard against absurd allocations).
inline constexpr uint64_t kSafetensorsMaxHeaderSize = 100'000'000;

// Size of one element in bits (F4 is 4, F6_* are 6, C64 is 64), or nullopt for an unknown dtype.
std::optional<uint32_t> SafetensorsDtypeBits(std::string_view dtype);

// Every dtype the reference knows, in its alignment order (smallest first); the writer lays
// tensors out in the reverse of this order so that wider elements stay aligned.
const std::vector<std::string>& SafetensorsDtypes();

struct SafetensorsTensor {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;  // empty for a rank-0 (scalar) tensor
  uint64_t begin = 0;           // byte offsets relative to the data start
  uint64_t end = 0;
  uint64_t elements = 0;  // product of shape (1 for rank 0)

  uint64_t size() const { return end - begin; }
};

struct SafetensorsFile {
  uint64_t header_size = 0;                     // N, the JSON length including padding
  uint64_t data_start = 0;                      // 8 + N
  uint64_t file_size = 0;                       // data_start + the last tensor's end
  std::map<std::string, std::string> metadata;  // "__metadata__"
  std::vector<SafetensorsTensor> tensors;       // sorted by (begin, end, name)
};

// Parses and validates the header of a safetensors file. An http source costs one request when
// 8+N is at most 64 KiB (HeaderCursor's first chunk). Errors name the source, the tensor and the
// offsets: kOutOfRange for a truncated file (shorter than 8 bytes, header past the end, data
// shorter than the tensors need); kInvalidArgument for everything else (header too large, not
// UTF-8, not a JSON object, duplicate key, unknown dtype, overflowing shape, holes, overlaps,
// trailing bytes after the last tensor).
absl::StatusOr<SafetensorsFile> ParseSafetensors(RangeReader& reader);

// The same over bytes in memory: `bytes` is the whole file or a prefix holding at least the
// 8-byte length and the header; `file_size` is the full file's size. A prefix too short to hold
// the header is kOutOfRange.
absl::StatusOr<SafetensorsFile> ParseSafetensorsBytes(std::string_view bytes, uint64_t file_size,
                                                      std::string_view name = "<memory>");

// Sum of the tensors' element counts (the parameter count).
uint64_t SafetensorsParameterCount(const SafetensorsFile& file);

// Parses JSON text into a value, rejecting duplicate object keys at any depth (nlohmann keeps
// the last silently), nesting deeper than 128 levels, invalid UTF-8, and trailing non-whitespace.
// `what` names the source in messages. Shared with the sharded-index reader.
absl::StatusOr<nlohmann::json> ParseStrictJson(std::string_view text, std::string_view what);

// Builds a safetensors file. Tensors are laid out by descending dtype width then name (the
// reference serializer's order) and the JSON is padded with spaces to a multiple of 8, so the
// output is a deterministic function of the tensors and metadata added (byte-identical to the
// reference's `serialize` for the same input).
class SafetensorsWriter {
 public:
  // Produces `length` bytes of a tensor's data starting `offset` bytes into the tensor.
  using DataFn = std::function<absl::StatusOr<std::string>(const SafetensorsTensor& tensor,
                                                           uint64_t offset, uint64_t length)>;

  // Adds a tensor with its bytes. Errors: kInvalidArgument for an unknown dtype, an empty or
  // reserved name, a shape whose size overflows or is not whole bytes, or `bytes` of the wrong
  // length; kAlreadyExists for a name added before.
  absl::Status AddTensor(std::string name, std::string dtype, std::vector<uint64_t> shape,
                         std::string bytes);
  // Adds a tensor whose bytes WriteFile asks `data` for, in pieces of at most 1 MiB.
  absl::Status AddTensorFromCallback(std::string name, std::string dtype,
                                     std::vector<uint64_t> shape, DataFn data);
  // Adds a tensor of zero bytes that WriteFile leaves as a hole (ftruncate), so tests can make
  // files of many GiB cheaply. Serialize() writes the zeros.
  absl::Status AddSparseTensor(std::string name, std::string dtype, std::vector<uint64_t> shape);

  void SetMetadata(std::string key, std::string value);

  // The tensors as they will be laid out (offsets relative to the data start).
  std::vector<SafetensorsTensor> Layout() const;
  // The 8-byte length followed by the padded JSON header.
  std::string SerializeHeader() const;
  // The whole file in memory (callback tensors are asked for their bytes; a failing callback
  // leaves zeros — use WriteFile to see its error).
  std::string Serialize() const;
  // Streams the file to `path` (through a temporary name renamed into place), holding at most
  // one tensor's bytes or one 1 MiB callback piece at a time. Errors: kInvalidArgument when the
  // header exceeds kSafetensorsMaxHeaderSize or a callback returns the wrong length; the
  // callback's own error; kInternal/kPermissionDenied for I/O failures, naming the path.
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    std::string dtype;
    std::vector<uint64_t> shape;
    int rank = 0;  // index in the dtype table, cached for sorting
    uint64_t elements = 0;
    uint64_t size = 0;
    std::string bytes;
    DataFn data;
    bool sparse = false;
  };
  absl::StatusOr<Entry> MakeEntry(std::string name, std::string dtype,
                                  std::vector<uint64_t> shape) const;
  absl::Status Insert(Entry entry);
  std::vector<const Entry*> Ordered() const;

  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace modelfs
