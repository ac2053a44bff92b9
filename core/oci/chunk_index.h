// ChunkIndex: one hash per fixed-size chunk of a blob (BLAKE3, or SHA-256 in version 1 indexes
// and on request), so a lazily fetched layer can be verified chunk by chunk. The index itself is
// a blob whose digest is named inside the volume image's verified manifest chain (see
// docs/chunk-index.md for the on-wire format).
//
// Thread safety: ChunkIndex is an immutable-after-build value (const methods are safe to call
// concurrently); a ChunkIndexBuilder belongs to one thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/oci/chunk_hash.h"
#include "core/oci/digest.h"

namespace modelfs {

struct ChunkIndex {
  // Version 1: SHA-256 chunk hashes, 68-byte header. Version 2: the header names the hash
  // algorithm (80 bytes). A SHA-256 index is written as version 1, so indexes published before
  // version 2 existed and their rebuilds stay byte-identical.
  static constexpr uint32_t kVersion1 = 1;
  static constexpr uint32_t kVersion2 = 2;
  // 1 MiB: a mount's first reads (safetensors/GGUF headers) cost one chunk each, keeping
  // time-to-ready under 1% of a 256 MiB model, while range coalescing keeps streaming fast.
  static constexpr uint64_t kDefaultChunkSize = 1ull << 20;
  static constexpr uint64_t kMinChunkSize = 64ull << 10;
  static constexpr uint64_t kMaxChunkSize = 64ull << 20;
  static constexpr size_t kHeaderSizeV1 = 68;  // magic 8 + version 4 + 3*8 + digest 32
  static constexpr size_t kHeaderSizeV2 = 80;  // v1 + algorithm 4 + content 4 + reserved 4

  // What the hashes cover (version 2's `content` field).
  enum class Content : uint32_t {
    kStored = 0,  // the blob's bytes as stored in the registry; blob_digest is its OCI digest
    // The uncompressed bytes of a .tar+gzip/.tar+zstd layer, served through its seek index
    // (seek_index.h); blob_digest is the layer's diffId and blob_size the uncompressed size.
    kUncompressed = 1,
  };

  // The bytes this index describes: the layer (its SHA-256 OCI digest), or for kUncompressed
  // its uncompressed tar (the diffId).
  Digest blob_digest;
  Content content = Content::kStored;
  ChunkDigestAlgorithm algorithm = ChunkDigestAlgorithm::kSha256;  // of the chunk hashes
  uint64_t blob_size = 0;
  uint64_t chunk_size = kDefaultChunkSize;  // power of two, 64 KiB .. 64 MiB
  std::vector<ChunkHash> chunks;            // ceil(blob_size / chunk_size) entries

  uint64_t chunk_count() const { return chunks.size(); }
  // Byte length of chunk i (the last one may be short); 0 when i is out of range.
  uint64_t ChunkLength(uint64_t i) const;
  // Byte offset of chunk i in the blob.
  uint64_t ChunkOffset(uint64_t i) const { return i * chunk_size; }

  // Checks that `bytes` are exactly chunk i. Errors: kOutOfRange for a chunk number past the
  // end, kDataLoss "chunk i of <blob digest> ..." for wrong length or content.
  absl::Status VerifyChunk(uint64_t i, std::string_view bytes) const;

  // True for a power of two in [kMinChunkSize, kMaxChunkSize].
  static bool ValidChunkSize(uint64_t chunk_size);

  friend bool operator==(const ChunkIndex&, const ChunkIndex&) = default;
};

// Builds an index by streaming: feed the blob's bytes in order with Update, then Finish.
// Also computes the whole-blob digest (SHA-256), so one pass both verifies a layer and indexes
// it. `chunk_size` must satisfy ChunkIndex::ValidChunkSize (checked by callers; an invalid one
// falls back to kDefaultChunkSize).
class ChunkIndexBuilder {
 public:
  explicit ChunkIndexBuilder(uint64_t chunk_size = ChunkIndex::kDefaultChunkSize,
                             ChunkDigestAlgorithm algorithm = ChunkDigestAlgorithm::kSha256);
  void Update(std::string_view bytes);
  ChunkIndex Finish();  // blob_digest is the SHA-256 of everything fed; call once

 private:
  uint64_t chunk_size_;
  uint64_t total_ = 0;
  uint64_t in_chunk_ = 0;
  Sha256 whole_;
  ChunkHasher chunk_;
  std::vector<ChunkHash> chunks_;
};

// Convenience: the index of bytes held in memory.
ChunkIndex BuildChunkIndex(std::string_view blob,
                           uint64_t chunk_size = ChunkIndex::kDefaultChunkSize,
                           ChunkDigestAlgorithm algorithm = ChunkDigestAlgorithm::kSha256);

// The length of SerializeChunkIndex's output for a blob of `blob_size` bytes, without building
// it (sizes a volume image before any layer is read).
uint64_t SerializedChunkIndexSize(uint64_t blob_size, uint64_t chunk_size,
                                  ChunkDigestAlgorithm algorithm);

// Serialization (docs/chunk-index.md). Deterministic: equal indexes give equal bytes. SHA-256
// indexes of stored bytes are written as version 1, others (BLAKE3, or kUncompressed) as
// version 2.
std::string SerializeChunkIndex(const ChunkIndex& index);
// Reads versions 1 and 2. Errors: kInvalidArgument naming the field at fault (bad
// magic/version, unknown algorithm, content not 0 or 1, reserved field not 0, version 2
// naming SHA-256 for stored bytes, chunk size not a power of
// two in range, count not matching blob_size / chunk_size, trailing bytes); kOutOfRange when
// truncated.
absl::StatusOr<ChunkIndex> ParseChunkIndex(std::string_view bytes);

}  // namespace modelfs
