// BlobCache (blob_cache.h): opening, registration, the bulk and stream pumps, prefetch, eviction,
// stats, and what a flight's end means for the cache. The read path is blob_cache_read.cc.
#include "core/cache/blob_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/background_priority.h"
#include "core/base/buffer_pool.h"
#include "core/cache/fetch_planner.h"
#include "core/cache/fs_verity.h"
#include "core/cache/served_pages.h"
#include "core/cache/verifier.h"
#include "core/oci/modelpack.h"
#include "core/status/status_macros.h"

namespace modelfs {

BlobCache::BlobCache(CacheOptions options, RemoteBlobSource* remote)
    : options_(std::move(options)),
      remote_(remote),
      time_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      scheduler_(options_.fetch_threads),
      store_(options_.dir, options_.write_data),
      flights_(table_, options_, remote_, time_, scheduler_, health_, store_, journal_, counters_,
               *this),
      audit_(table_, options_, time_, scheduler_, store_, journal_, flights_, counters_),
      scrub_(table_, options_, time_, store_, journal_, counters_, audit_, *this),
      members_(table_, options_, store_, journal_, audit_),
      decoded_(table_, options_, remote_, time_, store_, journal_, counters_, audit_,
               [this](const LayerSpec& spec) { return RegisterLayer(spec); }),
      eviction_(table_, options_, store_, journal_, flights_, counters_) {}

absl::StatusOr<std::unique_ptr<BlobCache>> BlobCache::Open(CacheOptions options,
                                                           RemoteBlobSource* remote) {
  if (options.dir.empty()) return absl::InvalidArgumentError("cache: options.dir is empty");
  if (remote == nullptr) return absl::InvalidArgumentError("cache: no remote blob source");
  if (options.fetch_threads < 1) options.fetch_threads = 1;
  if (options.prefetch_concurrency < 1) options.prefetch_concurrency = 1;
  if (options.max_request_bytes == 0 || options.whole_chunk_size == 0) {
    return absl::InvalidArgumentError("cache: max_request_bytes and whole_chunk_size must be > 0");
  }
  if (options.readahead_min > options.readahead_max) options.readahead_max = options.readahead_min;
  std::unique_ptr<BlobCache> cache(new BlobCache(std::move(options), remote));
  RETURN_IF_ERROR(cache->Init());
  return cache;
}

absl::Status BlobCache::LockDir() {
  // One cache per directory: two processes would each trust the other's half-written files
  // and evict layers the other serves. flock is released by the kernel when the holder dies.
  const std::string lock_path = options_.dir + "/lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) {
    return absl::InternalError(absl::StrCat("cache: open ", lock_path, ": ", strerror(errno)));
  }
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    char holder[128] = {};
    ssize_t n = ::pread(lock_fd_, holder, sizeof(holder) - 1, 0);
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "another process";
    while (!who.empty() && (who.back() == '\n' || who.back() == '\0')) who.pop_back();
    return absl::FailedPreconditionError(
        absl::StrCat("cache: ", options_.dir, " is in use by ", who, " (", lock_path,
                     " is locked); a cache directory serves one process: give this one its own "
                     "(modelfs mount --cache DIR)"));
  }
  // Who holds it, for the message above: "modelfs-snapshotter (pid 123)".
  const std::string me = absl::StrCat(program_invocation_short_name, " (pid ", ::getpid(), ")\n");
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, me.data(), me.size(), 0) < 0) {
    Log(log::Warn("cache",
                  absl::StrCat("cannot record the holder in ", lock_path, ": ", strerror(errno))));
  }
  return absl::OkStatus();
}

absl::Status BlobCache::Init() {
  RETURN_IF_ERROR(store_.Init());
  RETURN_IF_ERROR(LockDir());
  const std::string db_path = options_.dir + "/cache.db";
  if (absl::Status s = journal_.Open(db_path); !s.ok()) {
    // A full disk ("database or disk is full") must not stop the filesystem from mounting:
    // serve without a persistent record. Data files it vouched for cannot be trusted without
    // it and are removed (LoadFromDb), which also gives the disk back.
    Log(log::Error("cache", absl::StrCat(s.message(),
                                         "; running without a persistent record: data cached "
                                         "earlier is dropped and nothing cached now survives a "
                                         "restart")));
    RETURN_IF_ERROR(journal_.Open(":memory:"));
  }
  scrub_.ProbeVerity();
  RETURN_IF_ERROR(LoadFromJournal());
  scrub_.Start();
  return absl::OkStatus();
}

BlobCache::~BlobCache() {
  {
    TableLock lock(table_);
    table_.Close();  // wakes whole-layer checks waiting for idle reads, and the scrub
    flights_.StopLocked();
  }
  scrub_.Join();
  std::vector<std::function<void()>> dropped = scheduler_.Stop();
  flights_.PersistPending();  // what the dropped queue would have recorded
  TableLock lock(table_);
  for (auto& drop : dropped) drop();
  bulk_layers_.clear();
  table_.Clear();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // last: the directory is free once nothing writes
}

absl::Status BlobCache::LoadFromJournal() {
  ASSIGN_OR_RETURN(std::vector<LayerRecord> rows, journal_.LoadAll());
  std::vector<std::string> forget;
  absl::flat_hash_set<std::string> keep_files;
  std::vector<std::shared_ptr<Layer>> protect;  // sealed, trusted, without fs-verity yet
  {
    TableLock lock(table_);
    for (LayerRecord& r : rows) {
      auto digest = Digest::Parse(r.digest);
      if (!digest.ok() || r.chunk_size == 0 || r.mode < 0 || r.mode > 2) {
        forget.push_back(r.digest);
        continue;
      }
      const uint64_t n = (r.size + r.chunk_size - 1) / r.chunk_size;
      table_.SeenStamp(r.last_used);
      // A sealed file is opened read-only: nothing writes it again, and fs-verity (which a
      // file with fs-verity keeps for ever) needs a file nobody holds open for writing. It is
      // trusted when its seal and fs-verity digest are still the ones recorded.
      // A layer with member files (layer_segments.h) is sealed over all of them.
      std::vector<LayerMember> layout;
      for (const auto& [offset, length] : r.members) layout.push_back({offset, length});
      std::shared_ptr<LayerSegments> segments;
      auto open_members = [&](int fd, bool read_only) {
        if (layout.empty()) return true;
        absl::StatusOr<std::shared_ptr<LayerSegments>> s = OpenMemberFiles(
            store_, *digest, fcntl(fd, F_DUPFD_CLOEXEC, 0), layout, /*create=*/false, read_only);
        if (!s.ok()) {
          Log(log::Warn("cache", s.status().message()));
          return false;
        }
        segments = *std::move(s);
        return true;
      };
      int fd = -1;
      bool trusted = false;
      if (r.whole_verified && !r.seal.empty()) {
        fd = store_.OpenReadOnly(*digest);
        const LayerSegments whole(fd);  // the data file alone, when it has no members
        trusted = fd >= 0 && open_members(fd, /*read_only=*/true) &&
                  (segments ? segments->Seal() : LayerStore::SealOf(fd)) == r.seal &&
                  scrub_.VerityHolds(*digest, segments ? *segments : whole, r.verity);
        if (!trusted && fd >= 0) {
          close(fd);
          fd = -1;
          segments.reset();
        }
      }
      // Else read-write, for its missing chunks (a file with fs-verity cannot be: dropped).
      if (fd < 0) fd = store_.OpenExisting(*digest);
      if (fd >= 0 && !segments && !open_members(fd, /*read_only=*/false)) {
        close(fd);
        fd = -1;
      }
      if (fd < 0) {
        forget.push_back(r.digest);
        continue;
      }
      auto layer = table_.NewLayer(*digest, r.size, r.chunk_size, fd);
      if (segments) layer->SetSegments(std::move(segments));
      LayerGuard held(*layer, Held(table_));
      layer->mode = static_cast<VerifyMode>(r.mode);
      layer->ResetChunks(ChunkState::kMissing);
      layer->whole_verified = r.whole_verified;
      if (r.local_index.size() == n * 32) {
        layer->expected.resize(n);
        for (uint64_t i = 0; i < n; ++i) {
          memcpy(layer->expected[i].data(), &r.local_index[i * 32], 32);
        }
      }
      layer->last_used = r.last_used;
      if (trusted) {
        // Verified whole and untouched since: no chunk needs re-hashing.
        layer->seal = r.seal;
        layer->verity = r.verity;
        layer->read_only = true;
        if (scrub_.fs_verity() && r.verity.empty()) protect.push_back(layer);
        // Whole-layer modes were checked against the digest before they were sealed.
        layer->audited = r.audited || layer->mode != VerifyMode::kChunk;
        layer->ResetChunks(ChunkState::kVerified);
        layer->cached_bytes = layer->size;
      } else {
        // Unsealed (a cache from before seals, or a seal that no longer matches): its chunks
        // are re-hashed on first read, and in chunk mode the whole-layer check runs again
        // once they all are, which seals it.
        if (layer->mode == VerifyMode::kChunk) layer->whole_verified = false;
        for (uint64_t c : r.chunks) {
          if (c < n && layer->state[c] == ChunkState::kMissing) {
            layer->state[c] = ChunkState::kRecorded;
            layer->durable[c] = true;
            layer->cached_bytes += layer->ChunkLen(c);
          }
        }
      }
      if (layer->cached_bytes == 0) {
        // Partial data of a whole-layer fill, or nothing at all: not worth keeping.
        forget.push_back(r.digest);
        continue;
      }
      table_.CountLayer(*layer);
      keep_files.insert(LayerStore::FileNameOf(layer->digest));
      if (layer->Segments()->has_members()) {
        keep_files.insert(LayerStore::MemberDirNameOf(layer->digest));
      }
      table_.Put(std::move(layer));
    }
  }
  for (const std::string& d : forget) journal_.Forget(d);
  // Data files the journal does not vouch for are untrusted leftovers.
  store_.RemoveAllExcept(keep_files);
  scrub_.ProtectSealed(protect);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Registration.

absl::Status BlobCache::RegisterLayer(const LayerSpec& spec) {
  if (spec.digest.empty()) return absl::InvalidArgumentError("cache: layer digest is empty");
  if (spec.model_ref.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache: layer ", spec.digest.str(), " registered without a model_ref"));
  }
  // The per-chunk state below is sized from spec.size: a declared size from an untrusted
  // manifest must not turn into an allocation that throws.
  if (spec.size > kMaxModelLayerBytes) {
    return absl::InvalidArgumentError(absl::StrCat("cache: layer ", spec.digest.str(), " declares ",
                                                   spec.size, " bytes, over the limit of ",
                                                   kMaxModelLayerBytes));
  }
  uint64_t chunk_size = options_.whole_chunk_size;
  if (spec.mode == VerifyMode::kChunk) {
    if (!spec.index) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cache: layer ", spec.digest.str(), " registered for chunk verification without index"));
    }
    const ChunkIndex& idx = *spec.index;
    if (idx.blob_digest != spec.digest || idx.blob_size != spec.size) {
      return absl::InvalidArgumentError(
          absl::StrCat("cache: chunk index describes ", idx.blob_digest.str(), " (", idx.blob_size,
                       " bytes), not layer ", spec.digest.str(), " (", spec.size, " bytes)"));
    }
    if (idx.chunk_size == 0 || idx.chunk_size > (64ull << 20)) {
      return absl::InvalidArgumentError(absl::StrCat("cache: chunk index of ", spec.digest.str(),
                                                     " has chunk size ", idx.chunk_size));
    }
    if (idx.chunks.size() != (spec.size + idx.chunk_size - 1) / idx.chunk_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cache: chunk index of ", spec.digest.str(), " has ", idx.chunks.size(), " chunks; a ",
          spec.size, "-byte layer needs ", (spec.size + idx.chunk_size - 1) / idx.chunk_size));
    }
    chunk_size = idx.chunk_size;
  }
  const std::string endpoint = remote_->EndpointOf(spec.digest);

  TableLock lock(table_);
  std::shared_ptr<Layer> layer = table_.Find(spec.digest);
  const uint64_t n = (spec.size + chunk_size - 1) / chunk_size;
  if (layer) {
    LayerGuard held(*layer, Held(table_));
    if (layer->has_spec) {
      if (layer->size != spec.size) {
        return absl::InvalidArgumentError(
            absl::StrCat("cache: layer ", spec.digest.str(), " registered with size ", spec.size,
                         " but already known with size ", layer->size));
      }
      layer->refs.insert(spec.model_ref);
      layer->endpoint = endpoint;
      layer->last_used = table_.Stamp();
      return absl::OkStatus();
    }
    // Known from an earlier process: keep its recorded chunks if they can be re-verified.
    const bool compatible =
        layer->size == spec.size && layer->chunk_size == chunk_size && layer->jobs == 0 &&
        (spec.mode == VerifyMode::kChunk || (layer->whole_verified && layer->expected.size() == n));
    if (!compatible) {
      table_.Unlink(*layer);
      journal_.Forget(spec.digest.str());
      layer = nullptr;
    } else {
      layer->mode = spec.mode;
      if (spec.mode == VerifyMode::kChunk) {
        layer->expected = spec.index->chunks;
        layer->expected_algorithm = spec.index->algorithm;
      }
    }
  }
  if (!layer) {
    store_.RemoveMembers(spec.digest);  // of a layer dropped above, if it had any
    ASSIGN_OR_RETURN(const int fd, store_.Create(spec.digest, spec.size, /*truncate=*/true));
    layer = table_.NewLayer(spec.digest, spec.size, chunk_size, fd);
    LayerGuard held(*layer, Held(table_));
    layer->mode = spec.mode;
    layer->ResetChunks(ChunkState::kMissing);
    if (spec.mode == VerifyMode::kChunk) {
      layer->expected = spec.index->chunks;
      layer->expected_algorithm = spec.index->algorithm;
    }
  }
  LayerGuard held(*layer, Held(table_));
  layer->has_spec = true;
  layer->readahead_min = spec.readahead_min;
  layer->endpoint = endpoint;
  layer->refs.insert(spec.model_ref);
  layer->last_used = table_.Stamp();
  std::string local;
  if (spec.mode != VerifyMode::kChunk && layer->whole_verified &&
      layer->expected_algorithm == ChunkDigestAlgorithm::kSha256) {
    for (const auto& h : layer->expected) local.append(reinterpret_cast<const char*>(h.data()), 32);
  }
  if (absl::Status s =
          journal_.UpsertLayer(RecordOf(*layer, layer->whole_verified, local, layer->seal));
      !s.ok()) {
    // The layer still serves (a full disk, say); it is only not remembered across restarts.
    Log(log::Warn("cache", s.message()));
  }
  table_.Put(layer);
  return absl::OkStatus();
}

void BlobCache::UnregisterLayer(const Digest& digest, absl::string_view model_ref) {
  int64_t stamp = 0;
  {
    TableLock lock(table_);
    auto layer = table_.Find(digest);
    if (!layer) return;
    LayerGuard held(*layer, Held(table_));
    if (!layer->refs.erase(std::string(model_ref))) return;
    if (!layer->refs.empty()) return;
    layer->last_used = stamp = table_.Stamp();
  }
  journal_.Touch(digest.str(), stamp);
  EnforceSizeLimit();
}

void BlobCache::UnregisterModel(absl::string_view model_ref) {
  std::vector<Digest> digests;
  {
    TableLock lock(table_);
    for (const std::shared_ptr<Layer>& layer : table_.Layers()) {
      LayerGuard held(*layer, Held(table_));
      if (layer->refs.contains(std::string(model_ref))) digests.push_back(layer->digest);
    }
  }
  for (const Digest& d : digests) UnregisterLayer(d, model_ref);
}

absl::Status BlobCache::NotRegistered(const Digest& digest) {
  return absl::NotFoundError(absl::StrCat("cache: layer ", digest.str(), " is not registered"));
}

// ---------------------------------------------------------------------------------------------
// Scheduling.

void BlobCache::ScheduleMissingLocked(const std::shared_ptr<Layer>& layer, uint64_t first,
                                      uint64_t last, int priority, absl::Time deadline,
                                      std::vector<std::shared_ptr<Flight>>* created,
                                      uint64_t max_request) {
  flights_.ScheduleLocked(layer, first, last, priority, deadline, created, max_request);
}

void BlobCache::PumpBulkLocked() {
  if (DiskFullLocked()) return;  // bulk_layers_ was cleared when the disk filled
  while (bulk_in_flight_ < options_.prefetch_concurrency && !bulk_layers_.empty()) {
    std::shared_ptr<Layer> layer = bulk_layers_.front();
    LayerGuard held(*layer, Held(table_));
    auto current = table_.Find(layer->digest);
    while (current == layer && !layer->quarantined && layer->bulk_next < layer->count() &&
           layer->state[layer->bulk_next] != ChunkState::kMissing) {
      layer->bulk_next++;
    }
    if (current != layer || layer->quarantined || layer->bulk_next >= layer->count()) {
      layer->bulk_active = false;
      bulk_layers_.pop_front();
      continue;
    }
    std::vector<std::shared_ptr<Flight>> created;
    const uint64_t end =
        MissingRunEnd(*layer, layer->bulk_next, layer->count() - 1, options_.max_request_bytes);
    ScheduleMissingLocked(layer, layer->bulk_next, end - 1, FetchPriority::kBulk,
                          time_->Now() + options_.background_deadline, &created);
    for (auto& f : created) {
      LayerGuard held_f(*f->layer, Held(table_));
      f->bulk = true;
    }
    bulk_in_flight_ += static_cast<int>(created.size());
    layer->bulk_next = end;
  }
}

void BlobCache::StartStreamLocked(const std::shared_ptr<Layer>& layer, uint64_t from) {
  if (layer->streaming || layer->quarantined || DiskFullLocked() || from >= layer->count()) return;
  layer->streaming = true;
  layer->stream_next = std::max(layer->stream_next, from);
  PumpStreamLocked(layer);
}

void BlobCache::PumpStreamLocked(const std::shared_ptr<Layer>& layer) {
  if (!layer->streaming || DiskFullLocked() || layer->quarantined ||
      table_.Find(layer->digest) != layer) {
    return;
  }
  const StreamPlan plan = PlanStream(*layer, options_);
  while (std::optional<StreamSegment> segment = NextStreamSegment(*layer, options_, plan)) {
    std::vector<std::shared_ptr<Flight>> created;
    ScheduleMissingLocked(layer, segment->first, segment->last, FetchPriority::kReadahead,
                          time_->Now() + options_.background_deadline * segment->pieces, &created,
                          std::numeric_limits<uint64_t>::max());
    for (const auto& f : created) {
      LayerGuard held_f(*f->layer, Held(table_));
      f->stream = true;
      layer->stream_in_flight++;
    }
  }
  // Passed on only once a reader streams this layer itself (a run of readahead_min, or the
  // ranks' scattered reads): a stream the predecessor started, or a header read, is no sign
  // that the loader got here, and small layers would otherwise pass it down the whole model.
  const bool read_here =
      layer->run_end - layer->run_start >= options_.readahead_min || layer->stream_scattered;
  if (layer->stream_next >= layer->count() && read_here && layer->stream_successor &&
      !layer->successor_started) {
    layer->successor_started = true;
    std::shared_ptr<Layer> next = table_.FindRegistered(*layer->stream_successor);
    if (next && next != layer) {
      LayerGuard held_next(*next, Held(table_));
      if (next->mode == VerifyMode::kChunk && !next->whole_verified) StartStreamLocked(next, 0);
    }
  }
  if (layer->stream_next >= layer->count() && layer->stream_in_flight == 0) {
    layer->streaming = false;
  }
}

void BlobCache::SetStreamSuccessor(const Digest& layer, const Digest& next) {
  TableLock lock(table_);
  std::shared_ptr<Layer> l = table_.FindRegistered(layer);
  if (!l) return;
  LayerGuard held(*l, Held(table_));
  l->stream_successor = next;
  l->successor_started = false;
}

absl::Status BlobCache::Prefetch(const Digest& digest, PrefetchPolicy policy,
                                 const std::vector<ByteRange>& header_ranges) {
  TableLock lock(table_);
  auto layer = table_.FindRegistered(digest);
  if (!layer) return NotRegistered(digest);
  LayerGuard held(*layer, Held(table_));
  if (layer->quarantined) {
    return absl::DataLossError(absl::StrCat("layer ", digest.str(), " is quarantined"));
  }
  if (policy == PrefetchPolicy::kNone || layer->count() == 0) return absl::OkStatus();
  // Bytes that cannot be cached would be fetched for nothing: prefetch waits for space.
  if (DiskFullLocked()) return absl::OkStatus();
  const absl::Time deadline = time_->Now() + options_.background_deadline;
  if (layer->mode == VerifyMode::kWholeLayer) {
    // Nothing of such a layer is servable before all of it is verified: headers alone do not
    // help, so only kAll starts the fill.
    if (policy == PrefetchPolicy::kAll && !layer->whole_verified) {
      ScheduleMissingLocked(layer, 0, layer->count() - 1, FetchPriority::kBulk, deadline, nullptr);
    }
    return absl::OkStatus();
  }
  for (const ByteRange& r : header_ranges) {
    if (r.length == 0 || r.offset >= layer->size) continue;
    const uint64_t end = layer->size - r.offset < r.length ? layer->size : r.offset + r.length;
    ScheduleMissingLocked(layer, r.offset / layer->chunk_size, (end - 1) / layer->chunk_size,
                          FetchPriority::kHeader, deadline, nullptr);
  }
  if (policy == PrefetchPolicy::kAll && !layer->bulk_active) {
    layer->bulk_active = true;
    layer->bulk_next = 0;
    bulk_layers_.push_back(layer);
    PumpBulkLocked();
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Eviction (LayerEviction), stats, introspection.

void BlobCache::EnforceSizeLimit() {
  if (options_.max_bytes == 0) return;
  eviction_.EvictUnreferenced(options_.max_bytes);
}

BlobCache::EvictResult BlobCache::EvictLayers(const std::vector<Digest>& digests) {
  return eviction_.EvictLayers(digests);
}

CacheStats BlobCache::stats() const {
  CacheStats s;
  s.bytes_fetched = counters_.bytes_fetched.load();
  s.requests = counters_.requests.load();
  s.chunk_hits = counters_.chunk_hits.load();
  s.chunk_misses = counters_.chunk_misses.load();
  s.verification_failures = counters_.verification_failures.load();
  s.refetch_recoveries = counters_.refetch_recoveries.load();
  s.quarantined_layers = counters_.quarantined_layers.load();
  s.bytes_served = counters_.bytes_served.load();
  s.page_cache_bytes_dropped = counters_.page_cache_bytes_dropped.load();
  s.sealed_layers = counters_.sealed_layers.load();
  s.audited_layers = counters_.audited_layers.load();
  s.scrubbed_bytes = counters_.scrubbed_bytes.load();
  s.scrub_failures = counters_.scrub_failures.load();
  s.scrub_repairs = counters_.scrub_repairs.load();
  s.fs_verity = scrub_.fs_verity();
  s.evicted_layers = counters_.evicted_layers.load();
  TableLock lock(table_);
  s.cached_bytes = table_.cached_bytes();
  return s;
}

absl::StatusOr<BlobCache::LayerInfo> BlobCache::GetLayerInfo(const Digest& digest) const {
  TableLock lock(table_);
  auto layer = table_.Find(digest);
  if (!layer) {
    return absl::NotFoundError(absl::StrCat("cache: nothing known about layer ", digest.str()));
  }
  return InfoLocked(*layer);
}

BlobCache::LayerInfo BlobCache::InfoLocked(const Layer& layer) const {
  LayerGuard held(layer, Held(table_));
  LayerInfo info;
  info.size = layer.size;
  info.chunk_count = layer.count();
  for (uint64_t c = 0; c < layer.state.size(); ++c) {
    const ChunkState s = layer.state[c];
    if (s == ChunkState::kVerified || s == ChunkState::kRecorded || s == ChunkState::kPresent) {
      info.cached_chunks++;
      info.cached_bytes += layer.ChunkLen(c);
    }
    if (s == ChunkState::kVerified || s == ChunkState::kInMemory) {
      info.verified_bytes += layer.ChunkLen(c);
    }
  }
  info.whole_verified = layer.whole_verified;
  info.audited = layer.audited;
  info.quarantined = layer.quarantined;
  info.readahead_window = layer.window;
  info.references = static_cast<int>(layer.refs.size());
  info.scrubbing = scrub_.ScrubbingLocked(layer);
  info.passthrough_opens = layer.passthrough_opens;
  info.models.assign(layer.refs.begin(), layer.refs.end());
  std::sort(info.models.begin(), info.models.end());
  return info;
}

std::map<Digest, BlobCache::LayerInfo> BlobCache::ListLayers() const {
  TableLock lock(table_);
  std::map<Digest, LayerInfo> out;
  for (const std::shared_ptr<Layer>& layer : table_.Layers()) {
    out.emplace(layer->digest, InfoLocked(*layer));
  }
  return out;
}

bool BlobCache::disk_full() const {
  TableLock lock(table_);
  return DiskFullLocked();
}

// ---------------------------------------------------------------------------------------------
// What a flight's end means for the cache (FlightEngine::Owner).

void BlobCache::DiskFilledLocked(const Layer& layer) {
  TableGuard g(table_, Held(layer));
  for (auto& l : bulk_layers_) {
    LayerGuard held_l(*l, Held(table_));
    l->bulk_active = false;
  }
  bulk_layers_.clear();
}

bool BlobCache::FlightEndedLocked(const std::shared_ptr<Layer>& layer, bool bulk, bool stream,
                                  bool failed, bool stale) {
  TableGuard g(table_, Held(*layer));
  if (bulk) {
    bulk_in_flight_--;
    PumpBulkLocked();
  }
  if (stream) {
    layer->stream_in_flight--;
    if (stale || failed) layer->streaming = false;  // the reader's own fetches go on
    PumpStreamLocked(layer);
  }
  if (!stale) audit_.AfterChunksLandedLocked(layer);
  return options_.max_bytes > 0 && table_.cached_bytes() > options_.max_bytes;
}

void BlobCache::AfterFlight(bool became_full, bool over_budget) {
  if (became_full) {
    // Make room for the models in use: what no model references goes first, all of it.
    auto [layers, bytes] = eviction_.EvictUnreferenced(0);
    Log(log::Error("cache",
                   "cache directory is full (no space left on device): serving verified bytes "
                   "from the network without caching them, readahead and prefetch paused")
            .Field("dir", options_.dir)
            .Field("evicted_layers", layers)
            .Field("evicted_bytes", bytes));
  } else if (over_budget) {
    EnforceSizeLimit();
  }
}

void BlobCache::RefetchLocked(const std::shared_ptr<Layer>& layer) {
  TableGuard g(table_, Held(*layer));
  if (layer->mode == VerifyMode::kChunk) {
    layer->bulk_active = true;
    layer->bulk_next = 0;
    bulk_layers_.push_back(layer);
    PumpBulkLocked();
  } else {
    ScheduleMissingLocked(layer, 0, layer->count() - 1, FetchPriority::kFill,
                          time_->Now() + options_.background_deadline, nullptr);
  }
}

absl::StatusOr<DecodedLayer> BlobCache::RegisterDecodedLayer(const DecodedLayerSpec& spec) {
  return decoded_.Register(spec);
}

absl::Status BlobCache::SetLayerMembers(const Digest& digest,
                                        const std::vector<std::pair<uint64_t, uint64_t>>& files) {
  return members_.Set(digest, files);
}

int BlobCache::OpenVerifiedFile(const Digest& digest, uint64_t offset, uint64_t length) {
  return members_.OpenVerifiedFile(digest, offset, length);
}

int BlobCache::ScrubOnce() { return scrub_.ScrubOnce(); }

bool BlobCache::WaitIdle(absl::Time deadline) { return scheduler_.WaitIdle(deadline); }

}  // namespace modelfs
