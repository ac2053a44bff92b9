// LayerTable: the cache's table of layers, the one mutex that guards it, and the rule of that
// mutex (docs/design.md, "Where the cache's code lives").
//
// The guard rule, said once here: the table's mutex guards the map of layers and the table's
// own state below (the bytes cached, the LRU clock, the read activity, closing), every
// CacheLayer field marked ABSL_GUARDED_BY(mu) and every CacheFlight field marked
// ABSL_GUARDED_BY(layer->mu) (cache_layer.h), and the state each part of the cache marks
// ABSL_GUARDED_BY(table_.mu()). One lock for the whole table, not one per layer, so that a read,
// a landing chunk, eviction and the disk-full switch all see one consistent state. Each
// CacheLayer's `mu` is this same mutex under the layer's name, which is the name the parts
// share: a method of one part that another calls with the lock held says
// ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu).
//
// The thread-safety analysis names a mutex by the expression that reaches it, so it cannot see
// that `layer->mu` and the table's mutex are one. The scoped locks below say so, at no cost
// beyond the mutex itself (debug builds check that it is the same mutex):
//   TableLock lock(table_);                 the table's mutex
//   LayerLock lock(table_, *layer);         the table's mutex, and `layer`'s fields with it
//   LayerGuard held(*other, Held(table_));  with the table's mutex held: `other`'s fields too
//   TableGuard g(table_, Held(*layer));     with the lock held under `layer`'s name (a call
//                                           from another part): the table's own state too
// Every part (the flight engine, the read path, the checks, the scrub, decoded layers, member
// files) receives the table; none is handed a mutex.
//
// Lock order: the table's mutex, then the journal's and the scheduler's own (leaves). No remote
// call and no data-file I/O happens under it, except registration's file open and database
// writes and the rare cases each part names.
#pragma once

#include <cassert>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/cache/cache_layer.h"
#include "core/cache/chunk_journal.h"
#include "core/oci/digest.h"

namespace modelfs {

class LayerTable {
 public:
  LayerTable() = default;
  LayerTable(const LayerTable&) = delete;
  LayerTable& operator=(const LayerTable&) = delete;

  // The mutex, for annotations (ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu())) and for waits on
  // it (Clock::AwaitWithDeadline, absl::Mutex::Await) under a TableLock or LayerLock.
  absl::Mutex& mu() const ABSL_LOCK_RETURNED(mu_) { return mu_; }

  // A new layer of this table, whose `mu` is the table's mutex; not in the map until Put.
  // `fd` (its data file) is closed with the layer.
  std::shared_ptr<CacheLayer> NewLayer(Digest digest, uint64_t size, uint64_t chunk_size,
                                       int fd) const;

  std::shared_ptr<CacheLayer> Find(const Digest& digest) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The layer if it is registered in this process and referenced; null otherwise (a read or a
  // prefetch of it fails with NotRegistered).
  std::shared_ptr<CacheLayer> FindRegistered(const Digest& digest) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `layer` is the table's entry for its digest (not replaced, dropped or evicted).
  bool IsCurrent(const CacheLayer& layer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes `layer` the entry for its digest (replacing any).
  void Put(std::shared_ptr<CacheLayer> layer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Erase(const Digest& digest) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `layer` out of the map and its bytes out of cached_bytes(), and makes its flights
  // and journal writes stale (gen); returns its bytes (it keeps its own count).
  uint64_t Unlink(CacheLayer& layer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, layer.mu);
  // Every layer in the map, in no order.
  std::vector<std::shared_ptr<CacheLayer>> Layers() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Empties the map (the cache's end).
  void Clear() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Bytes of layer data on disk, over every layer (CacheStats::cached_bytes).
  uint64_t cached_bytes() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return cached_bytes_; }
  // `bytes` more (or fewer) of `layer` on disk: its count and the table's.
  void AddLayerBytes(CacheLayer& layer, uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu);
  void RemoveLayerBytes(CacheLayer& layer, uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu);
  // The bytes of a layer put in the table as they are (found at Open).
  void CountLayer(const CacheLayer& layer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, layer.mu) {
    cached_bytes_ += layer.cached_bytes;
  }

  // The LRU clock (CacheLayer::last_used): the next stamp; and a stamp the journal recorded.
  int64_t Stamp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ++clock_; }
  void SeenStamp(int64_t stamp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stamp > clock_) clock_ = stamp;
  }

  // The read activity, for the work that waits until reads are idle (the audit, deferred
  // persistence): a read began or ended at `now`.
  void ReadBegins(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reads_in_progress_++;
    last_read_ = now;
  }
  void ReadEnds(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reads_in_progress_--;
    last_read_ = now;
  }
  int reads_in_progress() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return reads_in_progress_; }
  absl::Time last_read() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return last_read_; }
  // When the cache counts as idle: InfiniteFuture while a read is being served, else `idle`
  // after the last one ended.
  absl::Time IdleAt(absl::Duration idle) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return reads_in_progress_ > 0 ? absl::InfiniteFuture() : last_read_ + idle;
  }

  // The cache is closing: waits on Closing() end, and no new work starts.
  void Close() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { closing_ = true; }
  bool closing() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return closing_; }
  absl::Condition Closing() const { return absl::Condition(&closing_); }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Digest, std::shared_ptr<CacheLayer>> layers_ ABSL_GUARDED_BY(mu_);
  uint64_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t clock_ ABSL_GUARDED_BY(mu_) = 0;  // LRU stamp, seeded from the journal
  absl::Time last_read_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // a read began or ended
  int reads_in_progress_ ABSL_GUARDED_BY(mu_) = 0;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
};

// Holds the table's mutex for the scope.
class ABSL_SCOPED_LOCKABLE TableLock {
 public:
  explicit TableLock(const LayerTable& table) ABSL_EXCLUSIVE_LOCK_FUNCTION(table.mu())
      : mu_(table.mu()) {
    mu_.Lock();
  }
  ~TableLock() ABSL_UNLOCK_FUNCTION() { mu_.Unlock(); }
  TableLock(const TableLock&) = delete;
  TableLock& operator=(const TableLock&) = delete;

 private:
  absl::Mutex& mu_;
};

// Holds the table's mutex for the scope, and lets the analysis check the accesses to `layer`'s
// fields (a layer of this table: its `mu` is the same mutex).
class ABSL_SCOPED_LOCKABLE LayerLock {
 public:
  LayerLock(const LayerTable& table, const CacheLayer& layer)
      ABSL_EXCLUSIVE_LOCK_FUNCTION(table.mu(), layer.mu)
      : mu_(table.mu()) {
    assert(&layer.mu == &mu_);
    (void)layer;
    mu_.Lock();
  }
  ~LayerLock() ABSL_UNLOCK_FUNCTION() { mu_.Unlock(); }
  LayerLock(const LayerLock&) = delete;
  LayerLock& operator=(const LayerLock&) = delete;

 private:
  absl::Mutex& mu_;
};

// Shows a guard that the caller holds the table's mutex, under the table's name (Held(table_))
// or a layer's (Held(*layer)): made only by these functions, which the analysis checks. (A
// guard's constructor cannot require the lock itself: the analysis would take that for a lock
// the guard adopts and releases.)
class HeldLock {
 public:
  const absl::Mutex& mu() const { return mu_; }

 private:
  explicit HeldLock(const absl::Mutex& mu) : mu_(mu) {}
  friend HeldLock Held(const LayerTable& table);
  friend HeldLock Held(const CacheLayer& layer);
  const absl::Mutex& mu_;
};
inline HeldLock Held(const LayerTable& table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu()) {
  return HeldLock(table.mu());
}
inline HeldLock Held(const CacheLayer& layer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu) {
  return HeldLock(layer.mu);
}

// Within a scope that holds the table's mutex, lets the analysis check the accesses to
// `layer`'s fields too (another layer than the lock's, or a flight's):
// `LayerGuard held(*other, Held(table_))`. Costs nothing.
class ABSL_SCOPED_LOCKABLE LayerGuard {
 public:
  LayerGuard(const CacheLayer& layer, HeldLock held) ABSL_EXCLUSIVE_LOCK_FUNCTION(layer.mu) {
    assert(&layer.mu == &held.mu());
    (void)layer;
    (void)held;
  }
  LayerGuard(const LayerGuard&) = delete;
  LayerGuard& operator=(const LayerGuard&) = delete;
  ~LayerGuard() ABSL_UNLOCK_FUNCTION() {}
};

// Within a scope that holds the table's mutex under a layer's name (a method another part calls
// with ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu)), lets the analysis check the accesses to state
// guarded by the table's own name too: `TableGuard g(table_, Held(*layer))`. Costs nothing.
class ABSL_SCOPED_LOCKABLE TableGuard {
 public:
  TableGuard(const LayerTable& table, HeldLock held) ABSL_EXCLUSIVE_LOCK_FUNCTION(table.mu()) {
    assert(&table.mu() == &held.mu());
    (void)table;
    (void)held;
  }
  TableGuard(const TableGuard&) = delete;
  TableGuard& operator=(const TableGuard&) = delete;
  ~TableGuard() ABSL_UNLOCK_FUNCTION() {}
};

// The journal row of a layer, as it stands.
LayerRecord RecordOf(const CacheLayer& layer, bool whole_verified, std::string local_index,
                     std::string seal) ABSL_SHARED_LOCKS_REQUIRED(layer.mu);

}  // namespace modelfs
