// TensorIndex: per weight file (safetensors or GGUF), one entry per tensor with its name, dtype,
// shape, byte range within the file and the BLAKE3 hash of its bytes (docs/tensor-index.md).
// `push` and `convert` build it while they already stream the layer (TensorIndexBuilder), and
// the volume image V pins it by digest like the chunk indexes, so `modelfs diff` and
// `inspect --tensors` answer from it without reading any weight.
//
// The index is untrusted input until its digest matched the one V's model.json gives:
// ParseTensorIndex is strict (fuzzed by tests/fuzz/oci_tensor_index_fuzz.cc).
//
// Thread safety: TensorIndex is a plain value; a TensorIndexBuilder belongs to one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/oci/chunk_hash.h"
#include "core/oci/digest.h"

namespace modelfs {

inline constexpr std::string_view kTensorIndexMediaType = "application/vnd.modelfs.tensor-index.v1";

// The weight file format an index describes; the values are the on-disk ones.
enum class TensorFileFormat : uint32_t { kSafetensors = 1, kGguf = 2 };
// "safetensors" or "gguf".
std::string_view TensorFileFormatName(TensorFileFormat format);

struct TensorEntry {
  std::string name;             // as the file stores it, 1..65535 bytes of UTF-8
  std::string dtype;            // "BF16", "F32" (safetensors), "Q4_K", "F16" (GGUF's ggml type)
  std::vector<uint64_t> shape;  // as the file lists it (GGUF: row length first); at most 8
  uint64_t offset = 0;          // within the file
  uint64_t length = 0;
  ChunkHash hash{};  // BLAKE3 of the tensor's bytes
  friend bool operator==(const TensorEntry&, const TensorEntry&) = default;
};

struct TensorIndex {
  static constexpr uint32_t kVersion = 1;
  static constexpr size_t kHeaderSize = 88;
  static constexpr size_t kMaxRank = 8;
  // What one index may hold (a GGUF of ~1,000 tensors, a 405B shard of ~1,000-2,000).
  static constexpr uint64_t kMaxTensors = 1u << 20;

  TensorFileFormat format = TensorFileFormat::kSafetensors;
  Digest layer_digest;       // the layer of M the file is
  uint64_t layer_size = 0;   // its size
  uint64_t file_offset = 0;  // where the file starts in the layer (0 raw, 512 a one-file tar)
  uint64_t file_size = 0;
  std::vector<TensorEntry> tensors;  // in the file's order

  friend bool operator==(const TensorIndex&, const TensorIndex&) = default;
};

// One weight file inside a tar layer (docs/tensor-index.md, "Tar layers"): its path as the tar
// names it (normalized) and its index, whose layer digest and size are the tar's (an
// uncompressed layer's own, a compressed layer's diffId and uncompressed size) and whose
// file_offset is the member's data offset in the tar.
struct TarTensorIndex {
  std::string file;
  TensorIndex index;
  friend bool operator==(const TarTensorIndex&, const TarTensorIndex&) = default;
};
// A tar followed to its end: every weight file in it (none is an answer too: V then says the
// layer holds no weight file, and readers do not stream it to find out).
struct TarTensorIndexes {
  Digest tar_digest;  // each file's index.layer_digest
  uint64_t tar_size = 0;
  std::vector<TarTensorIndex> files;  // in tar order, one per path
  friend bool operator==(const TarTensorIndexes&, const TarTensorIndexes&) = default;
};

// Deterministic: equal indexes give equal bytes.
std::string SerializeTensorIndex(const TensorIndex& index);
// Errors: kOutOfRange when truncated; kInvalidArgument naming the field or tensor at fault (bad
// magic, version, format, algorithm, reserved; a count over kMaxTensors or more than the bytes
// can hold, checked before allocating; an empty or non-UTF-8 name, a name seen twice; an empty or
// non-printable dtype; rank over 8; a range outside the file or the file outside the layer;
// trailing bytes).
absl::StatusOr<TensorIndex> ParseTensorIndex(std::string_view bytes);

// Whether ParseTensorIndex takes `name` as a tensor's name: 1 to 65,535 bytes of UTF-8.
bool ValidTensorName(std::string_view name);

// The hex of a tensor's hash ("blake3:<hex>" in JSON output).
std::string TensorHashHex(const ChunkHash& hash);

// Streams a layer's bytes, in order, in pieces of any size, and hashes each tensor's range as it
// passes: the one read push and convert make anyway. `header` is the prefix of the file the
// tensor list was parsed from; the bytes streamed there must equal it, so an index never
// describes a header other than the file's own.
class TensorIndexBuilder {
 public:
  // `skeleton` holds everything but the hashes. Errors: kInvalidArgument when two tensors
  // overlap or one lies outside the file (the parsers refuse both already).
  static absl::StatusOr<TensorIndexBuilder> Create(TensorIndex skeleton, std::string header);
  void Update(std::string_view bytes);
  // Errors: kDataLoss naming the layer when the header streamed differs from `header`, or the
  // layer ended before the file did.
  absl::StatusOr<TensorIndex> Finish();

 private:
  TensorIndexBuilder(TensorIndex index, std::string header, std::vector<size_t> order);
  TensorIndex index_;
  std::string header_;
  std::vector<size_t> order_;  // tensors by offset
  size_t next_ = 0;            // in order_
  uint64_t pos_ = 0;           // bytes of the layer seen
  bool header_ok_ = true;
  ChunkHasher hasher_{ChunkDigestAlgorithm::kBlake3};
};

// The index of a file held in memory (tests, and the diff fallback).
absl::StatusOr<TensorIndex> BuildTensorIndex(TensorIndex skeleton, std::string_view layer_bytes);

}  // namespace modelfs
