#include "core/cache/served_pages.h"

#include <fcntl.h>

#include <algorithm>

#include "core/cache/verifier.h"

namespace modelfs {

std::vector<uint64_t> CountServed(CacheLayer& layer, uint64_t from, uint64_t to) {
  const uint64_t cs = layer.chunk_size;
  std::vector<uint64_t> whole;
  for (uint64_t c = from / cs; c <= (to - 1) / cs; ++c) {
    if (!layer.Servable(c)) continue;
    const uint64_t len = layer.ChunkLen(c);
    const uint64_t overlap = std::min(to, c * cs + len) - std::max(from, c * cs);
    layer.served[c] = static_cast<uint32_t>(std::min<uint64_t>(layer.served[c] + overlap, len));
    if (layer.served[c] >= len && layer.durable[c]) whole.push_back(c);
  }
  return whole;
}

PageRanges TakeServedDrops(CacheLayer& layer, const std::vector<uint64_t>& chunks,
                           bool drop_served_pages, std::atomic<uint64_t>& dropped_bytes) {
  PageRanges ranges;
  for (uint64_t c : chunks) {
    if (c >= layer.count() || layer.state[c] == ChunkState::kMissing ||
        layer.state[c] == ChunkState::kInFlight || layer.state[c] == ChunkState::kInMemory) {
      continue;
    }
    layer.durable[c] = true;
    if (drop_served_pages && layer.served[c] >= layer.ChunkLen(c)) {
      layer.served[c] = 0;
      layer.dropped[c] = true;
      dropped_bytes += layer.ChunkLen(c);
      uint64_t from = c * layer.chunk_size;
      const uint64_t to = from + layer.ChunkLen(c);
      if (!ranges.empty() && ranges.back().second >= from) {
        ranges.back().second = to;
        continue;
      }
      // Folios that span into the dropped chunks before go too (kPageDropReach).
      for (uint64_t b = c; b > 0 && layer.dropped[b - 1] && to - from < kPageDropReach; --b) {
        from -= layer.chunk_size;
      }
      ranges.emplace_back(from, to);
    }
  }
  return ranges;
}

void DropPages(const CacheLayer& layer, const PageRanges& ranges) {
  if (ranges.empty()) return;
  const std::shared_ptr<const LayerSegments> segments = layer.Segments();
  for (const auto& [from, to] : ranges) segments->Advise(from, to, POSIX_FADV_DONTNEED);
}

}  // namespace modelfs
