#include "core/cache/blob_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
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
#include "core/cache/served_pages.h"
#include "core/cache/verifier.h"
#include "core/oci/modelpack.h"
#include "core/status/status_macros.h"

namespace modelfs {

namespace {

// The one retry rule (core/base/backoff.h): kInternal is not worth a second attempt.
bool Retryable(absl::StatusCode code) { return RetryableCode(code); }

}  // namespace

BlobCache::BlobCache(CacheOptions options, RemoteBlobSource* remote)
    : options_(std::move(options)),
      remote_(remote),
      time_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      scheduler_(options_.fetch_threads),
      store_(options_.dir, options_.write_data) {}

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

absl::Status BlobCache::Init() {
  RETURN_IF_ERROR(store_.Init());
  const std::string db_path = options_.dir + "/cache.db";
  if (absl::Status s = journal_.Open(db_path); !s.ok()) {
    // A full disk ("database or disk is full") must not stop the filesystem from mounting:
    // serve without a persistent record. Data files it vouched for cannot be trusted without
    // it and are removed (LoadFromDb), which also gives the disk back.
    Log(absl::StrCat(s.message(),
                     "; running without a persistent record: data cached earlier "
                     "is dropped and nothing cached now survives a restart"));
    RETURN_IF_ERROR(journal_.Open(":memory:"));
  }
  return LoadFromJournal();
}

BlobCache::~BlobCache() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;  // wakes whole-layer checks waiting for idle reads
  }
  std::vector<std::function<void()>> dropped = scheduler_.Stop();
  PersistPending();  // what the dropped queue would have recorded
  absl::MutexLock lock(&mu_);
  for (auto& drop : dropped) drop();
  bulk_layers_.clear();
  layers_.clear();
}

void BlobCache::Log(absl::string_view line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    fprintf(stderr, "modelfs cache: %.*s\n", static_cast<int>(line.size()), line.data());
  }
}

LayerRecord BlobCache::RecordOf(const Layer& layer, bool whole_verified, std::string local_index,
                                std::string seal) {
  LayerRecord r;
  r.digest = layer.digest.str();
  r.size = layer.size;
  r.chunk_size = layer.chunk_size;
  r.mode = static_cast<int>(layer.mode);
  r.whole_verified = whole_verified;
  r.local_index = std::move(local_index);
  r.last_used = layer.last_used;
  r.seal = std::move(seal);
  return r;
}

absl::Status BlobCache::RecordChunks(const std::shared_ptr<Layer>& layer, uint64_t gen,
                                     const std::vector<uint64_t>& chunks) {
  // Quarantine and eviction bump gen before they Forget the rows, and Forget takes the same
  // journal lock as the check: rows of a dropped layer are either skipped or deleted after.
  return journal_.RecordChunks(layer->digest.str(), chunks,
                               [&] { return layer->gen.load() == gen; });
}

absl::Status BlobCache::LoadFromJournal() {
  ASSIGN_OR_RETURN(std::vector<LayerRecord> rows, journal_.LoadAll());
  std::vector<std::string> forget;
  absl::flat_hash_set<std::string> keep_files;
  {
    absl::MutexLock lock(&mu_);
    for (LayerRecord& r : rows) {
      auto digest = Digest::Parse(r.digest);
      if (!digest.ok() || r.chunk_size == 0 || r.mode < 0 || r.mode > 2) {
        forget.push_back(r.digest);
        continue;
      }
      const uint64_t n = (r.size + r.chunk_size - 1) / r.chunk_size;
      clock_ = std::max(clock_, r.last_used);
      const int fd = store_.OpenExisting(*digest);
      if (fd < 0) {
        forget.push_back(r.digest);
        continue;
      }
      auto layer = std::make_shared<Layer>(mu_, *digest, r.size, r.chunk_size, fd);
      LayerGuard held(*layer, Held(mu_));
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
      if (r.whole_verified && !r.seal.empty() && LayerStore::SealOf(layer->fd) == r.seal) {
        // Verified whole and untouched since: no chunk needs re-hashing.
        layer->seal = r.seal;
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
      cached_bytes_ += layer->cached_bytes;
      keep_files.insert(LayerStore::FileNameOf(layer->digest));
      layers_[layer->digest] = std::move(layer);
    }
  }
  for (const std::string& d : forget) journal_.Forget(d);
  // Data files the journal does not vouch for are untrusted leftovers.
  store_.RemoveAllExcept(keep_files);
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

  absl::MutexLock lock(&mu_);
  std::shared_ptr<Layer> layer = FindLocked(spec.digest);
  const uint64_t n = (spec.size + chunk_size - 1) / chunk_size;
  if (layer) {
    LayerGuard held(*layer, Held(mu_));
    if (layer->has_spec) {
      if (layer->size != spec.size) {
        return absl::InvalidArgumentError(
            absl::StrCat("cache: layer ", spec.digest.str(), " registered with size ", spec.size,
                         " but already known with size ", layer->size));
      }
      layer->refs.insert(spec.model_ref);
      layer->endpoint = endpoint;
      layer->last_used = ++clock_;
      return absl::OkStatus();
    }
    // Known from an earlier process: keep its recorded chunks if they can be re-verified.
    const bool compatible =
        layer->size == spec.size && layer->chunk_size == chunk_size && layer->jobs == 0 &&
        (spec.mode == VerifyMode::kChunk || (layer->whole_verified && layer->expected.size() == n));
    if (!compatible) {
      layer->gen++;
      cached_bytes_ -= layer->cached_bytes;
      layers_.erase(spec.digest);
      journal_.Forget(spec.digest.str());
      layer = nullptr;
    } else {
      layer->mode = spec.mode;
      if (spec.mode == VerifyMode::kChunk) {
        layer->expected = spec.index->chunks;
      }
    }
  }
  if (!layer) {
    ASSIGN_OR_RETURN(const int fd, store_.Create(spec.digest, spec.size, /*truncate=*/true));
    layer = std::make_shared<Layer>(mu_, spec.digest, spec.size, chunk_size, fd);
    LayerGuard held(*layer, Held(mu_));
    layer->mode = spec.mode;
    layer->ResetChunks(ChunkState::kMissing);
    if (spec.mode == VerifyMode::kChunk) layer->expected = spec.index->chunks;
  }
  LayerGuard held(*layer, Held(mu_));
  layer->has_spec = true;
  layer->endpoint = endpoint;
  layer->refs.insert(spec.model_ref);
  layer->last_used = ++clock_;
  std::string local;
  if (spec.mode != VerifyMode::kChunk && layer->whole_verified) {
    for (const auto& h : layer->expected) local.append(reinterpret_cast<const char*>(h.data()), 32);
  }
  if (absl::Status s =
          journal_.UpsertLayer(RecordOf(*layer, layer->whole_verified, local, layer->seal));
      !s.ok()) {
    // The layer still serves (a full disk, say); it is only not remembered across restarts.
    Log(s.message());
  }
  layers_[spec.digest] = layer;
  return absl::OkStatus();
}

void BlobCache::UnregisterLayer(const Digest& digest, absl::string_view model_ref) {
  int64_t stamp = 0;
  {
    absl::MutexLock lock(&mu_);
    auto layer = FindLocked(digest);
    if (!layer) return;
    LayerGuard held(*layer, Held(mu_));
    if (!layer->refs.erase(std::string(model_ref))) return;
    if (!layer->refs.empty()) return;
    layer->last_used = stamp = ++clock_;
  }
  journal_.Touch(digest.str(), stamp);
  EnforceSizeLimit();
}

void BlobCache::UnregisterModel(absl::string_view model_ref) {
  std::vector<Digest> digests;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [digest, layer] : layers_) {
      LayerGuard held(*layer, Held(mu_));
      if (layer->refs.contains(std::string(model_ref))) digests.push_back(digest);
    }
  }
  for (const Digest& d : digests) UnregisterLayer(d, model_ref);
}

std::shared_ptr<BlobCache::Layer> BlobCache::FindLocked(const Digest& digest) const {
  auto it = layers_.find(digest);
  return it == layers_.end() ? nullptr : it->second;
}

// ---------------------------------------------------------------------------------------------
// Scheduling.

void BlobCache::SubmitLocalLocked(int priority, std::function<void()> run) {
  scheduler_.Submit("", priority, std::move(run));
}

void BlobCache::ScheduleMissingLocked(const std::shared_ptr<Layer>& layer, uint64_t first,
                                      uint64_t last, int priority, absl::Time deadline,
                                      std::vector<std::shared_ptr<Flight>>* created,
                                      uint64_t max_request) {
  if (layer->quarantined) return;
  if (max_request == 0) max_request = options_.max_request_bytes;
  uint64_t c = first;
  while (c <= last && c < layer->count()) {
    if (layer->state[c] != ChunkState::kMissing) {
      ++c;
      continue;
    }
    const uint64_t start = c;
    c = MissingRunEnd(*layer, start, last, max_request);
    auto f = std::make_shared<Flight>();
    f->layer = layer;
    f->first = start;
    f->last = c - 1;
    f->gen = layer->gen.load();
    f->deadline = deadline;
    f->chunk_status.assign(c - start, absl::OkStatus());
    for (uint64_t i = start; i < c; ++i) {
      layer->state[i] = ChunkState::kInFlight;
      layer->flight[i] = f;
    }
    layer->jobs++;
    f->endpoint = layer->endpoint;
    // A flight the cache's end drops fails its waiters (none should be left by then).
    f->ticket = scheduler_.Submit(
        f->endpoint, priority, [this, f] { RunFlight(f); },
        [f]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // run by the destructor, under mu_
          f->done = true;
          f->chunk_status.assign(f->last - f->first + 1,
                                 absl::AbortedError("cache is shutting down"));
        });
    if (created) created->push_back(f);
  }
}

void BlobCache::OnServed(const std::shared_ptr<Layer>& layer, uint64_t from, uint64_t to) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  {
    absl::MutexLock lock(&mu_);
    LayerGuard held(*layer, Held(mu_));
    if (layer->quarantined || from >= to || to > layer->size) return;
    const std::vector<uint64_t> whole = CountServed(*layer, from, to);
    if (!whole.empty())
      ranges = TakeServedDrops(*layer, whole, options_.drop_served_pages,
                               counters_.page_cache_bytes_dropped);
  }
  if (!ranges.empty()) DropPages(*layer, ranges);
}

void BlobCache::PumpBulkLocked() {
  if (disk_full_) return;  // bulk_layers_ was cleared when the disk filled
  while (bulk_in_flight_ < options_.prefetch_concurrency && !bulk_layers_.empty()) {
    std::shared_ptr<Layer> layer = bulk_layers_.front();
    LayerGuard held(*layer, Held(mu_));
    auto current = FindLocked(layer->digest);
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
    ScheduleMissingLocked(layer, layer->bulk_next, end - 1, kBulk,
                          time_->Now() + options_.background_deadline, &created);
    for (auto& f : created) f->bulk = true;
    bulk_in_flight_ += static_cast<int>(created.size());
    layer->bulk_next = end;
  }
}

void BlobCache::StartStreamLocked(const std::shared_ptr<Layer>& layer, uint64_t from) {
  if (layer->streaming || layer->quarantined || disk_full_ || from >= layer->count()) return;
  layer->streaming = true;
  layer->stream_next = std::max(layer->stream_next, from);
  PumpStreamLocked(layer);
}

void BlobCache::PumpStreamLocked(const std::shared_ptr<Layer>& layer) {
  if (!layer->streaming || disk_full_ || layer->quarantined || FindLocked(layer->digest) != layer) {
    return;
  }
  const StreamPlan plan = PlanStream(*layer, options_);
  while (std::optional<StreamSegment> segment = NextStreamSegment(*layer, options_, plan)) {
    std::vector<std::shared_ptr<Flight>> created;
    ScheduleMissingLocked(layer, segment->first, segment->last, kReadahead,
                          time_->Now() + options_.background_deadline * segment->pieces, &created,
                          std::numeric_limits<uint64_t>::max());
    for (const auto& f : created) {
      f->stream = true;
      layer->stream_in_flight++;
    }
  }
  if (layer->stream_next >= layer->count() && layer->stream_in_flight == 0) {
    layer->streaming = false;
  }
}

// ---------------------------------------------------------------------------------------------
// Reads.

bool BlobCache::RecheckRecorded(const std::shared_ptr<Layer>& layer, uint64_t c) {
  std::array<uint8_t, 32> want;
  uint64_t len;
  {
    absl::MutexLock lock(&mu_);
    LayerGuard held(*layer, Held(mu_));
    if (layer->state[c] != ChunkState::kRecorded) return true;
    len = layer->ChunkLen(c);
    if (layer->expected.size() != layer->count()) {
      layer->state[c] = ChunkState::kMissing;
      layer->cached_bytes -= len;
      cached_bytes_ -= len;
      return false;
    }
    want = layer->expected[c];
  }
  std::string buf(len, '\0');
  const uint64_t off = c * layer->chunk_size;
  absl::Status io = store_.ReadFull(layer->fd, layer->digest, buf.data(), len, off);
  const bool ok = io.ok() && HashChunk(buf) == want;
  absl::MutexLock lock(&mu_);
  LayerGuard held(*layer, Held(mu_));
  if (layer->state[c] != ChunkState::kRecorded) return ok;
  if (ok) {
    layer->state[c] = ChunkState::kVerified;
    AfterChunksLandedLocked(layer);
  } else {
    counters_.verification_failures++;
    layer->state[c] = ChunkState::kMissing;
    layer->cached_bytes -= len;
    cached_bytes_ -= len;
    Log(absl::StrCat("cached chunk ", c, " of layer ", layer->digest.str(), " (bytes [", off, ", ",
                     off + len, ")) failed re-verification",
                     io.ok() ? "" : absl::StrCat(" (", io.message(), ")"), "; refetching"));
  }
  return ok;
}

absl::Status BlobCache::EnsureChunks(
    const std::shared_ptr<Layer>& layer, uint64_t first, uint64_t last, absl::Time deadline,
    absl::Time fetch_deadline, bool count,
    std::vector<std::pair<uint64_t, std::shared_ptr<const std::string>>>* memory) {
  // Chunks the flights we waited for left only in memory; taken even if the layer dropped them.
  absl::flat_hash_map<uint64_t, std::shared_ptr<const std::string>> from_flights;
  while (true) {
    std::vector<std::shared_ptr<Flight>> waits;
    std::vector<uint64_t> recheck;
    memory->clear();
    {
      absl::MutexLock lock(&mu_);
      LayerGuard held(*layer, Held(mu_));
      if (layer->quarantined) {
        return absl::DataLossError(
            absl::StrCat("layer ", layer->digest.str(), " is quarantined (failed verification)"));
      }
      uint64_t hits = 0, misses = 0;
      for (uint64_t c = first; c <= last; ++c) {
        if (layer->Servable(c)) {
          hits++;
        } else if (layer->state[c] == ChunkState::kInMemory) {
          hits++;
          memory->emplace_back(c, layer->in_memory.at(c));
        } else if (auto it = from_flights.find(c); it != from_flights.end()) {
          hits++;
          memory->emplace_back(c, it->second);
        } else if (layer->state[c] == ChunkState::kRecorded) {
          hits++;
          recheck.push_back(c);
        } else {
          misses++;
          if (layer->state[c] == ChunkState::kInFlight &&
              (waits.empty() || waits.back() != layer->flight[c])) {
            waits.push_back(layer->flight[c]);
          }
        }
      }
      if (count) {
        counters_.chunk_hits += hits;
        counters_.chunk_misses += misses;
        count = false;
      }
      if (recheck.empty()) {
        // Fetch the runs of chunks that no flight left us in memory.
        for (uint64_t c = first; c <= last;) {
          if (from_flights.contains(c)) {
            ++c;
            continue;
          }
          uint64_t run_end = c;
          while (run_end < last && !from_flights.contains(run_end + 1)) ++run_end;
          ScheduleMissingLocked(layer, c, run_end, kForeground, fetch_deadline, &waits);
          c = run_end + 1;
        }
        for (const auto& w : waits) {
          if (w->ticket) scheduler_.Promote(w->ticket, kForeground);
          w->deadline = std::max(w->deadline, fetch_deadline);
        }
      }
    }
    if (!recheck.empty()) {
      for (uint64_t c : recheck) RecheckRecorded(layer, c);
      continue;
    }
    if (waits.empty()) return absl::OkStatus();

    absl::MutexLock lock(&mu_);
    LayerGuard held(*layer, Held(mu_));
    // A flight's chunks land one by one: wait only for the ones this read needs.
    auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_, layer->mu) {
      if (layer->quarantined) return true;
      for (const auto& w : waits) {
        if (!w->done && w->first + w->landed <= std::min(last, w->last)) return false;
      }
      return true;
    };
    if (!time_->AwaitWithDeadline(mu_, absl::Condition(&done), deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("reading layer ", layer->digest.str(), " chunks ", first, "..", last,
                       ": not fetched within the read deadline of ",
                       absl::FormatDuration(options_.read_deadline)));
    }
    for (const auto& w : waits) {
      for (const auto& [c, bytes] : w->memory) {
        if (c >= first && c <= last) from_flights[c] = bytes;
      }
      const uint64_t landed_end = w->first + w->landed;
      for (uint64_t c = std::max(first, w->first); c <= std::min(last, w->last) && c < landed_end;
           ++c) {
        const absl::Status& s = w->chunk_status[c - w->first];
        if (s.ok()) continue;
        // A transient failure of a request started for another reader is retried within our
        // own deadline; verification failures and permanent refusals are reported at once.
        if (!Retryable(s.code()) || time_->Now() >= deadline) {
          if (s.code() == absl::StatusCode::kAborted) {
            return absl::DataLossError(
                absl::StrCat("layer ", layer->digest.str(), ": ", s.message()));
          }
          return s;
        }
      }
    }
  }
}

absl::Status BlobCache::EnsureWholeLayer(const std::shared_ptr<Layer>& layer, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  LayerGuard held(*layer, Held(mu_));
  while (true) {
    if (layer->quarantined) {
      return absl::DataLossError(absl::StrCat("layer ", layer->digest.str(),
                                              " is quarantined (failed whole-layer verification)"));
    }
    if (layer->whole_verified) return absl::OkStatus();
    if (layer->count() > 0) {
      ScheduleMissingLocked(layer, 0, layer->count() - 1, kFill,
                            time_->Now() + options_.background_deadline, nullptr);
    }
    AfterChunksLandedLocked(layer);
    const uint64_t epoch = layer->fill_epoch;
    auto changed = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_, layer->mu) {
      return layer->quarantined || layer->whole_verified || layer->fill_epoch != epoch;
    };
    if (!time_->AwaitWithDeadline(mu_, absl::Condition(&changed), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "reading layer ", layer->digest.str(), ": whole-layer fetch and verification (",
          layer->size, " bytes) not done within the read deadline of ",
          absl::FormatDuration(options_.read_deadline), "; it continues in the background"));
    }
    if (!layer->quarantined && !layer->whole_verified && layer->fill_epoch != epoch &&
        (layer->fill_disk_full || (!Retryable(layer->fill_error.code()) &&
                                   layer->fill_error.code() != absl::StatusCode::kDataLoss))) {
      return layer->fill_error;
    }
  }
}

absl::StatusOr<std::string> BlobCache::Read(const Digest& digest, uint64_t offset,
                                            uint64_t length) {
  ASSIGN_OR_RETURN(std::vector<BlobSpan> spans, ReadSpans(digest, offset, length));
  uint64_t total = 0;
  for (const BlobSpan& span : spans) total += span.length;
  std::string out(total, '\0');
  char* dst = out.data();
  for (const BlobSpan& span : spans) {
    if (span.fd >= 0) {
      RETURN_IF_ERROR(store_.ReadFull(span.fd, digest, dst, span.length, span.offset));
    } else {
      memcpy(dst, span.memory->data() + span.offset, span.length);
    }
    dst += span.length;
  }
  return out;
}

bool BlobCache::IsReady(const Digest& digest, uint64_t offset, uint64_t length) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<Layer> layer = FindLocked(digest);
  if (!layer) return true;  // fails at once
  LayerGuard held(*layer, Held(mu_));
  if (!layer->has_spec || layer->quarantined) return true;
  if (offset >= layer->size || length == 0) return true;
  if (layer->mode == VerifyMode::kWholeLayer && !layer->whole_verified) return false;
  const uint64_t end = layer->size - offset < length ? layer->size : offset + length;
  for (uint64_t c = offset / layer->chunk_size; c <= (end - 1) / layer->chunk_size; ++c) {
    if (!layer->Servable(c) && layer->state[c] != ChunkState::kInMemory) return false;
  }
  return true;
}

int BlobCache::OpenVerifiedBlob(const Digest& digest, uint64_t offset, uint64_t length) {
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Layer> layer = FindLocked(digest);
    if (!layer) return -1;
    LayerGuard held(*layer, Held(mu_));
    if (!layer->has_spec || layer->refs.empty() || layer->quarantined || !layer->whole_verified ||
        layer->seal.empty() || offset != 0 || length != layer->size) {
      return -1;
    }
    for (ChunkState s : layer->state) {
      if (s != ChunkState::kVerified) return -1;
    }
    layer->last_used = ++clock_;
  }
  // A new open file description, read-only: whoever holds it can never write the cache.
  return store_.OpenReadOnly(digest);
}

absl::StatusOr<std::vector<BlobSpan>> BlobCache::ReadSpans(const Digest& digest, uint64_t offset,
                                                           uint64_t length) {
  const absl::Time start = time_->Now();
  const absl::Time fetch_deadline = start + options_.read_deadline;
  std::shared_ptr<Layer> layer;
  std::string endpoint;
  VerifyMode mode;  // fixed once the layer is registered (has_spec)
  {
    absl::MutexLock lock(&mu_);
    layer = FindLocked(digest);
    const auto not_registered = [&] {
      return absl::NotFoundError(absl::StrCat("cache: layer ", digest.str(), " is not registered"));
    };
    if (!layer) return not_registered();
    LayerGuard held(*layer, Held(mu_));
    if (!layer->has_spec || layer->refs.empty()) return not_registered();
    if (layer->quarantined) {
      return absl::DataLossError(
          absl::StrCat("layer ", digest.str(), " is quarantined (failed verification)"));
    }
    layer->pins++;
    layer->last_used = ++clock_;
    last_read_ = start;
    reads_in_progress_++;
    endpoint = layer->endpoint;
    mode = layer->mode;
  }
  const absl::Time deadline = health_.ReadDeadline(endpoint, start, options_.read_deadline);
  struct Unpin {
    BlobCache* cache;
    Layer* layer;
    ~Unpin() {
      absl::MutexLock lock(&cache->mu_);
      LayerGuard held(*layer, Held(cache->mu_));
      layer->pins--;
      cache->reads_in_progress_--;
      cache->last_read_ = cache->time_->Now();
    }
  } unpin{this, layer.get()};

  if (offset >= layer->size || length == 0) return std::vector<BlobSpan>();
  const uint64_t end = layer->size - offset < length ? layer->size : offset + length;
  const uint64_t cs = layer->chunk_size;
  const uint64_t first = offset / cs, last = (end - 1) / cs;

  absl::Status s;
  std::vector<std::pair<uint64_t, std::shared_ptr<const std::string>>> memory;
  if (mode == VerifyMode::kWholeLayer) {
    bool verified;
    {
      absl::MutexLock lock(&mu_);
      LayerGuard held(*layer, Held(mu_));
      verified = layer->whole_verified;
      (verified ? counters_.chunk_hits : counters_.chunk_misses) += last - first + 1;
    }
    s = EnsureWholeLayer(layer, deadline);
    if (s.ok()) {
      s = EnsureChunks(layer, first, last, deadline, fetch_deadline, /*count=*/false, &memory);
    }
  } else {
    {
      absl::MutexLock lock(&mu_);
      LayerGuard held(*layer, Held(mu_));
      if (layer->mode == VerifyMode::kChunk) {
        UpdateReadahead(*layer, options_, offset, end);
        // A reader that has streamed stream_after bytes in a row will read the rest: fetch
        // it with parallel ranges (a registry reading from disk serves several streams
        // several times faster than one).
        if (options_.stream_segments > 0 &&
            layer->run_end - layer->run_start >= options_.stream_after) {
          StartStreamLocked(layer, (layer->run_end + cs - 1) / cs);
          PumpStreamLocked(layer);  // the reader moved on: so may the stream
        }
        if (layer->window > 0 && layer->run_end < layer->size && !disk_full_) {
          const uint64_t ra_end = std::min(layer->size, layer->run_end + layer->window);
          ScheduleMissingLocked(layer, layer->run_end / cs, (ra_end - 1) / cs, kReadahead,
                                time_->Now() + options_.background_deadline, nullptr);
        }
      } else if (!layer->whole_verified && layer->count() > 0) {
        // kInsecureStream: serve what is fetched, but still fetch and check everything. The
        // reader's own chunks go first, in their own request.
        ScheduleMissingLocked(layer, first, last, kForeground, fetch_deadline, nullptr);
        ScheduleMissingLocked(layer, 0, layer->count() - 1, kFill,
                              time_->Now() + options_.background_deadline, nullptr);
      }
    }
    s = EnsureChunks(layer, first, last, deadline, fetch_deadline, /*count=*/true, &memory);
  }
  // Only a read that was given the whole deadline says the registry is not answering; a
  // shortened one failing says nothing new (and must not extend the window: issue 9 §2).
  // A whole-layer fill that outlasts the deadline is a big layer, not a silent registry.
  if (absl::IsDeadlineExceeded(s) && deadline == fetch_deadline &&
      mode != VerifyMode::kWholeLayer && health_.RecordTimeout(endpoint, time_->Now())) {
    Log(absl::StrCat("registry ", endpoint.empty() ? "(default)" : endpoint,
                     " did not serve layer ", digest.str(), " within the read deadline of ",
                     absl::FormatDuration(options_.read_deadline), "; for the next ",
                     absl::FormatDuration(EndpointHealthOptions().retry_window),
                     " (or until it answers) reads that need it wait at most ",
                     absl::FormatDuration(EndpointHealthOptions().fail_fast_wait)));
  }
  if (!s.ok()) return s;

  // The spans hold the layer, and so its fd, for as long as they live: eviction may unlink the
  // data file meanwhile, never close it under a reader.
  std::vector<BlobSpan> spans;
  auto add_file = [&](uint64_t from, uint64_t to) {
    if (!spans.empty() && spans.back().fd >= 0 &&
        spans.back().offset + spans.back().length == from) {
      spans.back().length += to - from;
      return;
    }
    BlobSpan span;
    span.fd = layer->fd;
    span.offset = from;
    span.length = to - from;
    span.keep_alive = layer;
    spans.push_back(std::move(span));
  };
  if (memory.empty()) {
    add_file(offset, end);
  } else {
    // Some chunks live only in memory (the disk is full): those come from there.
    size_t next = 0;
    for (uint64_t c = first; c <= last; ++c) {
      const uint64_t from = std::max(offset, c * cs), to = std::min(end, (c + 1) * cs);
      if (next < memory.size() && memory[next].first == c) {
        BlobSpan span;
        span.offset = from - c * cs;
        span.length = to - from;
        span.memory = std::move(memory[next++].second);
        spans.push_back(std::move(span));
      } else {
        add_file(from, to);
      }
    }
  }
  {
    absl::MutexLock lock(&mu_);
    LayerGuard held(*layer, Held(mu_));
    if (layer->quarantined) {
      return absl::DataLossError(
          absl::StrCat("layer ", digest.str(), " is quarantined (failed verification)"));
    }
  }
  if (options_.drop_served_pages) {
    // The reply is sent when the caller lets go of the span: then its bytes count as served.
    class Served {
     public:
      Served(BlobCache* cache, std::shared_ptr<Layer> layer, uint64_t from, uint64_t to)
          : cache_(cache), layer_(std::move(layer)), from_(from), to_(to) {}
      Served(const Served&) = delete;
      Served& operator=(const Served&) = delete;
      ~Served() { cache_->OnServed(layer_, from_, to_); }

     private:
      BlobCache* const cache_;
      const std::shared_ptr<Layer> layer_;
      const uint64_t from_, to_;
    };
    for (BlobSpan& span : spans) {
      if (span.fd < 0) continue;
      span.keep_alive =
          std::make_shared<const Served>(this, layer, span.offset, span.offset + span.length);
    }
  }
  counters_.bytes_served += end - offset;
  return spans;
}

absl::Status BlobCache::Prefetch(const Digest& digest, PrefetchPolicy policy,
                                 const std::vector<ByteRange>& header_ranges) {
  absl::MutexLock lock(&mu_);
  auto layer = FindLocked(digest);
  const auto not_registered = [&] {
    return absl::NotFoundError(absl::StrCat("cache: layer ", digest.str(), " is not registered"));
  };
  if (!layer) return not_registered();
  LayerGuard held(*layer, Held(mu_));
  if (!layer->has_spec || layer->refs.empty()) return not_registered();
  if (layer->quarantined) {
    return absl::DataLossError(absl::StrCat("layer ", digest.str(), " is quarantined"));
  }
  if (policy == PrefetchPolicy::kNone || layer->count() == 0) return absl::OkStatus();
  // Bytes that cannot be cached would be fetched for nothing: prefetch waits for space.
  if (disk_full_) return absl::OkStatus();
  const absl::Time deadline = time_->Now() + options_.background_deadline;
  if (layer->mode == VerifyMode::kWholeLayer) {
    // Nothing of such a layer is servable before all of it is verified: headers alone do not
    // help, so only kAll starts the fill.
    if (policy == PrefetchPolicy::kAll && !layer->whole_verified) {
      ScheduleMissingLocked(layer, 0, layer->count() - 1, kBulk, deadline, nullptr);
    }
    return absl::OkStatus();
  }
  for (const ByteRange& r : header_ranges) {
    if (r.length == 0 || r.offset >= layer->size) continue;
    const uint64_t end = layer->size - r.offset < r.length ? layer->size : r.offset + r.length;
    ScheduleMissingLocked(layer, r.offset / layer->chunk_size, (end - 1) / layer->chunk_size,
                          kHeader, deadline, nullptr);
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
// Eviction, stats, introspection.

void BlobCache::EnforceSizeLimit() {
  if (options_.max_bytes == 0) return;
  EvictUnreferenced(options_.max_bytes);
}

std::pair<uint64_t, uint64_t> BlobCache::EvictUnreferenced(uint64_t target) {
  // Each victim with its cached bytes, taken under the lock.
  std::vector<std::pair<std::shared_ptr<Layer>, uint64_t>> victims;
  {
    absl::MutexLock lock(&mu_);
    if (cached_bytes_ <= target) return {0, 0};
    std::vector<std::shared_ptr<Layer>> candidates;
    for (const auto& [digest, layer] : layers_) {
      LayerGuard held(*layer, Held(mu_));
      if (layer->refs.empty() && layer->pins == 0 && layer->jobs == 0) {
        candidates.push_back(layer);
      }
    }
    std::sort(candidates.begin(), candidates.end(),
              [this](const auto& a, const auto& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                LayerGuard held_a(*a, Held(mu_));
                LayerGuard held_b(*b, Held(mu_));
                return a->last_used < b->last_used;
              });
    for (auto& layer : candidates) {
      if (cached_bytes_ <= target) break;
      LayerGuard held(*layer, Held(mu_));
      layer->gen++;
      cached_bytes_ -= layer->cached_bytes;
      memory_.Drop(*layer);
      layers_.erase(layer->digest);
      const uint64_t layer_bytes = layer->cached_bytes;
      victims.emplace_back(std::move(layer), layer_bytes);
    }
  }
  uint64_t bytes = 0;
  for (const auto& [layer, layer_bytes] : victims) {
    counters_.evicted_layers++;
    bytes += layer_bytes;
    Log(absl::StrCat("evicted layer ", layer->digest.str(), " (", layer_bytes,
                     " bytes cached, unreferenced)"));
    journal_.Forget(layer->digest.str());
    store_.Remove(layer->digest);
  }
  return {victims.size(), bytes};
}

CacheStats BlobCache::stats() const {
  CacheStats s;
  s.bytes_fetched = counters_.bytes_fetched.load();
  s.requests = counters_.requests.load();
  s.chunk_hits = counters_.chunk_hits.load();
  s.chunk_misses = counters_.chunk_misses.load();
  s.verification_failures = counters_.verification_failures.load();
  s.quarantined_layers = counters_.quarantined_layers.load();
  s.bytes_served = counters_.bytes_served.load();
  s.page_cache_bytes_dropped = counters_.page_cache_bytes_dropped.load();
  s.sealed_layers = counters_.sealed_layers.load();
  s.audited_layers = counters_.audited_layers.load();
  s.evicted_layers = counters_.evicted_layers.load();
  absl::MutexLock lock(&mu_);
  s.cached_bytes = cached_bytes_;
  return s;
}

absl::StatusOr<BlobCache::LayerInfo> BlobCache::GetLayerInfo(const Digest& digest) const {
  absl::MutexLock lock(&mu_);
  auto layer = FindLocked(digest);
  if (!layer) {
    return absl::NotFoundError(absl::StrCat("cache: nothing known about layer ", digest.str()));
  }
  LayerGuard held(*layer, Held(mu_));
  LayerInfo info;
  info.size = layer->size;
  info.chunk_count = layer->count();
  for (ChunkState s : layer->state) {
    if (s == ChunkState::kVerified || s == ChunkState::kRecorded || s == ChunkState::kPresent) {
      info.cached_chunks++;
    }
  }
  info.whole_verified = layer->whole_verified;
  info.audited = layer->audited;
  info.quarantined = layer->quarantined;
  info.readahead_window = layer->window;
  info.references = static_cast<int>(layer->refs.size());
  return info;
}

bool BlobCache::WaitIdle(absl::Time deadline) { return scheduler_.WaitIdle(deadline); }

}  // namespace modelfs
