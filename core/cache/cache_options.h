// The cache's value types: its options (CacheOptions, with PrefetchPolicy and RetryPolicy), what
// a registration says (LayerSpec, DecodedLayerSpec, ByteRange), its counters (CacheCounters,
// read out as CacheStats) and the priorities of its work (FetchPriority). Every part of
// core/cache sees them here, none through blob_cache.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "core/base/backoff.h"
#include "core/base/clock.h"
#include "core/base/log_event.h"
#include "core/cache/fs_verity.h"
#include "core/oci/chunk_index.h"
#include "core/oci/digest.h"
#include "core/oci/media_types.h"

namespace modelfs {

enum class VerifyMode {
  kChunk,           // needs LayerSpec::index
  kWholeLayer,      // default when no chunk index exists
  kInsecureStream,  // serve unverified bytes: explicit opt-in only
};

enum class PrefetchPolicy { kNone, kHeadersOnly, kAll };

// Retries of a failed range request, always bounded by the request's deadline. The cache owns
// the read deadline, so it owns the only retry loop on the read path (core/base/backoff.h).
using RetryPolicy = BackoffPolicy;

struct CacheOptions {
  std::string dir;               // created if missing; holds blobs/ and cache.db
  uint64_t max_bytes = 0;        // 0: unbounded. Unreferenced layers are evicted LRU first.
  int fetch_threads = 8;         // parallel range requests
  int prefetch_concurrency = 2;  // background prefetch requests in flight at once
  absl::Duration read_deadline = absl::Seconds(30);       // a Read never waits longer
  absl::Duration background_deadline = absl::Minutes(5);  // per prefetch/fill request
  RetryPolicy retry;
  uint64_t max_request_bytes = 16ull << 20;  // cap of one coalesced range request
  uint64_t readahead_min = 4ull << 20;       // smallest window once a reader is sequential
  uint64_t readahead_max = 64ull << 20;      // the window (half the sequential run) stops here
  uint64_t whole_chunk_size = 4ull << 20;    // chunking of layers without an index
  // Once a reader has read this many bytes of a layer in a row, the rest of the layer is
  // streamed: requests of `stream_request_bytes`, `stream_segments` of them in flight and at
  // most that many ahead of the reader (0 segments: never; readahead alone).
  uint64_t stream_after = 32ull << 20;
  int stream_segments = 4;
  uint64_t stream_request_bytes = 64ull << 20;
  // In chunk mode, the whole-layer check of a complete layer (a second SHA-256 pass over it)
  // waits until no layer was read for this long (at most 30 s, and not at all once the cache
  // is closing), so that it does not take CPU from a model load still under way.
  absl::Duration verify_when_idle = absl::Seconds(1);
  // In chunk mode, whether that whole-layer check (the audit) runs at all. A layer is sealed,
  // and served by passthrough, as soon as every chunk matched the chunk index, which chains to
  // the pinned manifest; the audit is defense in depth against a chunk index that disagrees
  // with its layer. It runs at idle CPU and I/O priority.
  bool audit = true;
  // While reads are being served, the fdatasync that makes fetched chunks durable (after it,
  // the journal records them and their served pages leave the page cache) waits: until no read
  // has been served for verify_when_idle, until persist_delay has passed since the oldest of
  // them landed, or until the cache closes. A layer whose every chunk has landed is flushed
  // when it is sealed, at once. So a cold load's disk does not write and flush the cache while
  // the load still reads (a registry or another pod may be reading the same disk); the kernel's
  // writeback or the flush after the load does it. A crash loses at most persist_delay of
  // fetching: those chunks are not in the journal, and are fetched again. Zero: flush after
  // every flight (the chunks are durable as soon as they are served).
  absl::Duration persist_delay = absl::ZeroDuration();
  // The scrub: every scrub_interval (zero: never) each sealed layer is read and hashed again
  // (layer_scrub.cc), at idle CPU and I/O priority and at most scrub_rate bytes a second;
  // layers sealed but never audited (by this process or an earlier one) go first and are
  // audited by the same pass. A mismatch quarantines the layer at once.
  absl::Duration scrub_interval = absl::ZeroDuration();
  uint64_t scrub_rate = 32ull << 20;
  // While the cache disk is full, verified chunks are served from memory instead of the data
  // file; this bounds the bytes kept (oldest dropped first). Readahead and prefetch pause.
  uint64_t memory_fallback_bytes = 64ull << 20;
  // Once every byte of a chunk has gone to a reader (the reply is sent) and the chunk is on
  // disk, its pages of the data file leave the page cache (POSIX_FADV_DONTNEED): the reader's
  // own copy (the FUSE file's pages) is the one the node keeps, not two. A later read of the
  // chunk comes from the local disk. False keeps them.
  bool drop_served_pages = true;
  // SetLayerMembers keeps tar members of at least this many bytes in files of their own (so
  // that each can be served by passthrough); smaller ones stay in the layer's data file.
  uint64_t member_min_bytes = 64ull << 10;
  // Test seam for a failing disk: writes `n` bytes at `offset` of a data file and returns 0 or
  // an errno (ENOSPC, EDQUOT: the disk is full). Null: pwrite.
  std::function<int(int fd, const char* data, uint64_t n, uint64_t offset)> write_data;
  // Time for deadlines, backoff and registry health; null: Clock::Real(). Must outlive the cache.
  Clock* clock = nullptr;
  // fs-verity (fs_verity.h); null: the kernel's. Must outlive the cache. Where the cache
  // directory's filesystem has it, a sealed layer's data file gets fs-verity at the first scrub
  // pass after its seal that finds no writer holding it (the layer moves to a read-only fd
  // first), or when the cache is next opened, and its digest is recorded with the seal; a
  // sealed file whose digest differs, or that lost it, is not trusted (re-hashed, or fetched
  // again).
  VerityOps* verity = nullptr;
  // Receives one event per notable happening (verification failure, quarantine, eviction),
  // component "cache"; refusals carry digest, range, registry and reason fields.
  // Default: log::WriteToStderr.
  log::Sink log;
};

// Sends `event` where the cache's events go: options.log, else stderr.
inline void LogCacheEvent(const CacheOptions& options, const log::Event& event) {
  if (options.log) {
    options.log(event);
  } else {
    log::WriteToStderr(event);
  }
}

struct LayerSpec {
  Digest digest;
  uint64_t size = 0;
  std::optional<ChunkIndex> index;  // required for kChunk; its blob_digest/size must match
  VerifyMode mode = VerifyMode::kChunk;
  std::string model_ref;  // who references the layer; a layer with no reference is evictable
  // How long a reader's sequential run must be before the layer reads ahead of it, if longer
  // than CacheOptions::readahead_min. A lazily decoded layer asks for more: a lone random read
  // already costs the span before it, and readahead would decode one more for nothing.
  uint64_t readahead_min = 0;
};

// A compressed tar layer (.tar+gzip, .tar+zstd) to serve decompressed: RegisterDecodedLayer.
struct DecodedLayerSpec {
  Digest source;  // the compressed layer, as M lists it
  uint64_t source_size = 0;
  LayerEncoding encoding = LayerEncoding::kTarGzip;
  std::optional<Digest> diff_id;  // M's config diffId for the layer, when it gives one
  std::string model_ref;
};

// A byte range of a layer, e.g. a safetensors header to prefetch first.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct CacheStats {
  uint64_t bytes_fetched = 0;  // bytes received from the remote
  uint64_t requests = 0;       // range requests sent (each retry counts)
  uint64_t chunk_hits = 0;     // chunks a Read found cached
  uint64_t chunk_misses = 0;   // chunks a Read had to wait for
  // Answers of a chunk (or whole layers) whose hash did not match, each counted once, whether
  // or not a refetch then brought the right bytes.
  uint64_t verification_failures = 0;
  // Refetches after a wrong answer (a chunk failing verification, a wrong Content-Range) whose
  // chunk then verified.
  uint64_t refetch_recoveries = 0;
  uint64_t quarantined_layers = 0;
  uint64_t bytes_served = 0;  // bytes returned by Read
  uint64_t evicted_layers = 0;
  uint64_t cached_bytes = 0;  // bytes of layer data currently on disk
  // Bytes of data files dropped from the page cache after they were served (drop_served_pages).
  uint64_t page_cache_bytes_dropped = 0;
  uint64_t sealed_layers = 0;   // chunk-mode layers sealed once every chunk was verified
  uint64_t audited_layers = 0;  // of them, audited against their digest (CacheOptions::audit)
  uint64_t scrubbed_bytes = 0;  // bytes of sealed layers the scrub read and hashed again
  uint64_t scrub_failures = 0;  // sealed layers the scrub found changed on disk
  // Of them, layers renewed: a new, empty data file took the changed one's place and its
  // chunks are fetched and verified again (the others were dropped: decoded layers, layers
  // no model registered in this process).
  uint64_t scrub_repairs = 0;
  // The cache directory's filesystem can enable fs-verity on a file (probed at Open).
  bool fs_verity = false;
};

// State of one layer, for status output and tests (BlobCache::LayerInfo).
struct CacheLayerInfo {
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

// What BlobCache::EvictLayers evicted, and the layers it left in place because they are in use
// (referenced, pinned by a reader, or with a job queued).
struct CacheEvictResult {
  uint64_t layers = 0;
  uint64_t bytes = 0;
  std::vector<Digest> busy;
};

// The cache's counters, read out as CacheStats; shared by every part of the cache.
struct CacheCounters {
  std::atomic<uint64_t> bytes_fetched{0}, requests{0}, chunk_hits{0}, chunk_misses{0},
      verification_failures{0}, quarantined_layers{0}, bytes_served{0}, evicted_layers{0},
      page_cache_bytes_dropped{0}, sealed_layers{0}, audited_layers{0}, refetch_recoveries{0},
      scrubbed_bytes{0}, scrub_failures{0}, scrub_repairs{0};
};

// The FetchScheduler priorities of the cache's work, most urgent first.
struct FetchPriority {
  static constexpr int kForeground = 0;
  static constexpr int kReadahead = 1;
  static constexpr int kHeader = 2;
  static constexpr int kFill = 3;
  static constexpr int kBulk = 4;
  static constexpr int kVerify = 5;  // whole-layer checks, persistence
};

}  // namespace modelfs
