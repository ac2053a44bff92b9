// BlobCache: the verified, crash-safe, single-flight cache of layer blobs behind the lazy
// filesystem (docs/design.md, "The trust chain" and "The read path"; docs/cache-format.md).
// A layer is registered (VerifyMode, cache_options.h) before it is read. Reads fetch missing
// chunks from a RemoteBlobSource: one fetch per chunk however many readers wait, adjacent
// missing chunks coalesced into one range request, foreground reads ahead of readahead ahead of
// prefetch. No byte is returned or recorded as good before it matches its hash (kInsecureStream
// aside). A chunk is recorded (SQLite, WAL) only once fdatasync'd, batched off the read path;
// after Open a recorded chunk is re-hashed on its first read before it is served.
//
// BlobCache is the coordinator; each part owns what it touches and is a client of the table:
// layer_table.h (the layers, the one mutex and its rule), cache_layer.h (per-layer and
// per-request state), cache_options.h (options, specs, stats), flight_engine.h (flights,
// landing, persistence), layer_audit.h (whole-layer checks, seal, audit, quarantine),
// layer_scrub.h (scrub, renewal, fs-verity), decoded_layer.h (decoded layers), layer_members.h
// (member files), layer_eviction.h (eviction); and the pieces they use (fetch_planner.h,
// chunk_landing.h, served_pages.h, fetch_scheduler.h, layer_store.h, chunk_journal.h, verifier.h,
// endpoint_health.h). BlobCache itself opens the cache, registers layers, pumps bulk prefetch and
// streams and hears a flight's end (blob_cache.cc); blob_cache_read.cc is the read path.
//
// Thread safety: all public methods are safe to call concurrently; the one lock is the
// table's (layer_table.h states its rule and the lock order).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/cache/blob_reader.h"
#include "core/cache/cache_options.h"
#include "core/cache/decoded_layer.h"
#include "core/cache/endpoint_health.h"
#include "core/cache/fetch_scheduler.h"
#include "core/cache/flight_engine.h"
#include "core/cache/layer_audit.h"
#include "core/cache/layer_eviction.h"
#include "core/cache/layer_members.h"
#include "core/cache/layer_scrub.h"
#include "core/cache/layer_store.h"
#include "core/cache/layer_table.h"
#include "core/cache/remote_blob_source.h"
#include "core/oci/digest.h"

namespace modelfs {

class BlobCache : public BlobReader, private FlightEngine::Owner, private LayerScrub::Refetch {
 public:
  // Opens (or creates) the cache in options.dir and starts the fetch threads. `remote` must
  // outlive the cache. One cache per directory at a time: it holds flock on <dir>/lock until
  // destroyed. Errors: kInvalidArgument (bad options), kFailedPrecondition (another cache, in
  // this or another process, holds the directory; the message names the holder), kInternal
  // (I/O, SQLite).
  static absl::StatusOr<std::unique_ptr<BlobCache>> Open(CacheOptions options,
                                                         RemoteBlobSource* remote);
  // Stops the fetch threads (in-flight requests finish first; queued ones are dropped).
  ~BlobCache() override;
  BlobCache(const BlobCache&) = delete;
  BlobCache& operator=(const BlobCache&) = delete;

  // Registers a layer for `spec.model_ref`. Registering a layer that is already known adds a
  // reference (the first spec's mode and index stay in force). Chunks recorded by an earlier
  // process are kept when the chunking matches and re-verified on first read.
  // Errors: kInvalidArgument (kChunk without index, index not matching digest/size/chunk
  // count, size conflicting with an earlier registration or over kMaxModelLayerBytes, empty
  // model_ref), kInternal (I/O).
  absl::Status RegisterLayer(const LayerSpec& spec);
  // Registers the decompressed form of a compressed tar layer for `spec.model_ref` as a layer
  // of its own, keyed by the digest of the decompressed bytes, and returns that digest and
  // size once it is verified and sealed (DecodedLayers::Register says how, and its errors).
  absl::StatusOr<DecodedLayer> RegisterDecodedLayer(const DecodedLayerSpec& spec);
  // Drops `model_ref`'s reference to `digest` / to every layer. Cached data stays until
  // eviction needs the space. Unknown digests or refs are not an error.
  void UnregisterLayer(const Digest& digest, absl::string_view model_ref);
  void UnregisterModel(absl::string_view model_ref);

  // BlobReader. Errors: kNotFound (layer not registered), kDataLoss (a touched chunk failed
  // verification, or the layer is quarantined), kDeadlineExceeded (not satisfied within
  // options.read_deadline), kUnavailable / kNotFound / kPermissionDenied (remote refused).
  absl::StatusOr<std::string> Read(const Digest& digest, uint64_t offset, uint64_t length) override;
  // Read's work without the copy: fd spans over the data file (memory spans for chunks a full
  // disk left in memory). Releasing a span tells the cache its bytes were served
  // (drop_served_pages), so every span must be released before the cache is destroyed (the
  // FUSE mount is stopped first). Errors as Read.
  absl::StatusOr<std::vector<BlobSpan>> ReadSpans(const Digest& digest, uint64_t offset,
                                                  uint64_t length) override;
  // True when every chunk of the range is verified here (no fetch, no re-hash needed).
  bool IsReady(const Digest& digest, uint64_t offset, uint64_t length) override;
  // A read-only fd of the layer's data file once the whole layer is verified and sealed (its
  // seal recorded: docs/cache-format.md), for [0, size) only; -1 otherwise.
  // Not for a layer with member files (SetLayerMembers): OpenVerifiedFile serves those.
  int OpenVerifiedBlob(const Digest& digest, uint64_t offset, uint64_t length) override;
  // Keeps each of `files` of at least options.member_min_bytes in a member file of its own
  // (LayerMembers::Set says how, and its errors); on any error the layer is served from its
  // data file as before.
  absl::Status SetLayerMembers(const Digest& digest,
                               const std::vector<std::pair<uint64_t, uint64_t>>& files) override;
  // A read-only fd of the member file holding exactly [offset, offset + length), once every
  // chunk it meets is verified and flushed (so at the latest once the layer is sealed); -1
  // otherwise.
  int OpenVerifiedFile(const Digest& digest, uint64_t offset, uint64_t length) override;

  // Schedules background fetching: `header_ranges` first, then (kAll) the whole layer in
  // order with at most options.prefetch_concurrency requests in flight; foreground reads go
  // first. Returns at once. For a kWholeLayer layer (nothing servable before all of it is
  // verified) kHeadersOnly does nothing and kAll starts the whole-layer fill.
  // Errors: kNotFound (layer not registered), kDataLoss (layer quarantined).
  absl::Status Prefetch(const Digest& digest, PrefetchPolicy policy,
                        const std::vector<ByteRange>& header_ranges = {});

  // The order a model's loader reads layers in (its files by path): once the stream of `layer`
  // has asked for its last chunk, `next` starts streaming (its first stream_segments
  // requests), so that a loader finishing one file finds the next arriving rather than
  // starting it cold. Only a layer a reader is streaming itself passes its stream on, so the
  // successor's own early stream (or a header read) does not pass it down the whole model. A
  // hint: unknown digests are ignored, the last call for a layer wins.
  void SetStreamSuccessor(const Digest& layer, const Digest& next);

  // Counters; safe to call at any time.
  CacheStats stats() const;

  // One scrub pass, on the calling thread (the scrub thread calls it every scrub_interval):
  // LayerScrub::ScrubOnce says what it checks. Returns the number of layers scrubbed.
  int ScrubOnce();

  using LayerInfo = CacheLayerInfo;  // cache_options.h
  // Errors: kNotFound (the cache knows nothing about `digest`).
  absl::StatusOr<LayerInfo> GetLayerInfo(const Digest& digest) const;
  // Every layer in the cache's table (registered, or known from the journal), by digest: one
  // consistent snapshot taken under the cache's lock.
  std::map<Digest, LayerInfo> ListLayers() const;

  // Evicts each of `digests` that no model references and nothing reads, fetches or verifies
  // now (its data file unlinked, its journal rows forgotten, as EnforceSizeLimit does), so
  // that a later registration fetches and verifies it afresh. Layers the cache does not know
  // are skipped. Returns what was evicted and the digests left in place because they are in
  // use (referenced, pinned by a reader, or with a job queued).
  using EvictResult = CacheEvictResult;  // cache_options.h
  EvictResult EvictLayers(const std::vector<Digest>& digests);

  // The last fetch error of each registry endpoint (EndpointHealth::Errors).
  std::map<std::string, EndpointHealth::LastError> endpoint_errors() const {
    return health_.Errors();
  }

  // Blocks until no fetch or background verification is queued or running (for tests and
  // orderly shutdown), or until `deadline`. Returns false on timeout.
  bool WaitIdle(absl::Time deadline);

  // Evicts unreferenced layers (least recently used first) until the cache fits max_bytes.
  // Runs automatically after fetches; public so a daemon can call it after unregistering.
  void EnforceSizeLimit();
  // Whether the last write to the cache disk failed for want of space (reads are then served
  // from the network and memory without caching).
  bool disk_full() const;

 private:
  using Layer = CacheLayer;
  using Flight = CacheFlight;

  BlobCache(CacheOptions options, RemoteBlobSource* remote);
  absl::Status Init();
  // Takes flock on <dir>/lock (kFailedPrecondition naming the holder when another process has
  // it) and records this process there.
  absl::Status LockDir();
  absl::Status LoadFromJournal();
  void Log(const log::Event& event) const override { LogCacheEvent(options_, event); }
  static absl::Status NotRegistered(const Digest& digest);

  // The read path (blob_cache_read.cc). ReadSpans of the layer registered as `digest`, once
  // (`used`: the layer read); and again, at most twice more, when that layer was renewed.
  absl::StatusOr<std::vector<BlobSpan>> ReadSpansOnce(const Digest& digest, uint64_t offset,
                                                      uint64_t length,
                                                      std::shared_ptr<Layer>* used);
  absl::StatusOr<std::vector<BlobSpan>> ReadSpansRenewing(const Digest& digest, uint64_t offset,
                                                          uint64_t length,
                                                          std::shared_ptr<Layer>* used);
  bool Renewed(const Layer& layer) const;
  // Makes chunks [first, last] servable, fetching as needed. Reader must hold a pin.
  // `deadline` bounds the wait; fetches started for it get `fetch_deadline` (later when the
  // wait was shortened by EndpointHealth, so a slow registry's answer still lands).
  // Chunks that are servable only from memory are returned in `memory` (chunk, bytes).
  absl::Status EnsureChunks(
      const std::shared_ptr<Layer>& layer, uint64_t first, uint64_t last, absl::Time deadline,
      absl::Time fetch_deadline, bool count,
      std::vector<std::pair<uint64_t, std::shared_ptr<const std::string>>>* memory);
  absl::Status EnsureWholeLayer(const std::shared_ptr<Layer>& layer, absl::Time deadline);
  // Re-hashes a chunk recorded by an earlier process; true if it still matches.
  bool RecheckRecorded(const std::shared_ptr<Layer>& layer, uint64_t chunk);
  // A reader's reply of bytes [from, to) of the layer's data file has been sent (a span's
  // keep_alive ended): chunks now wholly served and on disk leave the page cache.
  void OnServed(const std::shared_ptr<Layer>& layer, uint64_t from, uint64_t to);

  // The pumps (blob_cache.cc). flights_.ScheduleLocked: flights for the missing chunks in
  // [first, last] (requests of at most `max_request` bytes; 0: options.max_request_bytes).
  void ScheduleMissingLocked(const std::shared_ptr<Layer>& layer, uint64_t first, uint64_t last,
                             int priority, absl::Time deadline,
                             std::vector<std::shared_ptr<Flight>>* created,
                             uint64_t max_request = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), layer->mu);
  bool DiskFullLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu()) {
    return flights_.DiskFullLocked();
  }
  void PumpBulkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu());
  // Streaming of a layer a reader loads whole: the rest from chunk `from` in parallel segments.
  void StartStreamLocked(const std::shared_ptr<Layer>& layer, uint64_t from)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), layer->mu);
  void PumpStreamLocked(const std::shared_ptr<Layer>& layer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), layer->mu);
  // FlightEngine::Owner and LayerScrub::Refetch: what a flight's end and a renewal ask.
  void DiskFilledLocked(const Layer& layer) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu);
  bool FlightEndedLocked(const std::shared_ptr<Layer>& layer, bool bulk, bool stream, bool failed,
                         bool stale) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer->mu);
  void AfterFlight(bool became_full, bool over_budget) override;
  void RefetchLocked(const std::shared_ptr<Layer>& layer) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer->mu);

  LayerInfo InfoLocked(const Layer& layer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu());

  const CacheOptions options_;
  RemoteBlobSource* const remote_;
  int lock_fd_ = -1;  // flock on <dir>/lock, held for the cache's life
  Clock* const time_;
  LayerTable table_;
  int bulk_in_flight_ ABSL_GUARDED_BY(table_.mu()) = 0;
  std::deque<std::shared_ptr<Layer>> bulk_layers_ ABSL_GUARDED_BY(table_.mu());  // kAll prefetch
  FetchScheduler scheduler_;  // stopped (its threads joined) first thing in the destructor
  EndpointHealth health_;     // per-registry read deadlines after a timeout
  const LayerStore store_;
  ChunkJournal journal_;
  mutable CacheCounters counters_;
  // The parts, after what they refer to.
  FlightEngine flights_;
  LayerAudit audit_;
  LayerScrub scrub_;
  LayerMembers members_;
  DecodedLayers decoded_;
  LayerEviction eviction_;
};

}  // namespace modelfs
