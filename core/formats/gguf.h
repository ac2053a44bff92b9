// GGUF (llama.cpp's single-file model format), versions 2 and 3: the typed metadata values,
// the parsed file (metadata in file order + tensor descriptors with absolute byte ranges) and
// the parser, which reads only the header through a HeaderCursor and treats the file as
// hostile: every length is checked against the bytes that remain before anything is
// allocated, array nesting and total array elements are capped, and the tensor layout
// (types, block multiples, alignment, bounds, overlaps) is validated.
//
// Thread safety: GgufValue and GgufFile are plain values (const methods are safe to call
// concurrently); ParseGguf uses the RangeReader it is given, which is not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "core/formats/ggml_types.h"
#include "core/io/range_reader.h"
#include "nlohmann/json.hpp"

namespace modelfs {

// The 13 GGUF metadata value types, with their on-disk ids.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
inline constexpr uint32_t kGgufValueTypeCount = 13;

// "UINT8", "INT8", ..., "STRING", "ARRAY", ..., "FLOAT64" (as the GGUF spec spells them);
// "UNKNOWN" for ids outside the enum.
const char* GgufValueTypeName(GgufValueType type);

struct GgufValue;

// An array value: the declared element type and the elements (each of that type; nested
// arrays carry their own element type).
struct GgufArray {
  GgufValueType element_type = GgufValueType::kUint8;
  std::vector<GgufValue> items;
};

// One metadata value. The variant alternative determines the GGUF type, so the type name of
// every value is kept exactly as the file declared it (UINT32 vs INT32 vs UINT64, ...).
struct GgufValue {
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, GgufArray, uint64_t, int64_t, double>;
  // The alternatives are declared in GgufValueType order: index() == type id.
  Storage v;

  GgufValue() = default;
  // The alternative is the exact C++ type: GgufValue(uint32_t{7}) is a UINT32.
  template <typename T>
  requires(!std::is_same_v<std::decay_t<T>, GgufValue> &&
           !std::is_pointer_v<std::decay_t<T>>) explicit GgufValue(T x)
      : v(std::move(x)) {}
  explicit GgufValue(const char* s) : v(std::string(s)) {}

  static GgufValue String(std::string s) { return GgufValue(std::move(s)); }
  static GgufValue Array(GgufValueType element_type, std::vector<GgufValue> items) {
    return GgufValue(GgufArray{element_type, std::move(items)});
  }

  GgufValueType type() const { return static_cast<GgufValueType>(v.index()); }
  const char* type_name() const { return GgufValueTypeName(type()); }

  bool is_string() const { return type() == GgufValueType::kString; }
  bool is_array() const { return type() == GgufValueType::kArray; }
  bool is_integer() const;  // any of the 8 integer types (not BOOL)
  bool is_number() const;   // integer or FLOAT32/FLOAT64

  // nullptr unless the value has that type.
  const std::string* AsString() const { return std::get_if<std::string>(&v); }
  const GgufArray* AsArray() const { return std::get_if<GgufArray>(&v); }
  // The value as an unsigned integer: any integer type holding a value >= 0, or BOOL.
  std::optional<uint64_t> AsUint() const;
  // Any integer type whose value fits in int64, or BOOL.
  std::optional<int64_t> AsInt() const;
  // Any number (integers converted), or BOOL.
  std::optional<double> AsDouble() const;

  friend bool operator==(const GgufValue& a, const GgufValue& b);
};

inline bool operator==(const GgufArray& a, const GgufArray& b) {
  return a.element_type == b.element_type && a.items == b.items;
}
inline bool operator==(const GgufValue& a, const GgufValue& b) { return a.v == b.v; }

// The value as JSON: integers as integers, floats as numbers (NaN/inf become null), BOOL as
// true/false, strings (invalid UTF-8 replaced by U+FFFD so dump() never throws), arrays as
// JSON arrays, fully, however long.
nlohmann::json GgufValueToJson(const GgufValue& value);

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> dims;  // row length first, as in the file (ggml ne[0..3])
  uint32_t type_id = 0;
  const GgmlType* type = nullptr;  // never null in a parsed file
  uint64_t offset = 0;             // absolute byte offset in the file
  uint64_t nbytes = 0;             // elements / block_size * type_size
  uint64_t elements = 0;           // product of dims (1 for zero dims)
};

struct GgufFile {
  static constexpr size_t kDefaultMaxArray = 1024;

  uint32_t version = 0;
  uint64_t alignment = 32;   // general.alignment, or 32
  uint64_t data_offset = 0;  // start of the data section = header bytes (see below)
  uint64_t file_size = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata;  // in file order
  std::vector<GgufTensor> tensors;                          // in file order

  // nullptr when absent.
  const GgufValue* Find(std::string_view key) const;
  const GgufTensor* FindTensor(std::string_view name) const;
  // nullopt when absent or of another type (GetUint: see GgufValue::AsUint).
  std::optional<std::string> GetString(std::string_view key) const;
  std::optional<uint64_t> GetUint(std::string_view key) const;
  std::optional<double> GetDouble(std::string_view key) const;
  // Number of elements when the key holds an array, else nullopt.
  std::optional<uint64_t> GetArrayLength(std::string_view key) const;
  // general.architecture, or "" when absent.
  std::string Architecture() const;

  uint64_t TotalElements() const;     // parameters: sum of tensor elements
  uint64_t TotalTensorBytes() const;  // sum of nbytes
  // file_size - data_offset - TotalTensorBytes(): alignment padding and any gaps, so that
  // file_size == data_offset (header) + TotalTensorBytes() + PaddingBytes().
  uint64_t PaddingBytes() const;

  // A JSON object key -> GgufValueToJson(value) (nlohmann::json sorts keys). Arrays with more than
  // max_array elements (tokenizer vocabularies) are summarized as
  //   {"type": "ARRAY", "element_type": "STRING", "length": N, "head": [first 8 elements]}
  // and a companion key "<key>_count": N is added (unless the file has that key), so
  // shape code can still read the vocabulary size. Scalars and short arrays are exact.
  nlohmann::json MetadataJson(size_t max_array = kDefaultMaxArray) const;

  // Built by the parser; maps key -> index in metadata. Find falls back to a scan when it is
  // out of step with metadata (a GgufFile assembled by hand).
  std::map<std::string, size_t, std::less<>> index;
};

// Bounds on what a header may make the parser hold. Real files stay far below them (a
// 262k-token vocabulary with scores, types and merges is about 1 Mi array elements); a
// hostile one fails with kInvalidArgument instead of exhausting memory (an array element
// costs about 40 bytes in memory however small on disk).
struct GgufParseLimits {
  uint32_t max_nesting = 8;                  // arrays of arrays of ...
  uint64_t max_array_elements = 1ull << 23;  // across the whole header (8 Mi)
  uint64_t max_metadata_keys = 1ull << 20;
  uint64_t max_tensors = 1ull << 20;
};

// Parses the GGUF header of `reader` (v2 or v3, little-endian).
// Errors (messages name the file, key or tensor and the byte offset):
//   kInvalidArgument: bad magic, v1/unknown version, big-endian file, unknown value type,
//     duplicate key or tensor name, bad general.alignment, > 4 dims, negative/overflowing dims,
//     unknown or removed ggml type ("tensor 'x' uses removed ggml type Q4_2 (id 4)"), row
//     length not a multiple of the block size, misaligned offset, overlapping tensors, a count
//     or nesting over the limits;
//   kOutOfRange: truncated header, or tensor data running past the end of the file;
//   whatever the reader returns for I/O failures.
absl::StatusOr<GgufFile> ParseGguf(RangeReader& reader, const GgufParseLimits& limits = {});

}  // namespace modelfs
