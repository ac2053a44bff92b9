// The cache's verifier: the SHA-256 checks that decide which bytes are good (DESIGN.md
// "Trust chain" 3-5). A chunk is good when it matches its hash in the chunk index (or in the
// local index of a layer verified whole); a layer is good when its data file hashes to the
// layer digest.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/cache/layer_store.h"
#include "core/oci/digest.h"

namespace modelfs {

using ChunkHash = std::array<uint8_t, 32>;

ChunkHash HashChunk(absl::string_view bytes);

// OK when `bytes`, chunk `chunk` of `layer` at `offset`, hash to `want`; kDataLoss naming the
// layer, the chunk, its byte range and both hashes otherwise.
absl::Status CheckChunk(absl::string_view bytes, const ChunkHash& want, const Digest& layer,
                        uint64_t chunk, uint64_t offset);

// The whole-layer check of a complete data file: its SHA-256 and, when `with_local_index`,
// the hash of each `chunk_size` chunk (32 bytes each, in order: the local index of a layer
// that has no chunk index).
struct LayerFileHash {
  Digest digest;
  std::string local_index;
};
// Errors: kInternal (reading the file, naming it and the offset).
absl::StatusOr<LayerFileHash> HashLayerFile(const LayerStore& store, int fd, const Digest& layer,
                                            uint64_t size, uint64_t chunk_size,
                                            bool with_local_index);

}  // namespace modelfs
