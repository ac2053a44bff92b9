// The state the cache keeps per layer (CacheLayer) and per range request (CacheFlight), with
// the lock that guards each field: the table's mutex (layer_table.h states the rule), which each
// layer refers to as `mu`. Fields without ABSL_GUARDED_BY say why they need no lock.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/cache/cache_options.h"
#include "core/cache/fetch_scheduler.h"
#include "core/cache/layer_segments.h"
#include "core/oci/chunk_hash.h"
#include "core/oci/digest.h"

namespace modelfs {

// kInMemory: verified, but the data file could not take it (disk full); the bytes are held
// in CacheLayer::in_memory until memory_fallback_bytes pushes them out.
enum class ChunkState : uint8_t { kMissing, kInFlight, kPresent, kRecorded, kVerified, kInMemory };

struct CacheFlight;

struct CacheLayer {
  // Made by LayerTable::NewLayer: `table_mu` is the table's mutex. `fd` (the data file) is
  // closed with the layer.
  CacheLayer(absl::Mutex& table_mu, Digest digest_in, uint64_t size_in, uint64_t chunk_size_in,
             int fd_in)
      : mu(table_mu),
        digest(std::move(digest_in)),
        size(size_in),
        chunk_size(chunk_size_in),
        chunks((size_in + chunk_size_in - 1) / chunk_size_in),
        fd(fd_in),
        segments_(std::make_shared<const LayerSegments>(fd_in)) {}
  CacheLayer(const CacheLayer&) = delete;
  CacheLayer& operator=(const CacheLayer&) = delete;
  ~CacheLayer() {
    if (fd >= 0) close(fd);
  }

  // The table's mutex (LayerTable::mu), which guards the fields marked with it.
  absl::Mutex& mu;

  // Fixed at construction, before the layer is in the cache's table, and read without the lock:
  // a layer registered again with another size or chunking is replaced by a new CacheLayer.
  const Digest digest;
  const uint64_t size;
  const uint64_t chunk_size;
  const uint64_t chunks;  // the per-chunk vectors below have this many entries
  const int fd;

  VerifyMode mode ABSL_GUARDED_BY(mu) = VerifyMode::kChunk;
  // The registry that serves it (RemoteBlobSource::EndpointOf).
  std::string endpoint ABSL_GUARDED_BY(mu);
  // Registered in this process (else only known from the database).
  bool has_spec ABSL_GUARDED_BY(mu) = false;
  // Expected chunk hashes: the chunk index (kChunk), or hashes of the verified layer computed
  // locally (whole-layer modes, once the layer digest matched). Empty while unknown.
  std::vector<std::array<uint8_t, 32>> expected ABSL_GUARDED_BY(mu);
  // The algorithm of `expected`: the chunk index's, or SHA-256 for a local index.
  ChunkDigestAlgorithm expected_algorithm ABSL_GUARDED_BY(mu) = ChunkDigestAlgorithm::kSha256;
  std::vector<ChunkState> state ABSL_GUARDED_BY(mu);
  std::vector<std::shared_ptr<CacheFlight>> flight ABSL_GUARDED_BY(mu);
  absl::flat_hash_set<std::string> refs ABSL_GUARDED_BY(mu);
  int pins ABSL_GUARDED_BY(mu) = 0;  // readers inside Read
  int jobs ABSL_GUARDED_BY(mu) = 0;  // flights and verification jobs queued or running
  bool whole_verified ABSL_GUARDED_BY(mu) = false;
  // SealOf(fd) when the whole layer was verified and flushed, so that a later process trusts
  // the file without re-hashing it; "" otherwise.
  std::string seal ABSL_GUARDED_BY(mu);
  // The data file's fs-verity digest, recorded with the seal once fs-verity was enabled on it
  // (LayerScrub::ProtectSealed); "" when it has none.
  std::string verity ABSL_GUARDED_BY(mu);
  bool whole_verify_scheduled ABSL_GUARDED_BY(mu) = false;
  // The audit (CacheOptions::audit) found the layer digest in this process.
  bool audited ABSL_GUARDED_BY(mu) = false;
  bool quarantined ABSL_GUARDED_BY(mu) = false;
  // Quarantined because a new CacheLayer, with a new empty data file, took its place in the
  // table (a scrub finding, LayerScrub::RenewLayerLocked): a reader of this one reads again
  // through the table.
  bool renewed ABSL_GUARDED_BY(mu) = false;
  // The decompressed form of a compressed tar layer (RegisterDecodedLayer): no registry
  // serves its digest, so it cannot be refetched, only decoded again.
  bool decoded ABSL_GUARDED_BY(mu) = false;
  // `fd` is read-only (a sealed file, opened so at Open or by LayerScrub::ReadOnlyCopyLocked):
  // fs-verity may be enabled on the file once no other entry holds it open for writing.
  bool read_only ABSL_GUARDED_BY(mu) = false;
  uint64_t fill_epoch ABSL_GUARDED_BY(mu) = 0;  // bumped when a whole-layer fill request fails
  absl::Status fill_error ABSL_GUARDED_BY(mu);
  // Bumped (under mu) by quarantine and eviction: stale flights are dropped. Atomic because
  // flights and journal writes compare it without the lock, between their steps.
  std::atomic<uint64_t> gen{0};
  int64_t last_used ABSL_GUARDED_BY(mu) = 0;
  uint64_t cached_bytes ABSL_GUARDED_BY(mu) = 0;
  // Read-only fds handed out for passthrough opens (BlobCache::LayerInfo::passthrough_opens).
  uint64_t passthrough_opens ABSL_GUARDED_BY(mu) = 0;
  // The sequential run readers are extending.
  uint64_t run_start ABSL_GUARDED_BY(mu) = 0;
  uint64_t run_end ABSL_GUARDED_BY(mu) = 0;
  uint64_t window ABSL_GUARDED_BY(mu) = 0;
  // Bytes of reads that did not continue the run (each started a new one): tensor-parallel
  // ranks, each copying its slice of every tensor, read a layer at several places at once and
  // never make one run. And one past the farthest byte any read reached.
  uint64_t scattered_bytes ABSL_GUARDED_BY(mu) = 0;
  uint64_t read_front ABSL_GUARDED_BY(mu) = 0;
  // The stream follows scattered readers (their union) rather than one run: it fetches every
  // missing chunk from the start of the layer, up to stream_segments requests past read_front.
  bool stream_scattered ABSL_GUARDED_BY(mu) = false;
  // The layer readers load after this one (BlobCache::SetStreamSuccessor), and whether this
  // layer's stream has started it.
  std::optional<Digest> stream_successor ABSL_GUARDED_BY(mu);
  bool successor_started ABSL_GUARDED_BY(mu) = false;
  uint64_t readahead_min ABSL_GUARDED_BY(mu) = 0;  // LayerSpec::readahead_min
  bool bulk_active ABSL_GUARDED_BY(mu) = false;
  uint64_t bulk_next ABSL_GUARDED_BY(mu) = 0;
  // Streaming (a reader is loading the layer from start to end): the rest of it is fetched
  // in requests of options.stream_request_bytes, options.stream_segments of them in flight at
  // once, never more than that many requests ahead of the reader.
  bool streaming ABSL_GUARDED_BY(mu) = false;
  // The first chunk no stream request has asked for.
  uint64_t stream_next ABSL_GUARDED_BY(mu) = 0;
  int stream_in_flight ABSL_GUARDED_BY(mu) = 0;  // stream requests queued or running
  // A whole-layer fill failed for want of disk space.
  bool fill_disk_full ABSL_GUARDED_BY(mu) = false;
  // Verified chunks the full disk could not take (state kInMemory).
  absl::flat_hash_map<uint64_t, std::shared_ptr<const std::string>> in_memory ABSL_GUARDED_BY(mu);
  // Per chunk, for CacheOptions::drop_served_pages: bytes of it whose replies were sent since
  // it was written (or its pages last dropped); whether it is flushed (its pages are clean, so
  // they can be dropped); whether its pages were dropped (the audit drops them again).
  std::vector<uint32_t> served ABSL_GUARDED_BY(mu);
  std::vector<bool> durable ABSL_GUARDED_BY(mu);
  std::vector<bool> dropped ABSL_GUARDED_BY(mu);

  // LayerMembers::Set (SetLayerMembers) is copying the landed chunks into member files: chunks that
  // land meanwhile (into the old layout) are listed here, to be copied too.
  bool moving ABSL_GUARDED_BY(mu) = false;
  std::vector<uint64_t> moved_dirty ABSL_GUARDED_BY(mu);

  // Where the layer's bytes live (layer_segments.h): `fd` alone, or `fd` and member files.
  // Replaced, never modified, by SetLayerMembers; read with or without `mu`, hence a leaf lock
  // of its own. A reader keeps the one it took for as long as it uses its fds.
  std::shared_ptr<const LayerSegments> Segments() const {
    absl::MutexLock lock(&segments_mu_);
    return segments_;
  }
  void SetSegments(std::shared_ptr<const LayerSegments> s) {
    absl::MutexLock lock(&segments_mu_);
    segments_ = std::move(s);
  }

  // Every chunk in state `s` (on disk, and so flushed, unless kMissing).
  void ResetChunks(ChunkState s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    state.assign(chunks, s);
    flight.resize(chunks);
    served.assign(chunks, 0);
    durable.assign(chunks, s != ChunkState::kMissing);
    dropped.assign(chunks, false);
  }
  uint64_t count() const { return chunks; }
  uint64_t ChunkLen(uint64_t c) const { return std::min(chunk_size, size - c * chunk_size); }
  bool Servable(uint64_t c) const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return state[c] == ChunkState::kVerified ||
           (state[c] == ChunkState::kPresent && mode == VerifyMode::kInsecureStream);
  }

 private:
  mutable absl::Mutex segments_mu_;
  std::shared_ptr<const LayerSegments> segments_ ABSL_GUARDED_BY(segments_mu_);
};

// One range request: chunks [first, last] of a layer, fetched by one FlightEngine::RunFlight.
struct CacheFlight {
  // Fixed at creation, before the flight is queued or any chunk points to it.
  std::shared_ptr<CacheLayer> layer;
  uint64_t first = 0, last = 0;
  uint64_t gen = 0;
  std::string endpoint;  // read without the lock by RunFlight
  // Set when queued, so a reader can promote it.
  std::shared_ptr<FetchScheduler::Ticket> ticket ABSL_GUARDED_BY(layer->mu);
  bool bulk ABSL_GUARDED_BY(layer->mu) = false;
  // A request of the layer's stream (CacheLayer::stream_in_flight).
  bool stream ABSL_GUARDED_BY(layer->mu) = false;
  absl::Time deadline ABSL_GUARDED_BY(layer->mu);
  bool done ABSL_GUARDED_BY(layer->mu) = false;
  // Chunks land one by one as the stream delivers them: [first, first + landed) have their
  // final state and chunk_status (sized at creation).
  uint64_t landed ABSL_GUARDED_BY(layer->mu) = 0;
  bool failed ABSL_GUARDED_BY(layer->mu) = false;  // some chunk of it failed
  std::vector<absl::Status> chunk_status ABSL_GUARDED_BY(layer->mu);
  // Verified chunks that only memory holds (the disk is full), for the readers that waited:
  // the memory budget may drop them from the layer before those readers look again.
  std::vector<std::pair<uint64_t, std::shared_ptr<const std::string>>> memory
      ABSL_GUARDED_BY(layer->mu);
  // A wrong answer (bytes failing verification, a wrong Content-Range) was refetched once
  // already, from chunk `refetch_from` of the flight; the next one fails its chunks. Only
  // RunFlight's thread uses them: no lock.
  bool refetched = false;
  uint64_t refetch_from = 0;
};

}  // namespace modelfs
