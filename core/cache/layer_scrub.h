// LayerScrub: keeping sealed layers true (docs/design.md, "The trust chain", steps 9 and 10).
// Sealed layers are trusted for as long as their seal holds, and a passthrough read is never
// checked by the daemon, so every scrub_interval their bytes are read and hashed again in the
// background, at idle priority and at most scrub_rate bytes a second; a changed layer is at
// once out of service and fetched again into a new data file (renewed), or dropped when it
// cannot be fetched. fs-verity: where the cache's filesystem has it, sealed files get it (at
// Open, or at the first scrub pass that finds no writer holding them), and its digest is checked
// when the cache is opened.
//
// A client of the LayerTable (layer_table.h); it quarantines through LayerAudit and asks the
// cache to refetch a renewed layer (Refetch).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "core/base/clock.h"
#include "core/cache/cache_layer.h"
#include "core/cache/cache_options.h"
#include "core/cache/chunk_journal.h"
#include "core/cache/fs_verity.h"
#include "core/cache/layer_audit.h"
#include "core/cache/layer_segments.h"
#include "core/cache/layer_store.h"
#include "core/cache/layer_table.h"
#include "core/oci/digest.h"

namespace modelfs {

class LayerScrub {
 public:
  // What the scrub asks of the cache it works for (BlobCache).
  class Refetch {
   public:
    virtual ~Refetch() = default;
    // `layer` took a changed layer's place in the table with a new, empty data file: fetch it
    // again (all of it, in the background), so that it is sealed again without waiting for a
    // reader of every chunk.
    virtual void RefetchLocked(const std::shared_ptr<CacheLayer>& layer)
        ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer->mu) = 0;
  };

  // Every reference must outlive the scrub; `verity` too (null: the kernel's).
  LayerScrub(LayerTable& table, const CacheOptions& options, Clock* clock, const LayerStore& store,
             ChunkJournal& journal, CacheCounters& counters, LayerAudit& audit, Refetch& refetch)
      : table_(table),
        options_(options),
        time_(clock),
        store_(store),
        journal_(journal),
        counters_(counters),
        audit_(audit),
        refetch_(refetch),
        verity_(options.verity != nullptr ? options.verity : VerityOps::Real()) {}
  // Join() must have run.
  ~LayerScrub() = default;
  LayerScrub(const LayerScrub&) = delete;
  LayerScrub& operator=(const LayerScrub&) = delete;

  // Probes whether the cache directory's filesystem has fs-verity (said once, in the log).
  // Before any other thread runs.
  void ProbeVerity();
  bool fs_verity() const { return fs_verity_; }
  // Starts the scrub thread (ScrubOnce every options.scrub_interval) when the interval is set.
  void Start();
  // Waits for the scrub thread to end; the table must be closing (LayerTable::Close).
  void Join();

  // One scrub pass, on the calling thread (the scrub thread calls it every scrub_interval):
  // every sealed layer, those never audited first, is read again at background priority and
  // at most options.scrub_rate bytes a second, each chunk against its expected hash where the
  // cache has one, and the whole file against the layer digest when the layer was never
  // audited or has no chunk hashes. A changed file is at once out of service (no new
  // passthrough open, no byte served from it) and renewed (refetched into a
  // new data file and verified, sealed again once complete), logged with its digest and byte
  // range and counted in scrub_failures and scrub_repairs. A chunk index that matches every
  // chunk but not the layer digest quarantines the layer instead. Returns the number of layers
  // scrubbed.
  int ScrubOnce();
  // Whether ScrubOnce is reading `layer` now (LayerInfo::scrubbing).
  bool ScrubbingLocked(const CacheLayer& layer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu);

  // At Open: whether the fs-verity digest of the open files of `digest` is `recorded` (true
  // when none was recorded); a difference is logged.
  bool VerityHolds(const Digest& digest, const LayerSegments& files,
                   const std::string& recorded) const;
  // At Open, without the lock: enables fs-verity on the files of `layers` (sealed, trusted, open
  // read-only and by no writer) and records each digest with the new seal.
  void ProtectSealed(const std::vector<std::shared_ptr<CacheLayer>>& layers);

 private:
  void ScrubLoop();
  // The scrub of one sealed layer (ScrubOnce); false when it was found changed.
  bool ScrubLayer(const std::shared_ptr<CacheLayer>& layer);
  // After a scrub pass, where the filesystem has fs-verity: the sealed layers of `passed` that
  // lack it get it (a read-only copy first, ReadOnlyCopyLocked; a layer whose old fd is still
  // held by a reader is left for the next pass).
  void ProtectScrubbed(std::vector<std::shared_ptr<CacheLayer>> passed);
  // For fs-verity on a layer sealed in this process, whose fd is open for writing: puts in the
  // table, in `layer`'s place, a copy of its state over a new read-only fd (readers of
  // `layer` finish with it). Null when `layer` is not sealed, current and idle, or the file
  // cannot be opened. The file is opened under the lock, as registration's is.
  std::shared_ptr<CacheLayer> ReadOnlyCopyLocked(const std::shared_ptr<CacheLayer>& layer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), layer->mu);
  // The scrub found the data file of `layer` (scrubbed at `gen`) changed, as `what` says, in
  // bytes `bad` ([first, last], logged). A layer registered in this process and fetchable is
  // renewed; any other is dropped from the table (a later registration or decode starts it over).
  void OnScrubFinding(const std::shared_ptr<CacheLayer>& layer, uint64_t gen,
                      absl::string_view what, std::pair<uint64_t, uint64_t> bad);
  // Replaces `old` in the table with a new layer of the same spec, references and registry,
  // over a new empty data file at the same path (the changed one is unlinked: only fds already
  // open, a passthrough open among them, still read it), and has it refetched (Refetch); it is
  // sealed again once complete. Readers of `old` read again from the new layer. When the new
  // file cannot be created, `old` is dropped from the table. Its file operations (unlink,
  // create) run under the lock, as registration's do.
  void RenewLayerLocked(const std::shared_ptr<CacheLayer>& old, absl::string_view what,
                        std::pair<uint64_t, uint64_t> bad)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), old->mu);
  // The fs-verity digests of a layer's files as recorded in the `verity` column: the data
  // file's, then ";<offset>=<digest>" per member file ("" for a file without fs-verity).
  std::string MeasureFiles(const LayerSegments& files) const;
  // Enables fs-verity on the layer's member files, then on its data file (reads them all: not
  // under the lock). True when any file got it (its seal changed); failures other than a busy
  // file are logged.
  bool EnableVerityOnFiles(const CacheLayer& layer);
  void Log(const log::Event& event) const { LogCacheEvent(options_, event); }

  LayerTable& table_;
  const CacheOptions& options_;
  Clock* const time_;
  const LayerStore& store_;
  ChunkJournal& journal_;
  CacheCounters& counters_;
  LayerAudit& audit_;
  Refetch& refetch_;
  VerityOps* const verity_;
  bool fs_verity_ = false;  // set by ProbeVerity, before any other thread runs
  // The layer ScrubOnce is reading now; nullptr between layers.
  const CacheLayer* scrubbing_ ABSL_GUARDED_BY(table_.mu()) = nullptr;
  std::thread thread_;  // ScrubLoop, when options.scrub_interval is set
};

}  // namespace modelfs
