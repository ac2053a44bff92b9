// LayerAudit (layer_audit.h): the check of a whole-layer mode layer that makes it servable, the
// seal of a chunk-mode layer and its audit at background priority, and quarantine.
#include "core/cache/layer_audit.h"

#include <fcntl.h>
#include <string.h>

#include <algorithm>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/base/background_priority.h"
#include "core/cache/served_pages.h"
#include "core/cache/verifier.h"

namespace modelfs {

void LayerAudit::AfterChunksLandedLocked(const std::shared_ptr<CacheLayer>& layer) {
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
  scheduler_.Submit(
      "", mode == VerifyMode::kChunk ? FetchPriority::kVerify : FetchPriority::kForeground,
      [this, layer, mode] { RunWholeVerify(layer, mode); });
}

std::vector<std::pair<uint64_t, uint64_t>> LayerAudit::MarkVerifiedLocked(CacheLayer& layer,
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

std::string LayerAudit::RecordSeal(const std::shared_ptr<CacheLayer>& layer, uint64_t gen,
                                   const absl::Status& synced, const std::string& local_index) {
  if (!synced.ok()) return std::string();
  LayerRecord record;
  {
    LayerLock lock(table_, *layer);
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

bool LayerAudit::SealVerifiedLayer(const std::shared_ptr<CacheLayer>& layer) {
  const uint64_t gen = layer->gen.load();
  // Chunk fetches defer their fdatasync to PersistPending: flush before the journal says the
  // layer is whole.
  const absl::Status synced = layer->Segments()->Sync(store_, layer->digest);
  if (!synced.ok()) Log(log::Warn("cache", synced.message()));
  const std::string seal = RecordSeal(layer, gen, synced, "");
  std::vector<std::pair<uint64_t, uint64_t>> drop;
  absl::Cleanup drop_pages = [&] { DropPages(*layer, drop); };  // after the lock below
  LayerLock lock(table_, *layer);
  if (layer->gen.load() != gen || layer->quarantined) return false;
  counters_.sealed_layers++;
  drop = MarkVerifiedLocked(*layer, seal, synced.ok());
  return true;
}

void LayerAudit::RunWholeVerify(const std::shared_ptr<CacheLayer>& layer, VerifyMode mode,
                                const LayerFileHash* precomputed) {
  if (mode == VerifyMode::kChunk) {
    // Every chunk matched the chunk index, which chains to the pinned manifest: the layer is
    // verified. It is sealed now, so that opens from here on get passthrough without waiting
    // for the audit; the audit against the layer digest is defense in depth.
    if (SealVerifiedLayer(layer) && options_.audit) AuditLayer(layer);
    LayerLock lock(table_, *layer);
    layer->jobs--;
    return;
  }
  // Whole-layer modes: nothing is verified before this check, and readers wait for it.
  const uint64_t gen = layer->gen.load();
  absl::StatusOr<LayerFileHash> hashed =
      precomputed != nullptr ? absl::StatusOr<LayerFileHash>(*precomputed)
                             : HashLayerFile(store_, *layer->Segments(), layer->digest, layer->size,
                                             layer->chunk_size, /*with_local_index=*/true);
  if (!hashed.ok() || hashed->digest != layer->digest) {
    if (hashed.ok()) counters_.verification_failures++;
    Quarantine(layer, hashed.ok() ? absl::StrCat("layer ", layer->digest.str(), " (", layer->size,
                                                 " bytes) failed whole-layer verification: got ",
                                                 hashed->digest.str())
                                  : std::string(hashed.status().message()));
    LayerLock lock(table_, *layer);
    layer->jobs--;
    return;
  }
  std::string local = std::move(hashed->local_index);
  // The data must be on disk before the journal says it is (whole-layer fills never did an
  // fdatasync).
  absl::Status s = layer->Segments()->Sync(store_, layer->digest);
  const bool synced = s.ok();
  if (s.ok()) {
    std::vector<uint64_t> all(layer->count());
    for (uint64_t c = 0; c < all.size(); ++c) all[c] = c;
    s = flights_.RecordChunks(layer, gen, all);
  }
  if (!s.ok()) Log(log::Warn("cache", s.message()));
  const std::string seal = RecordSeal(layer, gen, s, local);
  std::vector<std::pair<uint64_t, uint64_t>> drop;
  absl::Cleanup drop_pages = [&] { DropPages(*layer, drop); };  // after the lock below
  LayerLock lock(table_, *layer);
  layer->jobs--;
  if (layer->gen.load() != gen || layer->quarantined) return;
  layer->expected.resize(layer->count());
  layer->expected_algorithm = ChunkDigestAlgorithm::kSha256;  // a local index
  for (uint64_t c = 0; c < layer->count(); ++c) {
    memcpy(layer->expected[c].data(), &local[c * 32], 32);
    if (layer->state[c] == ChunkState::kPresent) layer->state[c] = ChunkState::kVerified;
  }
  drop = MarkVerifiedLocked(*layer, seal, synced);
}

void LayerAudit::AuditLayer(const std::shared_ptr<CacheLayer>& layer) {
  if (options_.verify_when_idle > absl::ZeroDuration()) {
    // It can wait for the loader to finish. Idle means no read is being served (one that
    // waits on the network counts as busy) and none ended in the last verify_when_idle.
    TableLock lock(table_);
    const absl::Time give_up = time_->Now() + absl::Seconds(30);
    while (!table_.closing() && time_->Now() < give_up &&
           (table_.reads_in_progress() > 0 ||
            time_->Now() - table_.last_read() < options_.verify_when_idle)) {
      const absl::Time until = table_.reads_in_progress() > 0
                                   ? time_->Now() + options_.verify_when_idle
                                   : table_.last_read() + options_.verify_when_idle;
      time_->AwaitWithDeadline(table_.mu(), table_.Closing(), std::min(give_up, until));
    }
  }
  // The audit reads the whole file: chunks whose pages were dropped once served leave the page
  // cache again behind it.
  std::vector<bool> drop_after;
  if (options_.drop_served_pages) {
    LayerLock lock(table_, *layer);
    drop_after = layer->dropped;
  }
  absl::StatusOr<LayerFileHash> hashed;
  RunAtBackgroundPriority([&] {
    hashed =
        HashLayerFile(store_, *layer->Segments(), layer->digest, layer->size, layer->chunk_size,
                      /*with_local_index=*/false, drop_after);
  });
  if (hashed.ok() && hashed->digest == layer->digest) {
    counters_.audited_layers++;
    {
      LayerLock lock(table_, *layer);
      layer->audited = true;
    }
    RecordAudited(layer);  // the scrub after a restart need not audit it again
    return;
  }
  if (hashed.ok()) counters_.verification_failures++;
  Quarantine(layer, hashed.ok() ? absl::StrCat("layer ", layer->digest.str(), " (", layer->size,
                                               " bytes) failed the whole-layer audit: its chunks "
                                               "match the chunk index, the layer digest does not: "
                                               "got ",
                                               hashed->digest.str())
                                : std::string(hashed.status().message()));
}

void LayerAudit::RecordAudited(const std::shared_ptr<CacheLayer>& layer) {
  if (absl::Status s = journal_.MarkAudited(layer->digest.str()); !s.ok())
    Log(log::Warn("cache", s.message()));
}

void LayerAudit::WipeLocked(CacheLayer& layer) {
  layer.quarantined = true;
  layer.whole_verified = false;
  layer.seal.clear();
  layer.gen++;
  for (uint64_t c = 0; c < layer.count(); ++c) {
    layer.state[c] = ChunkState::kMissing;
    layer.flight[c] = nullptr;
  }
  table_.RemoveLayerBytes(layer, layer.cached_bytes);
  flights_.DropMemoryLocked(layer);
}

void LayerAudit::Quarantine(const std::shared_ptr<CacheLayer>& layer, const std::string& reason) {
  {
    LayerLock lock(table_, *layer);
    if (layer->quarantined) return;
    WipeLocked(*layer);
    // Still under the lock (a rare event): a reader woken by the flag sees the layer fully wiped.
    counters_.quarantined_layers++;
    Log(log::Error("cache", "quarantined layer")
            .Field("digest", layer->digest.str())
            .Range(0, layer->size == 0 ? 0 : layer->size - 1)
            .Field("registry", layer->endpoint)
            .Field("reason", reason));
    journal_.Forget(layer->digest.str());
    store_.Remove(layer->digest);
  }
}

}  // namespace modelfs
