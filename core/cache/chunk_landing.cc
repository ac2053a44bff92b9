// The memory fallback (chunk_landing.h), and BlobCache's side of a landing: what the end of a
// flight means for the cache (FlightEngine::Owner: the pumps, eviction), the check of a layer
// whose chunks are all here, and sealing. The flights themselves are FlightEngine's
// (flight_engine.cc).
#include "core/cache/chunk_landing.h"

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/cache/blob_cache.h"
#include "core/cache/served_pages.h"

namespace modelfs {

void MemoryFallback::Keep(const std::shared_ptr<CacheLayer>& layer, uint64_t chunk,
                          std::shared_ptr<const std::string> bytes, uint64_t budget) {
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
    LayerGuard held_l(*l, Held(layer->mu));
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

bool BlobCache::disk_full() const {
  absl::MutexLock lock(&mu_);
  return DiskFullLocked();
}

// ---------------------------------------------------------------------------------------------
// What a flight's end means for the cache (FlightEngine::Owner).

void BlobCache::ChunkCachedLocked(Layer& layer, uint64_t bytes) {
  TableGuard g(mu_, Held(layer.mu));
  layer.cached_bytes += bytes;
  cached_bytes_ += bytes;
}

void BlobCache::DiskFilledLocked(const Layer& layer) {
  TableGuard g(mu_, Held(layer.mu));
  for (auto& l : bulk_layers_) {
    LayerGuard held_l(*l, Held(mu_));
    l->bulk_active = false;
  }
  bulk_layers_.clear();
}

bool BlobCache::FlightEndedLocked(const std::shared_ptr<Layer>& layer, bool bulk, bool stream,
                                  bool failed, bool stale) {
  TableGuard g(mu_, Held(layer->mu));
  if (bulk) {
    bulk_in_flight_--;
    PumpBulkLocked();
  }
  if (stream) {
    layer->stream_in_flight--;
    if (stale || failed) layer->streaming = false;  // the reader's own fetches go on
    PumpStreamLocked(layer);
  }
  if (!stale) AfterChunksLandedLocked(layer);
  return options_.max_bytes > 0 && cached_bytes_ > options_.max_bytes;
}

absl::Time BlobCache::IdleAtLocked() const {
  mu_.AssertHeld();  // the engine calls with the table mutex, under its own name
  if (reads_in_progress_ > 0) return absl::InfiniteFuture();
  return last_read_ + options_.verify_when_idle;
}

void BlobCache::AfterFlight(bool became_full, bool over_budget) {
  if (became_full) {
    // Make room for the models in use: what no model references goes first, all of it.
    auto [layers, bytes] = EvictUnreferenced(0);
    Log(log::Error("cache",
                   "cache directory is full (no space left on device): serving verified bytes "
                   "from the network without caching them, readahead and prefetch paused")
            .Field("dir", options_.dir)
            .Field("evicted_layers", layers)
            .Field("evicted_bytes", bytes));
  } else if (over_budget) {
    EnforceSizeLimit();
  }
}

void BlobCache::AfterChunksLandedLocked(const std::shared_ptr<Layer>& layer) {
  if (layer->quarantined || layer->whole_verified || layer->whole_verify_scheduled) return;
  for (uint64_t c = 0; c < layer->count(); ++c) {
    const ChunkState s = layer->state[c];
    if (s == ChunkState::kVerified) continue;
    if (s == ChunkState::kPresent && layer->mode != VerifyMode::kChunk) continue;
    return;
  }
  layer->whole_verify_scheduled = true;
  layer->jobs++;
  // Readers of a whole-layer mode wait for this check; in chunk mode it is a background audit.
  const VerifyMode mode = layer->mode;
  SubmitLocalLocked(mode == VerifyMode::kChunk ? kVerify : kForeground,
                    [this, layer, mode] { RunWholeVerify(layer, mode); });
}

std::vector<std::pair<uint64_t, uint64_t>> BlobCache::MarkVerifiedLocked(Layer& layer,
                                                                         const std::string& seal,
                                                                         bool flushed) {
  layer.whole_verified = true;
  layer.seal = seal;
  if (!flushed) return {};
  std::vector<uint64_t> all(layer.count());
  for (uint64_t c = 0; c < all.size(); ++c) all[c] = c;
  return TakeServedDrops(layer, all, options_.drop_served_pages,
                         counters_.page_cache_bytes_dropped);
}

std::string BlobCache::RecordSeal(const std::shared_ptr<Layer>& layer, uint64_t gen,
                                  const absl::Status& synced, const std::string& local_index) {
  if (!synced.ok()) return std::string();
  LayerRecord record;
  {
    absl::MutexLock lock(&mu_);
    LayerGuard held(*layer, Held(mu_));
    record = RecordOf(*layer, true, std::string(), std::string());
  }
  record.local_index = local_index;
  // Taken after the flush: nothing writes a verified layer's file again.
  std::string seal = layer->Segments()->Seal();
  if (layer->gen.load() != gen) return std::string();
  record.seal = seal;
  absl::Status s = journal_.UpsertLayer(record);
  if (!s.ok()) {
    Log(log::Warn("cache", s.message()));
    return std::string();
  }
  return seal;
}

bool BlobCache::SealVerifiedLayer(const std::shared_ptr<Layer>& layer) {
  const uint64_t gen = layer->gen.load();
  // Chunk fetches defer their fdatasync to PersistPending: flush before the journal says the
  // layer is whole.
  const absl::Status synced = layer->Segments()->Sync(store_, layer->digest);
  if (!synced.ok()) Log(log::Warn("cache", synced.message()));
  const std::string seal = RecordSeal(layer, gen, synced, "");
  std::vector<std::pair<uint64_t, uint64_t>> drop;
  absl::Cleanup drop_pages = [&] { DropPages(*layer, drop); };  // after the lock below
  absl::MutexLock lock(&mu_);
  LayerGuard held(*layer, Held(mu_));
  if (layer->gen.load() != gen || layer->quarantined) return false;
  counters_.sealed_layers++;
  drop = MarkVerifiedLocked(*layer, seal, synced.ok());
  return true;
}

}  // namespace modelfs
