// The memory fallback (chunk_landing.h). The flights that land chunks are FlightEngine's
// (flight_engine.cc); what a flight's end means for the cache is BlobCache's (blob_cache.cc).
#include "core/cache/chunk_landing.h"

namespace modelfs {

void MemoryFallback::Keep(const LayerTable& table, const std::shared_ptr<CacheLayer>& layer,
                          uint64_t chunk, std::shared_ptr<const std::string> bytes,
                          uint64_t budget) {
  bytes_ += bytes->size();
  auto& slot = layer->in_memory[chunk];
  if (slot) bytes_ -= slot->size();
  slot = std::move(bytes);
  layer->state[chunk] = ChunkState::kInMemory;
  order_.emplace_back(layer, chunk);
  while (bytes_ > budget && !order_.empty()) {
    auto [weak, c] = order_.front();
    order_.pop_front();
    std::shared_ptr<CacheLayer> l = weak.lock();
    if (!l) continue;
    LayerGuard held_l(*l, Held(table));
    auto it = l->in_memory.find(c);
    if (it == l->in_memory.end()) continue;
    bytes_ -= it->second->size();
    l->in_memory.erase(it);
    if (l->state[c] == ChunkState::kInMemory) l->state[c] = ChunkState::kMissing;
  }
}

void MemoryFallback::Drop(CacheLayer& layer) {
  for (const auto& [c, bytes] : layer.in_memory) bytes_ -= bytes->size();
  layer.in_memory.clear();
}

}  // namespace modelfs
