// LayerEviction: taking layers out of the cache to make room (CacheOptions::max_bytes, a full
// disk) or on request (`modelfs node evict`). Only a layer no model references and nothing
// reads, fetches or verifies is evicted: it leaves the table under the lock, then its data file
// and journal rows go without it, so a later registration fetches and verifies it afresh.
//
// A client of the LayerTable (layer_table.h); it drops a layer's chunks held in memory through
// the FlightEngine.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "core/cache/cache_layer.h"
#include "core/cache/cache_options.h"
#include "core/cache/chunk_journal.h"
#include "core/cache/flight_engine.h"
#include "core/cache/layer_store.h"
#include "core/cache/layer_table.h"
#include "core/oci/digest.h"

namespace modelfs {

class LayerEviction {
 public:
  // Every reference must outlive it.
  LayerEviction(LayerTable& table, const CacheOptions& options, const LayerStore& store,
                ChunkJournal& journal, FlightEngine& flights, CacheCounters& counters)
      : table_(table),
        options_(options),
        store_(store),
        journal_(journal),
        flights_(flights),
        counters_(counters) {}
  LayerEviction(const LayerEviction&) = delete;
  LayerEviction& operator=(const LayerEviction&) = delete;

  // Evicts unreferenced, idle layers, least recently used first, until at most `target` bytes
  // are cached. Returns the layers and bytes evicted.
  std::pair<uint64_t, uint64_t> EvictUnreferenced(uint64_t target);
  // BlobCache::EvictLayers.
  CacheEvictResult EvictLayers(const std::vector<Digest>& digests);

 private:
  // Takes `layer` out of the table and its bytes out of the table's count; the caller then
  // calls FinishEvict with what it returns, without the lock.
  uint64_t UnlinkLocked(const std::shared_ptr<CacheLayer>& layer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu());
  void FinishEvict(const std::shared_ptr<CacheLayer>& layer, uint64_t bytes, absl::string_view why);
  void Log(const log::Event& event) const { LogCacheEvent(options_, event); }

  LayerTable& table_;
  const CacheOptions& options_;
  const LayerStore& store_;
  ChunkJournal& journal_;
  FlightEngine& flights_;
  CacheCounters& counters_;
};

}  // namespace modelfs
