// ChunkIndex: one SHA-256 per fixed-size chunk of a blob, so a lazily fetched layer can be
// verified chunk by chunk. The index itself is a blob whose digest is named inside the volume
// image's verified manifest chain (see docs/chunk-index.md for the on-wire format).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/oci/digest.h"

namespace modelfs {

struct ChunkIndex {
  static constexpr uint32_t kVersion = 1;
  static constexpr uint64_t kDefaultChunkSize = 4ull << 20;

  Digest blob_digest;           // the layer this index describes
  uint64_t blob_size = 0;
  uint64_t chunk_size = kDefaultChunkSize;  // power of two, 64 KiB .. 64 MiB
  std::vector<std::array<uint8_t, 32>> chunks;  // ceil(blob_size / chunk_size) entries

  uint64_t chunk_count() const { return chunks.size(); }
  // Byte length of chunk i (the last one may be short).
  uint64_t ChunkLength(uint64_t i) const;
};

// Builds an index by streaming: feed the blob's bytes in order with Update, then Finish.
// Also computes the whole-blob digest, so one pass both verifies a layer and indexes it.
class ChunkIndexBuilder {
 public:
  explicit ChunkIndexBuilder(uint64_t chunk_size = ChunkIndex::kDefaultChunkSize);
  void Update(std::string_view bytes);
  ChunkIndex Finish();  // blob_digest is the SHA-256 of everything fed

 private:
  uint64_t chunk_size_;
  uint64_t total_ = 0;
  uint64_t in_chunk_ = 0;
  Sha256 whole_;
  Sha256 chunk_;
  std::vector<std::array<uint8_t, 32>> chunks_;
};

// Serialization (implemented in chunk_index.cc).
std::string SerializeChunkIndex(const ChunkIndex& index);
// Errors: kInvalidArgument naming the field at fault (bad magic/version, chunk size not a
// power of two in range, count not matching blob_size / chunk_size, truncated).
absl::StatusOr<ChunkIndex> ParseChunkIndex(std::string_view bytes);

}  // namespace modelfs
