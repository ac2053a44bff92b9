// FlightEngine (flight_engine.h): flights, the landing of their chunks, and persistence.
#include "core/cache/flight_engine.h"

#include <errno.h>
#include <string.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/base/backoff.h"
#include "core/cache/cache_options.h"
#include "core/cache/fetch_planner.h"
#include "core/cache/served_pages.h"
#include "core/cache/verifier.h"
#include "core/status/status_macros.h"

namespace modelfs {

namespace {

std::string ErrnoText(int err) { return std::string(strerror(err)); }

}  // namespace

void FlightEngine::ScheduleLocked(const std::shared_ptr<CacheLayer>& layer, uint64_t first,
                                  uint64_t last, int priority, absl::Time deadline,
                                  std::vector<std::shared_ptr<CacheFlight>>* created,
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
    auto f = std::make_shared<CacheFlight>();
    f->layer = layer;
    TableGuard g(table_, Held(*layer));
    LayerGuard held_f(*f->layer, Held(table_));
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
        [f]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // run by the destructor, under the lock
          f->done = true;
          f->chunk_status.assign(f->last - f->first + 1,
                                 absl::AbortedError("cache is shutting down"));
        });
    if (created) created->push_back(f);
  }
}

absl::Status FlightEngine::LandChunk(const std::shared_ptr<CacheFlight>& f, uint64_t i,
                                     const ReceivedChunk& r,
                                     const std::vector<std::array<uint8_t, 32>>& expected,
                                     FlightWrites* w) {
  const std::shared_ptr<CacheLayer>& layer = f->layer;
  const uint64_t cs = layer->chunk_size;
  const uint64_t c = f->first + i;
  const uint64_t len = r.bytes.size();
  absl::Status cst;
  std::shared_ptr<const std::string> memory;
  if (!expected.empty()) {
    cst = CheckChunkHash(r.hash, expected[i], layer->digest, c, c * cs, len);
    if (!cst.ok()) {
      counters_.verification_failures++;
      if (!f->refetched) {
        // One wrong answer (a flaky middlebox, a bad mirror) is not an EIO: fetch it again.
        health_.RecordError(f->endpoint, time_->Now(), std::string(cst.message()));
        owner_.Log(log::Warn("cache", "chunk failed verification; fetching it once more")
                       .Field("digest", layer->digest.str())
                       .Range(c * cs, c * cs + len - 1)
                       .Field("registry", f->endpoint)
                       .Field("reason", cst.message()));
        return MarkBadAnswer(cst);
      }
      owner_.Log(log::Error("cache", "chunk failed verification again; not served")
                     .Field("digest", layer->digest.str())
                     .Range(c * cs, c * cs + len - 1)
                     .Field("registry", f->endpoint)
                     .Field("reason", cst.message()));
    }
  }
  if (cst.ok() && f->refetched && i == f->refetch_from) {
    // The answer after a wrong one was right: counted apart, so a flipped byte stays visible.
    counters_.refetch_recoveries++;
  }
  // Where the chunk's bytes go: the layer file, or member files (layer_segments.h).
  std::shared_ptr<const LayerSegments> segments = layer->Segments();
  if (cst.ok()) {
    const int err = segments->Write(store_, r.bytes.data(), len, c * cs);
    if (err == 0) {
      w->good.push_back(c);
      w->wrote = true;
    } else if (err == ENOSPC || err == EDQUOT) {
      w->disk_full = true;
      if (expected.empty()) {
        // Nothing of a whole-layer fill is servable before all of it is verified on disk.
        cst = absl::ResourceExhaustedError(
            absl::StrCat("cache directory ", options_.dir, " is full: layer ", layer->digest.str(),
                         " has no chunk index, so it must be cached whole before it is served"));
      } else {
        // Verified: hand the bytes to the readers without recording them.
        memory = std::make_shared<const std::string>(r.bytes.data(), r.bytes.size());
      }
    } else {
      cst = absl::InternalError(absl::StrCat("writing ", store_.PathOf(layer->digest),
                                             " at offset ", c * cs, ": ", ErrnoText(err)));
    }
  }
  // Verified chunks are served from the page cache at once; their fdatasync and record are
  // batched by PersistPending. Chunks of an unverified whole-layer fill are recorded only after
  // the layer digest matches (RunWholeVerify).
  LayerLock lock(table_, *layer);
  LayerGuard held_f(*f->layer, Held(table_));
  if (w->disk_full && !disk_full_) {
    // Said at once, not when the flight ends: readers may already be served.
    disk_full_ = w->became_full = true;
    // What cannot be cached should not be fetched ahead: readahead and prefetch pause.
    owner_.DiskFilledLocked(*layer);
  } else if (!w->disk_full && cst.ok()) {
    disk_full_ = false;  // this write worked: the disk has room again
  }
  if (layer->flight[c] == f) layer->flight[c] = nullptr;
  if (cst.ok() && !memory && layer->gen.load() == f->gen && layer->Segments() != segments) {
    // SetLayerMembers switched the layout after the write: the bytes go where it says now.
    // Rare (once per layer, while few chunks land), so under the lock.
    if (const int err = layer->Segments()->Write(store_, r.bytes.data(), len, c * cs); err != 0) {
      cst = absl::InternalError(absl::StrCat("writing chunk ", c, " of layer ", layer->digest.str(),
                                             ": ", ErrnoText(err)));
      if (!w->good.empty() && w->good.back() == c) w->good.pop_back();  // nothing to persist
    }
  }
  if (layer->gen.load() != f->gen) {
    cst = absl::DataLossError(
        absl::StrCat("layer ", layer->digest.str(), " was quarantined or evicted"));
  } else if (memory) {
    f->memory.emplace_back(c, memory);
    memory_.Keep(table_, layer, c, std::move(memory), options_.memory_fallback_bytes);
  } else if (cst.ok()) {
    // Landed in the old layout while SetLayerMembers copies: it copies this one too.
    if (layer->moving) layer->moved_dirty.push_back(c);
    layer->state[c] = expected.empty() ? ChunkState::kPresent : ChunkState::kVerified;
    layer->served[c] = 0;
    layer->durable[c] = false;  // dirty until PersistPending's fdatasync
    layer->dropped[c] = false;
    table_.AddLayerBytes(*layer, len);
  } else {
    layer->state[c] = ChunkState::kMissing;
    if (!f->failed) {
      layer->fill_error = cst;
      layer->fill_disk_full = absl::IsResourceExhausted(cst);
    }
    f->failed = true;
  }
  f->chunk_status[i] = std::move(cst);
  f->landed = i + 1;
  return absl::OkStatus();
}

void FlightEngine::RunFlight(const std::shared_ptr<CacheFlight>& f) {
  const std::shared_ptr<CacheLayer>& layer = f->layer;
  const uint64_t cs = layer->chunk_size;
  const uint64_t n = f->last - f->first + 1;
  std::vector<std::array<uint8_t, 32>> expected;
  ChunkDigestAlgorithm algorithm;
  {
    LayerLock lock(table_, *layer);
    if (!layer->expected.empty()) {
      expected.assign(layer->expected.begin() + f->first, layer->expected.begin() + f->last + 1);
    }
    algorithm = layer->expected_algorithm;
  }
  const uint64_t end = std::min(layer->size, (f->last + 1) * cs);

  FlightWrites writes;
  ChunkAssembler chunk(cs, expected.empty() ? std::nullopt : std::optional(algorithm));
  uint64_t next = 0;  // chunks of the flight that have landed
  absl::Status st;
  Backoff backoff(options_.retry, time_, absl::InfiniteFuture());
  while (next < n) {
    const uint64_t offset = (f->first + next) * cs;
    const std::string range = absl::StrCat(layer->digest.str(), " bytes [", offset, ", ", end, ")");
    absl::Time deadline;
    {
      TableLock lock(table_);
      LayerGuard held_f(*f->layer, Held(table_));
      deadline = f->deadline;
    }
    if (layer->gen.load() != f->gen) {
      st = absl::AbortedError(absl::StrCat("fetching ", range, ": layer was dropped"));
      break;
    }
    if (time_->Now() >= deadline) {
      st = absl::DeadlineExceededError(
          absl::StrCat("fetching ", range, ": deadline passed",
                       st.ok() ? "" : "; last error: ", st.ok() ? "" : std::string(st.message())));
      break;
    }
    counters_.requests++;
    chunk.Restart();
    st = remote_->StreamRange(
        layer->digest, offset, end - offset, deadline, [&](absl::string_view data) {
          counters_.bytes_fetched += data.size();
          while (!data.empty() && next < n) {
            if (chunk.Take(data, layer->ChunkLen(f->first + next))) {
              RETURN_IF_ERROR(LandChunk(f, next, chunk.Finish(), expected, &writes));
              ++next;
            }
          }
          if (layer->gen.load() != f->gen) {
            return absl::AbortedError(absl::StrCat("fetching ", range, ": layer was dropped"));
          }
          return absl::OkStatus();
        });
    if (next == n) {
      st = absl::OkStatus();
      if (health_.RecordSuccess(f->endpoint)) {
        owner_.Log(log::Info("cache",
                             "registry answers again; reads that need it get the full "
                             "deadline")
                       .Field("registry", f->endpoint.empty() ? "(default)" : f->endpoint));
      }
      break;
    }
    if (st.ok()) {
      st = absl::UnavailableError(absl::StrCat("fetching ", range, ": the stream ended early"));
    }
    if (IsBadAnswer(st) && !f->refetched) {
      // At once, from the chunk that was wrong (the remote asks the next host for it).
      f->refetched = true;
      f->refetch_from = next;
      continue;
    }
    if (!RetryableCode(st.code())) break;  // kInternal is not worth a second attempt
    std::optional<absl::Duration> wait = backoff.Next();
    if (!wait) break;
    // The reader's deadline may move later (another reader joins), so the loop checks it
    // itself rather than giving the Backoff a fixed one.
    time_->SleepFor(std::min(*wait, std::max(absl::ZeroDuration(), deadline - time_->Now())));
  }
  if (!st.ok() && st.code() != absl::StatusCode::kAborted) {
    health_.RecordError(f->endpoint, time_->Now(), std::string(st.message()));
    owner_.Log(log::Warn("cache", "fetch failed")
                   .Field("digest", f->layer->digest.str())
                   .Range(f->first * f->layer->chunk_size,
                          std::min(f->layer->size, (f->last + 1) * f->layer->chunk_size) - 1)
                   .Field("registry", f->endpoint)
                   .Field("reason", st.message()));
  }

  bool over_budget = false;
  bool became_full = false;
  {
    LayerLock lock(table_, *layer);
    LayerGuard held_f(*f->layer, Held(table_));
    const bool stale = layer->gen.load() != f->gen;
    // The chunks the stream never delivered fail with its error.
    for (uint64_t i = next; i < n; ++i) {
      const uint64_t c = f->first + i;
      if (layer->flight[c] == f) layer->flight[c] = nullptr;
      if (stale) {
        f->chunk_status[i] = absl::DataLossError(
            absl::StrCat("layer ", layer->digest.str(), " was quarantined or evicted"));
        continue;
      }
      layer->state[c] = ChunkState::kMissing;
      if (!f->failed) {
        layer->fill_error = st;
        layer->fill_disk_full = absl::IsResourceExhausted(st);
      }
      f->failed = true;
      f->chunk_status[i] = st;
    }
    became_full = writes.became_full;
    if (writes.wrote && !writes.disk_full) disk_full_ = false;
    if (!stale && !writes.good.empty() && !expected.empty()) {
      QueuePersistLocked(layer, f->gen, std::move(writes.good));
    }
    if (f->failed && !stale) layer->fill_epoch++;
    f->landed = n;
    f->done = true;
    layer->jobs--;
    over_budget = owner_.FlightEndedLocked(layer, f->bulk, f->stream, f->failed, stale);
  }
  owner_.AfterFlight(became_full, over_budget);
}

void FlightEngine::QueuePersistLocked(const std::shared_ptr<CacheLayer>& layer, uint64_t gen,
                                      std::vector<uint64_t> chunks) {
  layer->jobs++;  // keeps eviction (and its unlink) away until the record is written
  if (persist_pending_.empty()) persist_since_ = time_->Now();
  persist_pending_.push_back(PendingPersist{layer, gen, std::move(chunks)});
  if (persist_scheduled_ || stopping_) return;
  persist_scheduled_ = true;
  scheduler_.Submit("", FetchPriority::kVerify, [this] { PersistPending(); });
}

void FlightEngine::AwaitPersistLocked() {
  if (options_.persist_delay <= absl::ZeroDuration()) return;
  const absl::Time until = persist_since_ + options_.persist_delay;
  // A read in progress is checked again every poll (its end does not signal).
  const absl::Duration poll = std::max(options_.verify_when_idle, absl::Milliseconds(100));
  while (!stopping_.load(std::memory_order_relaxed)) {
    const absl::Time now = time_->Now();
    const absl::Time idle_at = table_.IdleAt(options_.verify_when_idle);
    if (now >= until || now >= idle_at) return;
    time_->AwaitWithDeadline(
        table_.mu(),
        absl::Condition(
            +[](std::atomic<bool>* s) { return s->load(std::memory_order_relaxed); }, &stopping_),
        std::min({until, idle_at, now + poll}));
  }
}

void FlightEngine::PersistPending() {
  std::vector<PendingPersist> batch;
  {
    TableLock lock(table_);
    AwaitPersistLocked();
    batch.swap(persist_pending_);
    persist_scheduled_ = false;
  }
  // One fdatasync per file the batch wrote to (a layer's data file, or the member files its
  // chunks met), then the records.
  absl::flat_hash_map<CacheLayer*, std::vector<std::pair<uint64_t, uint64_t>>> written;
  for (const PendingPersist& p : batch) {
    for (uint64_t c : p.chunks) {
      written[p.layer.get()].emplace_back(c * p.layer->chunk_size,
                                          c * p.layer->chunk_size + p.layer->ChunkLen(c));
    }
  }
  absl::flat_hash_map<CacheLayer*, absl::Status> synced;
  for (const PendingPersist& p : batch) {
    auto [it, inserted] = synced.try_emplace(p.layer.get());
    if (inserted) {
      it->second = p.layer->Segments()->SyncRanges(store_, p.layer->digest, written[p.layer.get()]);
      if (!it->second.ok()) owner_.Log(log::Warn("cache", it->second.message()));
    }
    if (!it->second.ok()) continue;  // the bytes are verified; only crash persistence is lost
    absl::Status s = RecordChunks(p.layer, p.gen, p.chunks);
    if (!s.ok()) owner_.Log(log::Warn("cache", s.message()));
  }
  std::vector<std::pair<const PendingPersist*, std::vector<std::pair<uint64_t, uint64_t>>>> drops;
  {
    TableLock lock(table_);
    for (const PendingPersist& p : batch) {
      if (synced[p.layer.get()].ok() && p.layer->gen.load() == p.gen) {
        LayerGuard held(*p.layer, Held(table_));
        auto ranges = TakeServedDrops(*p.layer, p.chunks, options_.drop_served_pages,
                                      counters_.page_cache_bytes_dropped);
        if (!ranges.empty()) drops.emplace_back(&p, std::move(ranges));
      }
    }
  }
  for (const auto& [p, ranges] : drops) DropPages(*p->layer, ranges);
  TableLock lock(table_);
  for (const PendingPersist& p : batch) {
    LayerGuard held(*p.layer, Held(table_));
    p.layer->jobs--;
  }
}

void FlightEngine::DropMemoryLocked(CacheLayer& layer) {
  TableGuard g(table_, Held(layer));
  memory_.Drop(layer);
}

void FlightEngine::Promote(const CacheFlight& flight, int priority) {
  if (flight.ticket) scheduler_.Promote(flight.ticket, priority);
}

absl::Status FlightEngine::RecordChunks(const std::shared_ptr<CacheLayer>& layer, uint64_t gen,
                                        const std::vector<uint64_t>& chunks) {
  // Quarantine and eviction bump gen before they Forget the rows, and Forget takes the same
  // journal lock as the check: rows of a dropped layer are either skipped or deleted after.
  return journal_.RecordChunks(layer->digest.str(), chunks,
                               [&] { return layer->gen.load() == gen; });
}

}  // namespace modelfs
