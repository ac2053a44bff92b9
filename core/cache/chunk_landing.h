// Landing chunks: a fetched chunk is put together from the pieces of a range response and
// hashed as they arrive (ChunkAssembler), checked against its expected hash, written whole to
// the layer's data file, or, when the disk is full, held in memory (MemoryFallback), and marked
// verified; when every chunk of a layer has landed the layer is flushed and sealed. The flights
// are FlightEngine's (flight_engine.h), the seal the checks' (layer_audit.h); the two
// self-contained steps are here.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "core/base/buffer_pool.h"
#include "core/cache/cache_layer.h"
#include "core/cache/layer_table.h"
#include "core/oci/chunk_hash.h"
#include "core/oci/digest.h"

namespace modelfs {

// A chunk as a flight received it: its bytes, and their SHA-256, taken piece by piece as they
// arrived (kChunk mode only).
struct ReceivedChunk {
  absl::string_view bytes;
  std::array<uint8_t, 32> hash{};
};

// The chunk being received: hashed piece by piece as it arrives (while the piece is still in
// the CPU's cache from the socket copy), collected in one buffer, and handed on whole when
// complete. One aligned write of the whole chunk lets the kernel use large page-cache folios:
// writing each piece straight from the transfer's buffer saved this copy but cost more in the
// kernel (small folios), and was slower (docs/snapshotter.md, "The read path").
// Used by one flight's thread; on the per-piece path, so inline.
class ChunkAssembler {
 public:
  // Chunks of at most `chunk_size` bytes; with `hash`, take their hash with that algorithm
  // (chunk mode, the chunk index's).
  // SHA-256 is serial, so it hashes each piece as it arrives, while it is in the CPU's cache.
  // BLAKE3 hashes the whole chunk at once when it is complete: its SIMD code works on many of
  // its 1 KiB blocks at a time, and over a 1 MiB chunk it costs about half what it does over
  // the 16 KiB pieces a transfer delivers (0.17 against 0.36 CPU-s per GiB on one core here).
  ChunkAssembler(uint64_t chunk_size, std::optional<ChunkDigestAlgorithm> hash)
      : buffer_(BufferPool::Shared().Get(chunk_size)),
        hash_whole_(hash == ChunkDigestAlgorithm::kBlake3) {
    if (hash.has_value()) hasher_.emplace(*hash);
  }

  // Starts the chunk over: a new request delivers it from its first byte.
  void Restart() {
    if (hasher_ && !hash_whole_ && have_ > 0) hasher_->Finish();  // discards the partial hash
    have_ = 0;
  }
  // Moves bytes of a chunk of `len` bytes from the front of `data` into the chunk. True once
  // the chunk is complete: then Finish() hands it on.
  bool Take(absl::string_view& data, uint64_t len) {
    const size_t take = std::min<uint64_t>(len - have_, data.size());
    if (hasher_ && !hash_whole_) hasher_->Update(data.data(), take);
    memcpy(buffer_.data() + have_, data.data(), take);
    have_ += take;
    data.remove_prefix(take);
    return have_ == len;
  }
  // The complete chunk (its bytes stay valid until the next Take); the next Take starts the
  // next chunk.
  ReceivedChunk Finish() {
    ReceivedChunk got{absl::string_view(buffer_.data(), have_), {}};
    if (hasher_) {
      if (hash_whole_) hasher_->Update(buffer_.data(), have_);
      got.hash = hasher_->Finish();
    }
    have_ = 0;
    return got;
  }

 private:
  BufferPool::Buffer buffer_;
  const bool hash_whole_;  // hash the chunk in Finish, not piece by piece
  uint64_t have_ = 0;      // bytes of the chunk received
  std::optional<ChunkHasher> hasher_;
};

// While the cache disk is full, verified chunks are served from memory instead of the data
// file; this holds them, oldest first, within a budget (CacheOptions::memory_fallback_bytes).
// The flight engine keeps one, under the table's mutex.
class MemoryFallback {
 public:
  // Keeps `bytes` as chunk `chunk` of `layer` (state kInMemory), dropping the oldest chunks of
  // any layer beyond `budget` bytes (those go back to kMissing). Readers that got a chunk hold
  // their own reference, so dropping one is always safe.
  void Keep(const LayerTable& table, const std::shared_ptr<CacheLayer>& layer, uint64_t chunk,
            std::shared_ptr<const std::string> bytes, uint64_t budget)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu(), layer->mu);
  // Lets go of every chunk of `layer` (quarantined or evicted).
  void Drop(CacheLayer& layer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu);

 private:
  std::deque<std::pair<std::weak_ptr<CacheLayer>, uint64_t>> order_;
  uint64_t bytes_ = 0;
};

}  // namespace modelfs
