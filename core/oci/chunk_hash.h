// The hash a chunk index is written with: SHA-256 (version 1 indexes, and version 2 on request)
// or BLAKE3 (the default for new indexes: about 3.4x less CPU than SHA-256 at SHA-NI speed, so
// a cold load spends its CPU on moving bytes, not on checking them). Both give 32 bytes. The
// OCI layer digest stays SHA-256; only the per-chunk hashes of an index use this.
//
// Thread safety: ChunkHasher belongs to one thread; the free functions are reentrant.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"

namespace modelfs {

// The numbers are the on-disk values of a version 2 chunk index (docs/chunk-index.md).
enum class ChunkDigestAlgorithm : uint32_t { kSha256 = 1, kBlake3 = 2 };

using ChunkHash = std::array<uint8_t, 32>;

// "sha256" or "blake3": the names go-digest and OCI use for the algorithms.
std::string_view ChunkDigestName(ChunkDigestAlgorithm algorithm);
// The inverse of ChunkDigestName. Errors: kInvalidArgument naming the value.
absl::StatusOr<ChunkDigestAlgorithm> ParseChunkDigestName(std::string_view name);
// True for a value a version 2 index may carry.
bool KnownChunkDigestAlgorithm(uint32_t value);

// Streams bytes into one hash of either algorithm.
class ChunkHasher {
 public:
  explicit ChunkHasher(ChunkDigestAlgorithm algorithm);
  ~ChunkHasher();
  ChunkHasher(ChunkHasher&&) noexcept;
  ChunkHasher& operator=(ChunkHasher&&) noexcept;

  ChunkDigestAlgorithm algorithm() const { return algorithm_; }
  void Update(const void* data, size_t n);
  void Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }
  // The hash of everything fed since construction or the last Finish; the hasher then starts
  // over, so one hasher serves a whole layer's chunks.
  ChunkHash Finish();

 private:
  struct State;
  ChunkDigestAlgorithm algorithm_;
  std::unique_ptr<State> state_;
};

// The hash of `bytes` in one call.
ChunkHash HashChunkBytes(ChunkDigestAlgorithm algorithm, std::string_view bytes);

}  // namespace modelfs
