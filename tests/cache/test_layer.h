// A CacheLayer for tests of the cache's pieces: `chunks` chunks of 1 MiB, all in `state`, with
// no data file. The caller holds `mu`, which stands for the cache's mutex.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "core/cache/cache_layer.h"

namespace modelfs {

constexpr uint64_t kMiB = 1ull << 20;

inline std::shared_ptr<CacheLayer> MakeTestLayer(absl::Mutex& mu, uint64_t chunks, ChunkState state)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  auto layer =
      std::make_shared<CacheLayer>(mu, Digest::Of("layer"), chunks * kMiB, kMiB, /*fd=*/-1);
  LayerGuard held(*layer, Held(mu));
  layer->ResetChunks(state);
  return layer;
}

}  // namespace modelfs
