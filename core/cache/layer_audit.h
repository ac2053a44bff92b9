// LayerAudit: the whole-layer checks of the cache (docs/design.md, "The trust chain"). A layer
// whose every chunk has landed is checked whole: in chunk mode it is sealed at once (every chunk
// matched the chunk index) and then, with CacheOptions::audit, hashed against its digest once
// reads are idle, at background priority; in the whole-layer modes the digest check is what
// makes it servable at all. A mismatch quarantines the layer: nothing of it is served or passed
// through again, its flights are stale, its data file and journal rows go.
//
// A client of the LayerTable (layer_table.h): the methods named ...Locked are called with the
// table's mutex held under the layer's name; the others take it themselves. The read path and a
// flight's end ask it to check a complete layer (AfterChunksLandedLocked); decoded layers, member
// files and the scrub use the seal, the whole-layer check and quarantine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "core/base/clock.h"
#include "core/cache/cache_layer.h"
#include "core/cache/cache_options.h"
#include "core/cache/chunk_journal.h"
#include "core/cache/fetch_scheduler.h"
#include "core/cache/flight_engine.h"
#include "core/cache/layer_store.h"
#include "core/cache/layer_table.h"

namespace modelfs {

struct LayerFileHash;  // verifier.h

class LayerAudit {
 public:
  // Every reference must outlive the checks.
  LayerAudit(LayerTable& table, const CacheOptions& options, Clock* clock,
             FetchScheduler& scheduler, const LayerStore& store, ChunkJournal& journal,
             FlightEngine& flights, CacheCounters& counters)
      : table_(table),
        options_(options),
        time_(clock),
        scheduler_(scheduler),
        store_(store),
        journal_(journal),
        flights_(flights),
        counters_(counters) {}
  LayerAudit(const LayerAudit&) = delete;
  LayerAudit& operator=(const LayerAudit&) = delete;

  // When every chunk of `layer` is here (verified; in the whole-layer modes, present), queues
  // its whole-layer check (RunWholeVerify) on the scheduler's "" pool: at kForeground in the
  // whole-layer modes (readers wait for it), at kVerify in chunk mode.
  void AfterChunksLandedLocked(const std::shared_ptr<CacheLayer>& layer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer->mu);
  // The check of a layer whose chunks are all here (`mode`: the layer's, when it was queued;
  // it does not change once the layer is registered): in chunk mode, the seal then
  // (CacheOptions::audit) the audit; in whole-layer modes, the digest check that makes it
  // servable at all. `hashed`, when given, is that check already done on the bytes as they
  // were written (a decoded layer hashes what it writes), so the file is not read again.
  // Ends the job (CacheLayer::jobs) its caller took.
  void RunWholeVerify(const std::shared_ptr<CacheLayer>& layer, VerifyMode mode,
                      const LayerFileHash* hashed = nullptr);
  // Records the layer verified whole (with its local index, if any) and sealed, when
  // `synced` (its flush) is OK and `gen` still holds. Returns the seal recorded; "" when none
  // was (a failure is logged).
  std::string RecordSeal(const std::shared_ptr<CacheLayer>& layer, uint64_t gen,
                         const absl::Status& synced, const std::string& local_index);
  // Nothing of `layer` is servable or passed through from here on; logged with `reason`,
  // counted, its data file and journal rows removed. A layer quarantined already is left.
  void Quarantine(const std::shared_ptr<CacheLayer>& layer, const std::string& reason);
  // Quarantine's state change: nothing of the layer is servable or passed through from here
  // on, its flights are stale (gen), its bytes no longer counted.
  void WipeLocked(CacheLayer& layer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu);
  // Records `layer` audited in the journal, so a restart does not audit it again.
  void RecordAudited(const std::shared_ptr<CacheLayer>& layer);

 private:
  // Flushes a chunk-mode layer whose every chunk is verified and records it sealed, so that it
  // is served by passthrough from here on and trusted after a restart. False when quarantine
  // or eviction dropped it meanwhile.
  bool SealVerifiedLayer(const std::shared_ptr<CacheLayer>& layer);
  // Rehashes a sealed layer against its digest once reads are idle, at background priority;
  // a mismatch quarantines it.
  void AuditLayer(const std::shared_ptr<CacheLayer>& layer);
  // Marks a layer verified whole with `seal` ("" : not sealed, so no passthrough); once its
  // file is `flushed`, returns the byte ranges of its served chunks to drop (DropPages).
  std::vector<std::pair<uint64_t, uint64_t>> MarkVerifiedLocked(CacheLayer& layer,
                                                                const std::string& seal,
                                                                bool flushed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu);
  void Log(const log::Event& event) const { LogCacheEvent(options_, event); }

  LayerTable& table_;
  const CacheOptions& options_;
  Clock* const time_;
  FetchScheduler& scheduler_;
  const LayerStore& store_;
  ChunkJournal& journal_;
  FlightEngine& flights_;
  CacheCounters& counters_;
};

}  // namespace modelfs
