// FlightEngine: the cache's fetch side. The read side (BlobCache's reads, prefetch, the bulk and
// stream pumps, renewal) asks it for the missing chunks of a layer; it makes flights of them
// (one range request each, at most max_request bytes), queues them on the FetchScheduler, and
// runs each: the range streamed from the RemoteBlobSource, each chunk assembled and hashed as it
// arrives (ChunkAssembler), checked against its expected hash, written to the layer's data file
// (or, the disk full, kept in memory: MemoryFallback) and made servable at once; a wrong answer
// fetched once more, transient errors retried within the flight's deadline. The verified
// chunks are then fdatasync'd and recorded in the journal in batches (persistence), off the read
// path. What a flight's end means for the layer (the pumps go on, a complete layer is checked and
// sealed, eviction) is the cache's: the engine tells it through Owner.
//
// The read side calls only ScheduleLocked, Promote, DiskFullLocked and DropMemoryLocked (and
// the cache's end: StopLocked, PersistPending); the engine calls only Owner, and the table
// (layer_table.h: the bytes cached, the read activity). Both are clients of the LayerTable,
// whose mutex guards the per-layer and per-flight state of cache_layer.h and the engine's own.
//
// Thread safety: safe for concurrent calls. Lock order: the table mutex, then the scheduler's
// and the journal's (leaves). No remote call and no data-file I/O under the table mutex (a
// chunk that lands while SetLayerMembers switches the layout is written again under it: rare).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/base/log_event.h"
#include "core/cache/cache_layer.h"
#include "core/cache/cache_options.h"
#include "core/cache/chunk_journal.h"
#include "core/cache/chunk_landing.h"
#include "core/cache/endpoint_health.h"
#include "core/cache/fetch_scheduler.h"
#include "core/cache/layer_store.h"
#include "core/cache/layer_table.h"
#include "core/cache/remote_blob_source.h"

namespace modelfs {

class FlightEngine {
 public:
  // What a flight's end asks of the cache it works for (BlobCache). Called with the table mutex
  // held, except AfterFlight.
  class Owner {
   public:
    virtual ~Owner() = default;
    // A write of `layer` found the disk full, the first since it had room: readahead and
    // prefetch pause.
    virtual void DiskFilledLocked(const CacheLayer& layer)
        ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu) = 0;
    // A flight of `layer` (`bulk`: a prefetch's, `stream`: a stream segment, `failed`: some
    // chunk of it failed) ended; `stale`: the layer was quarantined or evicted meanwhile. The
    // pumps go on, and a layer now complete is checked. Returns whether the cache is over its
    // size limit.
    virtual bool FlightEndedLocked(const std::shared_ptr<CacheLayer>& layer, bool bulk, bool stream,
                                   bool failed, bool stale)
        ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer->mu) = 0;
    // After a flight, without the lock: the disk became full (make room), or the cache is over
    // its size limit.
    virtual void AfterFlight(bool became_full, bool over_budget) = 0;
    virtual void Log(const log::Event& event) const = 0;
    // A warn event with only a message, for lines that name nothing more.
    void Log(absl::string_view line) const { Log(log::Warn("cache", line)); }
  };

  // Every reference must outlive the engine. `table` is the cache's table of layers (its
  // mutex guards the engine's state too).
  FlightEngine(LayerTable& table, const CacheOptions& options, RemoteBlobSource* remote,
               Clock* clock, FetchScheduler& scheduler, EndpointHealth& health,
               const LayerStore& store, ChunkJournal& journal, CacheCounters& counters,
               Owner& owner)
      : table_(table),
        options_(options),
        remote_(remote),
        time_(clock),
        scheduler_(scheduler),
        health_(health),
        store_(store),
        journal_(journal),
        counters_(counters),
        owner_(owner) {}
  FlightEngine(const FlightEngine&) = delete;
  FlightEngine& operator=(const FlightEngine&) = delete;

  // Creates flights for the missing chunks in [first, last] of `layer` (coalesced into requests
  // of at most `max_request` bytes; 0: options.max_request_bytes), marks them in flight and
  // queues them at `priority`, each to fetch by `deadline` (a reader joining may move it).
  // The flights created go to `created` when given. A quarantined layer gets none.
  void ScheduleLocked(const std::shared_ptr<CacheLayer>& layer, uint64_t first, uint64_t last,
                      int priority, absl::Time deadline,
                      std::vector<std::shared_ptr<CacheFlight>>* created, uint64_t max_request = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer->mu);
  // Moves a queued flight up to `priority` (a reader now waits for it).
  void Promote(const CacheFlight& flight, int priority)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(flight.layer->mu);
  // Whether the last write to the cache disk failed for want of space. The caller holds the
  // table mutex (so the answer holds until it lets go).
  bool DiskFullLocked() const { return disk_full_.load(std::memory_order_relaxed); }
  // Lets go of the chunks of `layer` held in memory (quarantined, evicted).
  void DropMemoryLocked(CacheLayer& layer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu);
  // Persistence is queued no more (the cache is closing; its end calls PersistPending itself).
  // Under the table mutex.
  void StopLocked() { stopping_.store(true, std::memory_order_relaxed); }
  // fdatasyncs and records the verified chunks queued by flights (one sync per file). With
  // CacheOptions::persist_delay, first waits for the cache to be idle (or the delay, or the
  // cache's end): the queued task holds one of the "" pool's threads meanwhile, never a
  // registry's.
  void PersistPending();
  // Records `chunks` of `layer` in the journal unless quarantine or eviction dropped it since
  // `gen`.
  absl::Status RecordChunks(const std::shared_ptr<CacheLayer>& layer, uint64_t gen,
                            const std::vector<uint64_t>& chunks);

 private:
  // PersistPending's wait: returns once the cache is idle, persist_delay has passed since
  // persist_since_, or the cache is closing. At once when persist_delay is zero.
  void AwaitPersistLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu());
  // What a flight's chunks did to the data file, for its end.
  struct FlightWrites {
    std::vector<uint64_t> good;  // verified and written: to persist
    bool wrote = false;
    bool disk_full = false;
    bool became_full = false;  // this flight found the disk full first
  };
  struct PendingPersist {
    std::shared_ptr<CacheLayer> layer;  // holds a job reference (CacheLayer::jobs) until persisted
    uint64_t gen = 0;
    std::vector<uint64_t> chunks;
  };

  void RunFlight(const std::shared_ptr<CacheFlight>& flight);
  // Verifies chunk `i` of a flight, writes it, and makes it servable (or failed) at once, so
  // readers waiting for it go on while the rest of the range streams in. Bytes that fail
  // verification in a flight that has not refetched yet are not landed: the result is the
  // mismatch marked IsBadAnswer, and the flight fetches the chunk once more.
  absl::Status LandChunk(const std::shared_ptr<CacheFlight>& f, uint64_t i, const ReceivedChunk& r,
                         const std::vector<std::array<uint8_t, 32>>& expected, FlightWrites* w);
  // Queues verified, pwritten chunks to be fdatasync'd and recorded by PersistPending.
  void QueuePersistLocked(const std::shared_ptr<CacheLayer>& layer, uint64_t gen,
                          std::vector<uint64_t> chunks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), layer->mu);

  LayerTable& table_;
  const CacheOptions& options_;
  RemoteBlobSource* const remote_;
  Clock* const time_;
  FetchScheduler& scheduler_;
  EndpointHealth& health_;
  const LayerStore& store_;
  ChunkJournal& journal_;
  CacheCounters& counters_;
  Owner& owner_;

  std::vector<PendingPersist> persist_pending_ ABSL_GUARDED_BY(table_.mu());
  bool persist_scheduled_ ABSL_GUARDED_BY(table_.mu()) = false;
  absl::Time persist_since_ ABSL_GUARDED_BY(table_.mu());  // the oldest pending batch was queued
  // Written and read under the table's mutex; atomic only because the cache reads them holding
  // it under a layer's name (DiskFullLocked from the read side), which the analysis cannot
  // see through.
  std::atomic<bool> stopping_{false};
  // Set when a data-file write fails with ENOSPC/EDQUOT, cleared by the next one that works.
  std::atomic<bool> disk_full_{false};
  // Chunks held in memory while the disk is full.
  MemoryFallback memory_ ABSL_GUARDED_BY(table_.mu());
};

}  // namespace modelfs
