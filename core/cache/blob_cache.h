// BlobCache: the verified, crash-safe, single-flight cache of layer blobs behind the lazy
// filesystem (docs/design.md, "The trust chain" and "The read path"; on-disk format in
// docs/cache-format.md).
//
// A layer is registered (with a chunk index, or for whole-layer verification) before it is
// read. Reads fetch missing chunks from a RemoteBlobSource: one fetch per chunk however many
// readers wait (single flight), adjacent missing chunks coalesced into one range request,
// requests run in parallel on a pool of fetch threads, foreground reads ahead of readahead
// ahead of prefetch. No byte is returned or recorded as good before it matches its SHA-256:
//   kChunk:          each chunk against the chunk index, as its bytes arrive; when every chunk
//                    is cached the layer is sealed (served by passthrough from then on), and
//                    audited against its digest once reads are idle, at background priority
//                    (CacheOptions::audit; mismatch quarantines it).
//   kWholeLayer:     the first read fetches the whole layer; nothing is served until the
//                    whole-layer digest matches (mismatch quarantines it).
//   kInsecureStream: explicit opt-in: fetched bytes are served unverified; the whole layer is
//                    still fetched and checked, and a mismatch quarantines it.
// Crash safety: a chunk is recorded (SQLite, WAL) only after its bytes are pwritten and
// fdatasync'd; after Open, a recorded chunk is re-hashed on its first read before it is served
// (so a torn or tampered data file is refetched, never served). A verified chunk is served as
// soon as it is pwritten: the fdatasync and the record happen later, batched (one fdatasync per
// layer per batch) in a background job and drained by the destructor, so reads never wait on
// the disk's flush.
//
// The pieces, each with one job: the data files (layer_store.h), the record of what they hold
// (chunk_journal.h), the hash checks (verifier.h), the fetch scheduler (fetch_scheduler.h:
// priority queues and a pool of threads per registry), the per-layer state and the lock of
// each field (cache_layer.h), the fetch planner (fetch_planner.h: readahead, streaming, request
// coalescing), chunk assembly and the memory fallback (chunk_landing.h), the served-page
// dropper (served_pages.h), and the fetch side (flight_engine.h: flights, landing their chunks,
// persistence), which the read side asks for missing chunks and which tells the cache of each
// flight's end (FlightEngine::Owner). BlobCache is the coordinator: it owns the table of layers
// (layer_table.h, with the one mutex) and the pieces, and ties them together: which chunks are
// missing, in flight or verified, who waits for what, and eviction. Its methods are in
// blob_cache.cc (opening, registration, the bulk and stream pumps, prefetch, eviction, a flight's
// end), blob_cache_read.cc (the read path), layer_audit.cc (whole-layer checks, sealing, audit,
// quarantine), layer_scrub.cc (the scrub, fs-verity), decoded_layer.cc (decoded layers) and
// layer_members.cc (member files). Its options, specs and counters are in cache_options.h.
//
// Thread safety: all public methods are safe to call concurrently.
// The one lock is the table's (layer_table.h, which states its rule and the lock order).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/backoff.h"
#include "core/base/clock.h"
#include "core/base/log_event.h"
#include "core/cache/blob_reader.h"
#include "core/cache/cache_layer.h"
#include "core/cache/cache_options.h"
#include "core/cache/chunk_journal.h"
#include "core/cache/chunk_landing.h"
#include "core/cache/endpoint_health.h"
#include "core/cache/fetch_scheduler.h"
#include "core/cache/flight_engine.h"
#include "core/cache/fs_verity.h"
#include "core/cache/layer_store.h"
#include "core/cache/layer_table.h"
#include "core/cache/remote_blob_source.h"
#include "core/oci/chunk_index.h"
#include "core/oci/digest.h"
#include "core/oci/layer_decoder.h"
#include "core/oci/media_types.h"

namespace modelfs {

struct LayerFileHash;  // verifier.h

class BlobCache : public BlobReader, private FlightEngine::Owner {
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
  // of its own, keyed by the digest of the decompressed bytes (docs/cache-format.md, "Decoded
  // layers"), and returns that digest and size. Blocks until the layer is verified and sealed:
  // the compressed layer is fetched whole and checked against its digest (whole-layer mode),
  // decompressed into its own data file (streamed, bounded memory), checked against
  // `spec.diff_id` when given, then hashed and sealed like a whole-verified layer; the compressed
  // copy is then unreferenced (evictable). A decoded layer found sealed (by its diff ID, or by
  // the record of an earlier decode of the same source) is used without any of that. Decoded
  // layers are never fetched: until the call returns OK nothing of it is served.
  // Errors: kDataLoss naming the layer (compressed layer failing its digest, a corrupt or
  // truncated stream, the diffId not matching: both digests), kResourceExhausted (disk full),
  // kDeadlineExceeded (the compressed fetch stopped making progress), RegisterLayer's errors.
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
  // (layer_members.cc, docs/cache-format.md): bytes already landed move there (the layer
  // file's copy is freed once no reader holds it) and the layout is journaled. Once set, a
  // layer's layout stays (a second call with other files is kFailedPrecondition). Errors:
  // kNotFound, kInvalidArgument (overlapping ranges, or past the layer's end), kDataLoss
  // (quarantined), kAborted (dropped meanwhile), kResourceExhausted (disk full); on any
  // error the layer is served from its data file as before.
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
  // every sealed layer, those never audited first, is read again at background priority and
  // at most options.scrub_rate bytes a second, each chunk against its expected hash where the
  // cache has one, and the whole file against the layer digest when the layer was never
  // audited or has no chunk hashes. A changed file is at once out of service (no new
  // passthrough open, no byte served from it) and renewed (RenewLayerLocked: refetched into a
  // new data file and verified, sealed again once complete), logged with its digest and byte
  // range and counted in scrub_failures and scrub_repairs. A chunk index that matches every
  // chunk but not the layer digest quarantines the layer instead. Returns the number of layers
  // scrubbed.
  int ScrubOnce();

  // State of one layer, for status output and tests.
  struct LayerInfo {
    uint64_t size = 0;
    uint64_t chunk_count = 0;
    uint64_t cached_chunks = 0;   // on disk (verified, or recorded by an earlier process)
    bool whole_verified = false;  // sealed: every chunk verified and on disk
    bool audited = false;         // chunk mode: the audit matched the layer digest
    bool quarantined = false;
    uint64_t readahead_window = 0;
    int references = 0;
    // For `modelfs node ls`: bytes of the chunks on disk (verified, or recorded by an earlier
    // process and not yet re-checked) and of the chunks verified in this process (all of them
    // once sealed); whether ScrubOnce is reading it now; read-only fds handed out for
    // passthrough opens (OpenVerifiedBlob, OpenVerifiedFile) since the cache opened.
    uint64_t cached_bytes = 0;
    uint64_t verified_bytes = 0;
    bool scrubbing = false;
    uint64_t passthrough_opens = 0;
    std::vector<std::string> models;  // the model_refs holding it, sorted
  };
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
  struct EvictResult {
    uint64_t layers = 0;
    uint64_t bytes = 0;
    std::vector<Digest> busy;
  };
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
  // Per-layer and per-request state, and the lock of each field: cache_layer.h.
  using Layer = CacheLayer;
  using Flight = CacheFlight;
  static constexpr int kForeground = FetchPriority::kForeground;
  static constexpr int kReadahead = FetchPriority::kReadahead;
  static constexpr int kHeader = FetchPriority::kHeader;
  static constexpr int kFill = FetchPriority::kFill;
  static constexpr int kBulk = FetchPriority::kBulk;
  static constexpr int kVerify = FetchPriority::kVerify;

  BlobCache(CacheOptions options, RemoteBlobSource* remote);
  absl::Status Init();
  // Takes flock on <dir>/lock (kFailedPrecondition naming the holder when another process has
  // it) and records this process there.
  absl::Status LockDir();
  absl::Status LoadFromJournal();
  // Queues local work (checks, journal writes) on the scheduler's "" pool.
  void SubmitLocalLocked(int priority, std::function<void()> run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu());
  void Log(const log::Event& event) const override;
  void Log(absl::string_view line) const { Log(log::Warn("cache", line)); }

  static absl::Status NotRegistered(const Digest& digest);
  // Makes chunks [first, last] servable, fetching as needed. Reader must hold a pin.
  // `deadline` bounds the wait; fetches started for it get `fetch_deadline` (later when the
  // wait was shortened by EndpointHealth, so a slow registry's answer still lands).
  // Chunks that are servable only from memory are returned in `memory` (chunk, bytes).
  absl::Status EnsureChunks(
      const std::shared_ptr<Layer>& layer, uint64_t first, uint64_t last, absl::Time deadline,
      absl::Time fetch_deadline, bool count,
      std::vector<std::pair<uint64_t, std::shared_ptr<const std::string>>>* memory);
  // Evicts unreferenced, idle layers, least recently used first, until at most `target` bytes
  // are cached. Returns the layers and bytes evicted.
  std::pair<uint64_t, uint64_t> EvictUnreferenced(uint64_t target);
  absl::Status EnsureWholeLayer(const std::shared_ptr<Layer>& layer, absl::Time deadline);
  // flights_.ScheduleLocked: flights for the missing chunks in [first, last] (coalesced into
  // requests of at most `max_request` bytes; 0: options.max_request_bytes), queued.
  void ScheduleMissingLocked(const std::shared_ptr<Layer>& layer, uint64_t first, uint64_t last,
                             int priority, absl::Time deadline,
                             std::vector<std::shared_ptr<Flight>>* created,
                             uint64_t max_request = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), layer->mu);
  // FlightEngine::Owner: what a flight's end asks of the cache (blob_cache.cc).
  void DiskFilledLocked(const Layer& layer) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu);
  bool FlightEndedLocked(const std::shared_ptr<Layer>& layer, bool bulk, bool stream, bool failed,
                         bool stale) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer->mu);
  void AfterFlight(bool became_full, bool over_budget) override;
  bool DiskFullLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu()) {
    return flights_.DiskFullLocked();
  }
  void AfterChunksLandedLocked(const std::shared_ptr<Layer>& layer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), layer->mu);
  // The check of a layer whose chunks are all here (`mode`: the layer's, when it was queued;
  // it does not change once the layer is registered): in chunk mode, SealVerifiedLayer then
  // (CacheOptions::audit) AuditLayer; in whole-layer modes, the digest check that makes it
  // servable at all. `hashed`, when given, is that check already done on the bytes as they
  // were written (a decoded layer: DecodeAndInstall hashes what it writes), so the file is
  // not read again.
  void RunWholeVerify(const std::shared_ptr<Layer>& layer, VerifyMode mode,
                      const LayerFileHash* hashed = nullptr);
  // Flushes a chunk-mode layer whose every chunk is verified and records it sealed, so that it
  // is served by passthrough from here on and trusted after a restart. False when quarantine
  // or eviction dropped it meanwhile.
  bool SealVerifiedLayer(const std::shared_ptr<Layer>& layer);
  // Rehashes a sealed layer against its digest once reads are idle, at background priority;
  // a mismatch quarantines it.
  void AuditLayer(const std::shared_ptr<Layer>& layer);
  // Records the layer verified whole (with its local index, if any) and sealed, when
  // `synced` (its flush) is OK and `gen` still holds. Returns the seal recorded; "" when none
  // was (a failure is logged).
  std::string RecordSeal(const std::shared_ptr<Layer>& layer, uint64_t gen,
                         const absl::Status& synced, const std::string& local_index);
  // Marks a layer verified whole with `seal` ("" : not sealed, so no passthrough); once its
  // file is `flushed`, returns the byte ranges of its served chunks to drop (DropPages).
  std::vector<std::pair<uint64_t, uint64_t>> MarkVerifiedLocked(Layer& layer,
                                                                const std::string& seal,
                                                                bool flushed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), layer.mu);
  // A reader's reply of bytes [from, to) of the layer's data file has been sent (a span's
  // keep_alive ended): chunks now wholly served and on disk leave the page cache
  // (served_pages.h).
  void OnServed(const std::shared_ptr<Layer>& layer, uint64_t from, uint64_t to);
  void PumpBulkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu());
  // Streaming of a layer a reader loads whole: the rest from chunk `from` in parallel segments.
  void StartStreamLocked(const std::shared_ptr<Layer>& layer, uint64_t from)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), layer->mu);
  void PumpStreamLocked(const std::shared_ptr<Layer>& layer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), layer->mu);
  void Quarantine(const std::shared_ptr<Layer>& layer, const std::string& reason);
  // Quarantine's state change: nothing of the layer is servable or passed through from here
  // on, its flights are stale (gen), its bytes no longer counted.
  void WipeLocked(Layer& layer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), layer.mu);
  // The scrub found the data file of `layer` (scrubbed at `gen`) changed, as `what` says, in
  // bytes `bad` ([first, last], logged). A layer registered in this process and fetchable is
  // renewed; any other is dropped from the table (a later registration or decode starts it over).
  void OnScrubFinding(const std::shared_ptr<Layer>& layer, uint64_t gen, absl::string_view what,
                      std::pair<uint64_t, uint64_t> bad);
  // Replaces `old` in the table with a new layer of the same spec, references and registry,
  // over a new empty data file at the same path (the changed one is unlinked: only fds already
  // open, a passthrough open among them, still read it). Its chunks are fetched and verified
  // again as reads and the refetch started here need them, and it is sealed again once
  // complete. Readers of `old` read again from the new layer (ReadSpansRenewing). When the new
  // file cannot be created, `old` is dropped from the table. Its file operations (unlink,
  // create) run under the lock, as RegisterLayer's do.
  void RenewLayerLocked(const std::shared_ptr<Layer>& old, absl::string_view what,
                        std::pair<uint64_t, uint64_t> bad)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), old->mu);
  // ReadSpans of the layer registered as `digest`, once; `used` is the layer read.
  absl::StatusOr<std::vector<BlobSpan>> ReadSpansOnce(const Digest& digest, uint64_t offset,
                                                      uint64_t length,
                                                      std::shared_ptr<Layer>* used);
  // ReadSpansOnce, again (at most twice more) when the layer it read was renewed meanwhile.
  absl::StatusOr<std::vector<BlobSpan>> ReadSpansRenewing(const Digest& digest, uint64_t offset,
                                                          uint64_t length,
                                                          std::shared_ptr<Layer>* used);
  bool Renewed(const Layer& layer) const;
  // The scrub of one sealed layer (ScrubOnce); false when it was found changed.
  bool ScrubLayer(const std::shared_ptr<Layer>& layer);
  // Records `layer` audited in the journal, so a restart does not audit it again.
  void RecordAudited(const std::shared_ptr<Layer>& layer);
  // After a scrub pass, where the filesystem has fs-verity: the sealed layers of `passed` that
  // lack it get it (a read-only copy first, ReadOnlyCopyLocked; a layer whose old fd is still
  // held by a reader is left for the next pass).
  void ProtectScrubbed(std::vector<std::shared_ptr<Layer>> passed);
  // The scrub thread: ScrubOnce every options.scrub_interval until the cache closes.
  void ScrubLoop();
  // Re-hashes a chunk recorded by an earlier process; true if it still matches.
  bool RecheckRecorded(const std::shared_ptr<Layer>& layer, uint64_t chunk);

  const CacheOptions options_;
  RemoteBlobSource* const remote_;
  int lock_fd_ = -1;  // flock on <dir>/lock, held for the cache's life
  Clock* const time_;

  // The layers, their mutex and its rule (layer_table.h).
  LayerTable table_;
  int bulk_in_flight_ ABSL_GUARDED_BY(table_.mu()) = 0;
  std::deque<std::shared_ptr<Layer>> bulk_layers_ ABSL_GUARDED_BY(table_.mu());  // kAll prefetches
  // Stopped (its threads joined) first thing in the destructor.
  FetchScheduler scheduler_;
  // Compressed layers being decoded by RegisterDecodedLayer: one decode per source at a time.
  absl::flat_hash_set<Digest> decoding_ ABSL_GUARDED_BY(table_.mu());
  // The decoded layer `digest` for `model_ref` if the cache holds it usable (verified and
  // sealed, or registered in this process); its size, else nullopt.
  std::optional<uint64_t> ReuseDecoded(const Digest& digest, const std::string& model_ref);
  // Decodes `spec.source` into a new data file and installs it, its compressed bytes
  // streamed from the remote through a CompressedStream (decoded_layer.cc).
  class CompressedStream;
  absl::StatusOr<DecodedLayer> DecodeAndInstall(const DecodedLayerSpec& spec);

  // One layout change (SetLayerMembers) at a time. Lock order: members_mu_ before the table's.
  absl::Mutex members_mu_ ABSL_ACQUIRED_BEFORE(table_.mu());
  // Opens the member files of `layout` for a layer whose data file is `layer_fd` (owned by the
  // result): created empty (`create`), or existing ones read-only or read-write.
  absl::StatusOr<std::shared_ptr<LayerSegments>> OpenMembers(const Digest& digest, int layer_fd,
                                                             const std::vector<LayerMember>& layout,
                                                             bool create, bool read_only) const;
  // The layer's local index (whole-layer modes) for its journal row; "" in chunk mode.
  static std::string LocalIndexOf(const Layer& layer) ABSL_SHARED_LOCKS_REQUIRED(layer.mu);

  // Runs ScrubLoop when options.scrub_interval is set; joined by the destructor.
  std::thread scrub_thread_;
  // The layer ScrubOnce is reading now (LayerInfo::scrubbing); nullptr between layers.
  const Layer* scrubbing_ ABSL_GUARDED_BY(table_.mu()) = nullptr;
  // LayerInfo of `layer`, with the lock held.
  LayerInfo InfoLocked(const Layer& layer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu());
  // Takes `layer` out of the table and its bytes out of the table's count (the lock held); the
  // caller then calls FinishEvict with what it returns, without the lock.
  uint64_t UnlinkLocked(const std::shared_ptr<Layer>& layer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu());
  void FinishEvict(const std::shared_ptr<Layer>& layer, uint64_t bytes, absl::string_view why);
  bool fs_verity_ = false;  // set by Init, before any other thread runs
  VerityOps* const verity_;
  // Whether the fs-verity digest of the open data file `fd` of `digest` is `recorded` (true when
  // none was recorded); a difference is logged.
  bool VerityHolds(const Digest& digest, const LayerSegments& files,
                   const std::string& recorded) const;
  // The fs-verity digests of a layer's files as recorded in the `verity` column: the data
  // file's, then ";<offset>=<digest>" per member file ("" for a file without fs-verity).
  std::string MeasureFiles(const LayerSegments& files) const;
  // Enables fs-verity on the layer's member files, then on its data file (reads them all: not
  // under the lock). True when any file got it (its seal changed); failures other than a busy file
  // are logged.
  bool EnableVerityOnFiles(const Layer& layer);
  // Enables fs-verity on the data files of `layers` (sealed, trusted, open read-only and by no
  // writer) and records each digest with the new seal. Runs in Init, without the lock.
  void ProtectSealed(const std::vector<std::shared_ptr<Layer>>& layers);
  // For fs-verity on a layer sealed in this process, whose fd is open for writing: puts in the
  // table, in `layer`'s place, a copy of its state over a new read-only fd (readers of
  // `layer` finish with it). Null when `layer` is not sealed, current and idle, or the file
  // cannot be opened. The file is opened under the lock, as RegisterLayer's is.
  std::shared_ptr<Layer> ReadOnlyCopyLocked(const std::shared_ptr<Layer>& layer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), layer->mu);
  // Per-registry read deadlines after a timeout (endpoint_health.h). A leaf: its own mutex.
  EndpointHealth health_;

  const LayerStore store_;
  ChunkJournal journal_;

  mutable CacheCounters counters_;
  // The fetch side: flights, landing, persistence (flight_engine.h). Last: it refers to the
  // members above.
  FlightEngine flights_;
};

}  // namespace modelfs
