// A CacheLayer for tests of the cache's pieces: `chunks` chunks of 1 MiB, all in `state`, with
// no data file, made by `table` (whose mutex the caller holds: TableLock).
#pragma once

#include <cstdint>
#include <memory>

#include "core/cache/cache_layer.h"
#include "core/cache/layer_table.h"

namespace modelfs {

constexpr uint64_t kMiB = 1ull << 20;

inline std::shared_ptr<CacheLayer> MakeTestLayer(const LayerTable& table, uint64_t chunks,
                                                 ChunkState state)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu()) {
  auto layer = table.NewLayer(Digest::Of("layer"), chunks * kMiB, kMiB, /*fd=*/-1);
  LayerGuard held(*layer, Held(table));
  layer->ResetChunks(state);
  return layer;
}

}  // namespace modelfs
