// Fuzzes ParseChunkIndex: never aborts, and an accepted index serializes to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/oci/chunk_index.h"

using namespace modelfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto idx = ParseChunkIndex(bytes);
  if (!idx.ok()) return 0;
  if (SerializeChunkIndex(*idx) != bytes) abort();
  if (idx->chunk_count() > 0) {
    const uint64_t last = idx->chunk_count() - 1;
    if (idx->ChunkLength(last) == 0 || idx->ChunkLength(last) > idx->chunk_size) abort();
    (void)idx->VerifyChunk(last, bytes.substr(0, std::min<uint64_t>(bytes.size(), 16)));
  }
  return 0;
}
