// BlobCache's whole-layer checks: the check of a whole-layer mode layer that makes it servable,
// the seal of a chunk-mode layer and its audit at background priority, and quarantine.
#include <string.h>

#include <algorithm>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/base/background_priority.h"
#include "core/cache/blob_cache.h"
#include "core/cache/served_pages.h"
#include "core/cache/verifier.h"

namespace modelfs {

void BlobCache::RunWholeVerify(const std::shared_ptr<Layer>& layer, VerifyMode mode) {
  if (mode == VerifyMode::kChunk) {
    // Every chunk matched the chunk index, which chains to the pinned manifest: the layer is
    // verified. It is sealed now, so that opens from here on get passthrough without waiting
    // for the audit; the audit against the layer digest is defense in depth.
    if (SealVerifiedLayer(layer) && options_.audit) AuditLayer(layer);
    absl::MutexLock lock(&mu_);
    LayerGuard held(*layer, Held(mu_));
    layer->jobs--;
    return;
  }
  // Whole-layer modes: nothing is verified before this check, and readers wait for it.
  const uint64_t gen = layer->gen.load();
  absl::StatusOr<LayerFileHash> hashed =
      HashLayerFile(store_, layer->fd, layer->digest, layer->size, layer->chunk_size,
                    /*with_local_index=*/true);
  if (!hashed.ok() || hashed->digest != layer->digest) {
    if (hashed.ok()) counters_.verification_failures++;
    Quarantine(layer, hashed.ok() ? absl::StrCat("layer ", layer->digest.str(), " (", layer->size,
                                                 " bytes) failed whole-layer verification: got ",
                                                 hashed->digest.str())
                                  : std::string(hashed.status().message()));
    absl::MutexLock lock(&mu_);
    LayerGuard held(*layer, Held(mu_));
    layer->jobs--;
    return;
  }
  std::string local = std::move(hashed->local_index);
  // The data must be on disk before the journal says it is (whole-layer fills never did an
  // fdatasync).
  absl::Status s = store_.Sync(layer->fd, layer->digest);
  const bool synced = s.ok();
  if (s.ok()) {
    std::vector<uint64_t> all(layer->count());
    for (uint64_t c = 0; c < all.size(); ++c) all[c] = c;
    s = RecordChunks(layer, gen, all);
  }
  if (!s.ok()) Log(s.message());
  const std::string seal = RecordSeal(layer, gen, s, local);
  std::vector<std::pair<uint64_t, uint64_t>> drop;
  absl::Cleanup drop_pages = [&] { DropPages(*layer, drop); };  // after the lock below
  absl::MutexLock lock(&mu_);
  LayerGuard held(*layer, Held(mu_));
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

void BlobCache::AuditLayer(const std::shared_ptr<Layer>& layer) {
  if (options_.verify_when_idle > absl::ZeroDuration()) {
    // It can wait for the loader to finish. Idle means no read is being served (one that
    // waits on the network counts as busy) and none ended in the last verify_when_idle.
    absl::MutexLock lock(&mu_);
    const absl::Time give_up = time_->Now() + absl::Seconds(30);
    while (!stopping_ && time_->Now() < give_up &&
           (reads_in_progress_ > 0 || time_->Now() - last_read_ < options_.verify_when_idle)) {
      const absl::Time until = reads_in_progress_ > 0 ? time_->Now() + options_.verify_when_idle
                                                      : last_read_ + options_.verify_when_idle;
      time_->AwaitWithDeadline(mu_, absl::Condition(&stopping_), std::min(give_up, until));
    }
  }
  // The audit reads the whole file: chunks whose pages were dropped once served leave the page
  // cache again behind it.
  std::vector<bool> drop_after;
  if (options_.drop_served_pages) {
    absl::MutexLock lock(&mu_);
    LayerGuard held(*layer, Held(mu_));
    drop_after = layer->dropped;
  }
  absl::StatusOr<LayerFileHash> hashed;
  RunAtBackgroundPriority([&] {
    hashed = HashLayerFile(store_, layer->fd, layer->digest, layer->size, layer->chunk_size,
                           /*with_local_index=*/false, drop_after);
  });
  if (hashed.ok() && hashed->digest == layer->digest) {
    counters_.audited_layers++;
    {
      absl::MutexLock lock(&mu_);
      LayerGuard held(*layer, Held(mu_));
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

void BlobCache::Quarantine(const std::shared_ptr<Layer>& layer, const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    LayerGuard held(*layer, Held(mu_));
    if (layer->quarantined) return;
    layer->quarantined = true;
    layer->whole_verified = false;
    layer->seal.clear();
    layer->gen++;
    for (uint64_t c = 0; c < layer->count(); ++c) {
      layer->state[c] = ChunkState::kMissing;
      layer->flight[c] = nullptr;
    }
    cached_bytes_ -= layer->cached_bytes;
    layer->cached_bytes = 0;
    memory_.Drop(*layer);
    // Still under mu_ (a rare event): a reader woken by the flag sees the layer fully wiped.
    counters_.quarantined_layers++;
    Log(absl::StrCat("quarantined layer ", layer->digest.str(), ": ", reason));
    journal_.Forget(layer->digest.str());
    store_.Remove(layer->digest);
  }
}

}  // namespace modelfs
