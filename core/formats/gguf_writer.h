// GgufWriter: builds GGUF v2/v3 files (metadata of every value type, nested arrays, tensors
// laid out at the alignment with zero padding), for tests, fuzz seeds, synthetic models and
// benchmarks. Output is deterministic: the same calls give the same bytes.
//
// Tensor data can be given as bytes, generated at write time (so a 143 MB model never sits in
// memory), or left sparse: WriteFile then leaves a hole (ftruncate), so a test can write a
// file with a real model's shapes in a few milliseconds and a few KB of disk.
//
// The writer can also express malformed files on purpose (AddRawTensor, AppendDuplicate,
// any version number, any general.alignment value) so the parser's checks can be tested
// with real bytes.
//
// Thread safety: not thread-safe; const methods may run concurrently with each other only.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/formats/gguf.h"

namespace modelfs {

class GgufWriter {
 public:
  // Produces exactly the tensor's byte count when called (at Serialize/WriteFile time).
  using Generator = std::function<absl::StatusOr<std::string>()>;

  // For AddRawTensor: nothing is checked. `nbytes` is the size reserved in the data section
  // (zeros); `offset`, when set, is written as the tensor's relative offset and its data goes
  // there (so tests can make misaligned or overlapping tensors).
  struct RawTensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type_id = 0;
    uint64_t nbytes = 0;
    std::optional<uint64_t> offset;
  };

  GgufWriter() = default;

  // Default 3. Any value is written as given.
  void SetVersion(uint32_t version) { version_ = version; }
  // Sets general.alignment (UINT32). Tensors are laid out at general.alignment when it is a
  // UINT32 power of two, else at 32 (the GGUF default), whatever value the key holds.
  void SetAlignment(uint32_t alignment);

  // Sets a key. An existing key keeps its position and gets the new value.
  void Set(const std::string& key, GgufValue value);
  void SetUint8(const std::string& key, uint8_t v) { Set(key, GgufValue(v)); }
  void SetInt8(const std::string& key, int8_t v) { Set(key, GgufValue(v)); }
  void SetUint16(const std::string& key, uint16_t v) { Set(key, GgufValue(v)); }
  void SetInt16(const std::string& key, int16_t v) { Set(key, GgufValue(v)); }
  void SetUint32(const std::string& key, uint32_t v) { Set(key, GgufValue(v)); }
  void SetInt32(const std::string& key, int32_t v) { Set(key, GgufValue(v)); }
  void SetFloat32(const std::string& key, float v) { Set(key, GgufValue(v)); }
  void SetBool(const std::string& key, bool v) { Set(key, GgufValue(v)); }
  void SetString(const std::string& key, std::string v) { Set(key, GgufValue(std::move(v))); }
  void SetUint64(const std::string& key, uint64_t v) { Set(key, GgufValue(v)); }
  void SetInt64(const std::string& key, int64_t v) { Set(key, GgufValue(v)); }
  void SetFloat64(const std::string& key, double v) { Set(key, GgufValue(v)); }
  // Items must all be of element_type (checked by Serialize/WriteFile); nest by passing
  // GgufValue::Array(...) items with element_type kArray.
  void SetArray(const std::string& key, GgufValueType element_type, std::vector<GgufValue> items);
  void SetStringArray(const std::string& key, const std::vector<std::string>& items);
  void SetInt32Array(const std::string& key, const std::vector<int32_t>& items);
  void SetUint32Array(const std::string& key, const std::vector<uint32_t>& items);
  void SetFloat32Array(const std::string& key, const std::vector<float>& items);
  // Appends even if the key is already set (duplicate keys are invalid GGUF).
  void AppendDuplicate(const std::string& key, GgufValue value);

  // Adds a tensor (laid out in the order added). Errors: kInvalidArgument for a duplicate
  // name, > 4 dims, an unknown or removed type, a row length that is not a multiple of the
  // block size, or data whose size is not exactly elements / block_size * type_size.
  absl::Status AddTensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type_id,
                         std::string data);
  // Same checks; the data is zeros, written as a hole by WriteFile.
  absl::Status AddSparseTensor(const std::string& name, std::vector<uint64_t> dims,
                               uint32_t type_id);
  // Same checks; `generate` is called once per Serialize/WriteFile and must return exactly
  // the tensor's byte count.
  absl::Status AddGeneratedTensor(const std::string& name, std::vector<uint64_t> dims,
                                  uint32_t type_id, Generator generate);
  // No checks (see RawTensor).
  void AddRawTensor(RawTensor tensor);

  // The whole file in memory. Errors: kInvalidArgument for an array item whose type differs
  // from its array's element type, or a generator that fails or returns the wrong size.
  absl::StatusOr<std::string> Serialize() const;
  // Streams the file to path (via path + ".tmp" and a rename); sparse tensors become holes.
  // Errors as Serialize, plus kInternal/kPermissionDenied/kNotFound for I/O failures.
  absl::Status WriteFile(const std::string& path) const;

  // Size of everything before the data section (header, metadata, tensor infos, padding).
  absl::StatusOr<uint64_t> HeaderSize() const;
  // Size of the file Serialize/WriteFile would produce.
  absl::StatusOr<uint64_t> FileSize() const;

 private:
  struct Tensor {
    RawTensor info;
    std::string data;    // empty: zeros, unless `generate` is set
    Generator generate;  // may be empty
  };
  struct Layout {
    std::string header;                 // padded to the alignment
    std::vector<uint64_t> rel_offsets;  // per tensor, relative to the data section
    uint64_t data_size = 0;             // padded
  };

  absl::Status CheckTensor(const std::string& name, const std::vector<uint64_t>& dims,
                           uint32_t type_id, uint64_t* nbytes) const;
  uint64_t LayoutAlignment() const;
  absl::StatusOr<Layout> BuildLayout() const;
  static absl::StatusOr<std::string> TensorBytes(const Tensor& t);

  uint32_t version_ = 3;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace modelfs
