// The cache's verifier: the SHA-256 checks that decide which bytes are good (docs/design.md,
// "The trust chain", steps 5 to 8). A chunk is good when it matches its hash in the chunk index (or
// in the local index of a layer verified whole); a layer is good when its data file hashes to the
// layer digest.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/cache/layer_segments.h"
#include "core/cache/layer_store.h"
#include "core/oci/chunk_hash.h"
#include "core/oci/digest.h"

namespace modelfs {

// ChunkHash comes from core/oci/chunk_hash.h; HashChunk is SHA-256 (local indexes).

ChunkHash HashChunk(absl::string_view bytes);

// OK when chunk `chunk` of `layer`, `length` bytes at `offset`, hashed to `got` (as its pieces
// arrived) is `want`; kDataLoss naming the layer, the chunk, its byte range and both hashes
// otherwise.
absl::Status CheckChunkHash(const ChunkHash& got, const ChunkHash& want, const Digest& layer,
                            uint64_t chunk, uint64_t offset, uint64_t length);

// The whole-layer check of a complete data file: its SHA-256 and, when `with_local_index`,
// the hash of each `chunk_size` chunk (32 bytes each, in order: the local index of a layer
// that has no chunk index).
struct LayerFileHash {
  Digest digest;
  std::string local_index;
};
// A page-cache folio is dropped (POSIX_FADV_DONTNEED) only when all of it is in the range, and
// readahead builds folios up to 2 MiB that may span chunks: a drop of a chunk's pages takes in
// this much of the chunks before it that were dropped too.
constexpr uint64_t kPageDropReach = 4ull << 20;

// Chunks `c` with `drop_after[c]` leave the page cache once hashed (POSIX_FADV_DONTNEED).
// Errors: kInternal (reading the file, naming it and the offset).
absl::StatusOr<LayerFileHash> HashLayerFile(const LayerStore& store, const LayerSegments& files,
                                            const Digest& layer, uint64_t size, uint64_t chunk_size,
                                            bool with_local_index,
                                            const std::vector<bool>& drop_after = {});

}  // namespace modelfs
