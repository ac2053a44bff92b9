// BlobCache's read path: a read pins its layer, moves the layer's readahead and stream on
// (fetch_planner.h), waits for the chunks it needs (fetching what no flight has asked for
// yet), and returns spans over the data file, or memory for chunks a full disk left there.
#include <string.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/backoff.h"
#include "core/cache/blob_cache.h"
#include "core/cache/fetch_planner.h"
#include "core/cache/served_pages.h"
#include "core/cache/verifier.h"
#include "core/status/status_macros.h"

namespace modelfs {

namespace {

// The one retry rule (core/base/backoff.h): kInternal is not worth a second attempt.
bool Retryable(absl::StatusCode code) { return RetryableCode(code); }

}  // namespace

bool BlobCache::RecheckRecorded(const std::shared_ptr<Layer>& layer, uint64_t c) {
  std::array<uint8_t, 32> want;
  ChunkDigestAlgorithm algorithm;
  uint64_t len;
  {
    LayerLock lock(table_, *layer);
    if (layer->state[c] != ChunkState::kRecorded) return true;
    len = layer->ChunkLen(c);
    if (layer->expected.size() != layer->count()) {
      layer->state[c] = ChunkState::kMissing;
      table_.RemoveLayerBytes(*layer, len);
      return false;
    }
    want = layer->expected[c];
    algorithm = layer->expected_algorithm;
  }
  std::string buf(len, '\0');
  const uint64_t off = c * layer->chunk_size;
  absl::Status io = layer->Segments()->ReadFull(store_, layer->digest, buf.data(), len, off);
  const bool ok = io.ok() && HashChunkBytes(algorithm, buf) == want;
  LayerLock lock(table_, *layer);
  if (layer->state[c] != ChunkState::kRecorded) return ok;
  if (ok) {
    layer->state[c] = ChunkState::kVerified;
    audit_.AfterChunksLandedLocked(layer);
  } else {
    counters_.verification_failures++;
    layer->state[c] = ChunkState::kMissing;
    table_.RemoveLayerBytes(*layer, len);
    Log(log::Warn("cache", "cached chunk failed re-verification; refetching")
            .Field("digest", layer->digest.str())
            .Range(off, off + len - 1)
            .Field("registry", layer->endpoint)
            .Field("reason", io.ok() ? "hash mismatch" : io.message()));
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
      LayerLock lock(table_, *layer);
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
          ScheduleMissingLocked(layer, c, run_end, FetchPriority::kForeground, fetch_deadline,
                                &waits);
          c = run_end + 1;
        }
        for (const auto& w : waits) {
          LayerGuard held_w(*w->layer, Held(table_));
          flights_.Promote(*w, FetchPriority::kForeground);
          w->deadline = std::max(w->deadline, fetch_deadline);
        }
      }
    }
    if (!recheck.empty()) {
      for (uint64_t c : recheck) RecheckRecorded(layer, c);
      continue;
    }
    if (waits.empty()) return absl::OkStatus();

    LayerLock lock(table_, *layer);
    // A flight's chunks land one by one: wait only for the ones this read needs.
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu(), layer->mu) {
      if (layer->quarantined) return true;
      for (const auto& w : waits) {
        LayerGuard held_w(*w->layer, Held(table_));
        if (!w->done && w->first + w->landed <= std::min(last, w->last)) return false;
      }
      return true;
    };
    if (!time_->AwaitWithDeadline(table_.mu(), absl::Condition(&done), deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("reading layer ", layer->digest.str(), " chunks ", first, "..", last,
                       ": not fetched within the read deadline of ",
                       absl::FormatDuration(options_.read_deadline)));
    }
    for (const auto& w : waits) {
      LayerGuard held_w(*w->layer, Held(table_));
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
  LayerLock lock(table_, *layer);
  while (true) {
    if (layer->quarantined) {
      return absl::DataLossError(absl::StrCat("layer ", layer->digest.str(),
                                              " is quarantined (failed whole-layer verification)"));
    }
    if (layer->whole_verified) return absl::OkStatus();
    if (layer->count() > 0) {
      ScheduleMissingLocked(layer, 0, layer->count() - 1, FetchPriority::kFill,
                            time_->Now() + options_.background_deadline, nullptr);
    }
    audit_.AfterChunksLandedLocked(layer);
    const uint64_t epoch = layer->fill_epoch;
    auto changed = [&]() ABSL_SHARED_LOCKS_REQUIRED(table_.mu(), layer->mu) {
      return layer->quarantined || layer->whole_verified || layer->fill_epoch != epoch;
    };
    if (!time_->AwaitWithDeadline(table_.mu(), absl::Condition(&changed), deadline)) {
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
  for (int attempt = 0;; ++attempt) {
    std::shared_ptr<Layer> used;
    ASSIGN_OR_RETURN(std::vector<BlobSpan> spans, ReadSpansRenewing(digest, offset, length, &used));
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
    // The scrub renewed the layer while these bytes were copied from its changed file: they
    // may be the changed ones. Read again, from the new file.
    if (used && Renewed(*used)) {
      if (attempt < 2) continue;
      return absl::DataLossError(absl::StrCat("layer ", digest.str(), " (bytes [", offset, ", ",
                                              offset + length,
                                              ")) was found changed on disk during the read"));
    }
    return out;
  }
}

bool BlobCache::Renewed(const Layer& layer) const {
  LayerLock lock(table_, layer);
  return layer.renewed;
}

absl::StatusOr<std::vector<BlobSpan>> BlobCache::ReadSpans(const Digest& digest, uint64_t offset,
                                                           uint64_t length) {
  std::shared_ptr<Layer> used;
  return ReadSpansRenewing(digest, offset, length, &used);
}

absl::StatusOr<std::vector<BlobSpan>> BlobCache::ReadSpansRenewing(const Digest& digest,
                                                                   uint64_t offset, uint64_t length,
                                                                   std::shared_ptr<Layer>* used) {
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<std::vector<BlobSpan>> spans = ReadSpansOnce(digest, offset, length, used);
    // A layer renewed is quarantined: its readers go on with the new one in the table.
    if (spans.ok() || attempt == 2 || !absl::IsDataLoss(spans.status()) || !*used ||
        !Renewed(**used)) {
      return spans;
    }
  }
}

bool BlobCache::IsReady(const Digest& digest, uint64_t offset, uint64_t length) {
  TableLock lock(table_);
  std::shared_ptr<Layer> layer = table_.Find(digest);
  if (!layer) return true;  // fails at once
  LayerGuard held(*layer, Held(table_));
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
    TableLock lock(table_);
    std::shared_ptr<Layer> layer = table_.Find(digest);
    if (!layer) return -1;
    LayerGuard held(*layer, Held(table_));
    if (!layer->has_spec || layer->refs.empty() || layer->quarantined || !layer->whole_verified ||
        layer->seal.empty() || offset != 0 || length != layer->size ||
        layer->Segments()->has_members()) {
      return -1;
    }
    for (ChunkState s : layer->state) {
      if (s != ChunkState::kVerified) return -1;
    }
    layer->last_used = table_.Stamp();
    layer->passthrough_opens++;
  }
  // A new open file description, read-only: whoever holds it can never write the cache.
  return store_.OpenReadOnly(digest);
}

absl::StatusOr<std::vector<BlobSpan>> BlobCache::ReadSpansOnce(const Digest& digest,
                                                               uint64_t offset, uint64_t length,
                                                               std::shared_ptr<Layer>* used) {
  used->reset();
  const absl::Time start = time_->Now();
  const absl::Time fetch_deadline = start + options_.read_deadline;
  std::shared_ptr<Layer> layer;
  std::string endpoint;
  VerifyMode mode;  // fixed once the layer is registered (has_spec)
  {
    TableLock lock(table_);
    layer = table_.FindRegistered(digest);
    if (!layer) return NotRegistered(digest);
    *used = layer;
    LayerGuard held(*layer, Held(table_));
    if (layer->quarantined) {
      return absl::DataLossError(
          absl::StrCat("layer ", digest.str(), " is quarantined (failed verification)"));
    }
    layer->pins++;
    layer->last_used = table_.Stamp();
    table_.ReadBegins(start);
    endpoint = layer->endpoint;
    mode = layer->mode;
  }
  const absl::Time deadline = health_.ReadDeadline(endpoint, start, options_.read_deadline);
  struct Unpin {
    BlobCache* cache;
    Layer* layer;
    ~Unpin() {
      LayerLock lock(cache->table_, *layer);
      layer->pins--;
      cache->table_.ReadEnds(cache->time_->Now());
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
      LayerLock lock(table_, *layer);
      verified = layer->whole_verified;
      (verified ? counters_.chunk_hits : counters_.chunk_misses) += last - first + 1;
    }
    s = EnsureWholeLayer(layer, deadline);
    if (s.ok()) {
      s = EnsureChunks(layer, first, last, deadline, fetch_deadline, /*count=*/false, &memory);
    }
  } else {
    {
      LayerLock lock(table_, *layer);
      if (layer->mode == VerifyMode::kChunk) {
        UpdateReadahead(*layer, options_, offset, end);
        // A reader that has streamed stream_after bytes in a row will read the rest: fetch
        // it with parallel ranges (a registry reading from disk serves several streams
        // several times faster than one).
        if (options_.stream_segments > 0 &&
            layer->run_end - layer->run_start >= options_.stream_after) {
          StartStreamLocked(layer, (layer->run_end + cs - 1) / cs);
          PumpStreamLocked(layer);  // the reader moved on: so may the stream
        } else if (ScatteredReadersWantStream(*layer, options_)) {
          // Tensor-parallel ranks: the union of their reads is the whole layer.
          layer->stream_scattered = true;
          StartStreamLocked(layer, 0);
        } else if (layer->streaming && layer->stream_scattered) {
          PumpStreamLocked(layer);
        }
        if (layer->window > 0 && layer->run_end < layer->size && !DiskFullLocked()) {
          const uint64_t ra_end = std::min(layer->size, layer->run_end + layer->window);
          ScheduleMissingLocked(layer, layer->run_end / cs, (ra_end - 1) / cs,
                                FetchPriority::kReadahead,
                                time_->Now() + options_.background_deadline, nullptr);
        }
      } else if (!layer->whole_verified && layer->count() > 0) {
        // kInsecureStream: serve what is fetched, but still fetch and check everything. The
        // reader's own chunks go first, in their own request.
        ScheduleMissingLocked(layer, first, last, FetchPriority::kForeground, fetch_deadline,
                              nullptr);
        ScheduleMissingLocked(layer, 0, layer->count() - 1, FetchPriority::kFill,
                              time_->Now() + options_.background_deadline, nullptr);
      }
    }
    s = EnsureChunks(layer, first, last, deadline, fetch_deadline, /*count=*/true, &memory);
  }
  // Only a read that was given the whole deadline says the registry is not answering; a
  // shortened one failing says nothing new, and must not extend the window, or a registry
  // whose reads keep failing fast would never be given the whole deadline again.
  // A whole-layer fill that outlasts the deadline is a big layer, not a silent registry.
  if (absl::IsDeadlineExceeded(s) && deadline == fetch_deadline &&
      mode != VerifyMode::kWholeLayer && health_.RecordTimeout(endpoint, time_->Now())) {
    Log(log::Warn("cache",
                  absl::StrCat("registry did not serve the layer within the read deadline of ",
                               absl::FormatDuration(options_.read_deadline), "; for the next ",
                               absl::FormatDuration(EndpointHealthOptions().retry_window),
                               " (or until it answers) reads that need it wait at most ",
                               absl::FormatDuration(EndpointHealthOptions().fail_fast_wait)))
            .Field("digest", digest.str())
            .Range(offset, end - 1)
            .Field("registry", endpoint.empty() ? "(default)" : endpoint)
            .Field("reason", s.message()));
  }
  if (!s.ok()) return s;

  // The spans hold the layer, and so its fd, for as long as they live: eviction may unlink the
  // data file meanwhile, never close it under a reader. With member files, they hold the
  // layout too, whose fds are those files', and which a layout change leaves to them.
  std::vector<BlobSpan> spans;
  const std::shared_ptr<const LayerSegments> segments = layer->Segments();
  std::shared_ptr<const void> keep_alive = layer;
  if (segments->has_members()) {
    keep_alive = std::make_shared<
        const std::pair<std::shared_ptr<Layer>, std::shared_ptr<const LayerSegments>>>(layer,
                                                                                       segments);
  }
  std::vector<uint64_t> span_layer_offset;  // of each span's first byte
  auto add_file = [&](uint64_t from, uint64_t to) {
    for (const LayerSegments::Piece& p : segments->Pieces(from, to)) {
      if (!spans.empty() && spans.back().fd == p.fd &&
          spans.back().offset + spans.back().length == p.file_offset) {
        spans.back().length += p.length;
        from += p.length;
        continue;
      }
      span_layer_offset.push_back(from);
      from += p.length;
      BlobSpan span;
      span.fd = p.fd;
      span.offset = p.file_offset;
      span.length = p.length;
      span.keep_alive = keep_alive;
      spans.push_back(std::move(span));
    }
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
        span_layer_offset.push_back(from);
      } else {
        add_file(from, to);
      }
    }
  }
  {
    LayerLock lock(table_, *layer);
    if (layer->quarantined) {
      return absl::DataLossError(
          absl::StrCat("layer ", digest.str(), " is quarantined (failed verification)"));
    }
  }
  if (options_.drop_served_pages) {
    // The reply is sent when the caller lets go of the span: then its bytes count as served.
    class Served {
     public:
      Served(BlobCache* cache, std::shared_ptr<Layer> layer, std::shared_ptr<const void> keep_alive,
             uint64_t from, uint64_t to)
          : cache_(cache),
            layer_(std::move(layer)),
            keep_alive_(std::move(keep_alive)),
            from_(from),
            to_(to) {}
      Served(const Served&) = delete;
      Served& operator=(const Served&) = delete;
      ~Served() { cache_->OnServed(layer_, from_, to_); }

     private:
      BlobCache* const cache_;
      const std::shared_ptr<Layer> layer_;
      const std::shared_ptr<const void> keep_alive_;  // the layout, with member files
      const uint64_t from_, to_;
    };
    for (size_t i = 0; i < spans.size(); ++i) {
      BlobSpan& span = spans[i];
      if (span.fd < 0) continue;
      span.keep_alive = std::make_shared<const Served>(
          this, layer, keep_alive, span_layer_offset[i], span_layer_offset[i] + span.length);
    }
  }
  counters_.bytes_served += end - offset;
  return spans;
}

void BlobCache::OnServed(const std::shared_ptr<Layer>& layer, uint64_t from, uint64_t to) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  {
    LayerLock lock(table_, *layer);
    if (layer->quarantined || from >= to || to > layer->size) return;
    const std::vector<uint64_t> whole = CountServed(*layer, from, to);
    if (!whole.empty()) {
      ranges = TakeServedDrops(*layer, whole, options_.drop_served_pages,
                               counters_.page_cache_bytes_dropped);
    }
  }
  if (!ranges.empty()) DropPages(*layer, ranges);
}

}  // namespace modelfs
