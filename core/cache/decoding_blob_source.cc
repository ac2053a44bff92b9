#include "core/cache/decoding_blob_source.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

std::string LayerName(const SeekIndex& index) {
  return absl::StrCat("layer ", index.layer_digest.str(), " (diffId ", index.diff_id.str(), ")");
}

uint64_t SpanEnd(const SeekIndex& index, size_t point) {
  return point + 1 < index.points.size() ? index.points[point + 1].uncompressed_offset
                                         : index.uncompressed_size;
}

// Span buffers, pooled by size class (1 to 16 MiB, powers of two): spans are decoded one after
// another, and a fresh buffer each time would be a fresh mapping whose pages all fault. About
// 16 MiB of idle buffers are kept per class.
BufferPool::Buffer SpanBuffer(uint64_t len) {
  static constexpr int kClasses = 5;                            // 1, 2, 4, 8, 16 MiB
  static std::array<BufferPool*, kClasses>* const pools = [] {  // never destroyed
    auto* p = new std::array<BufferPool*, kClasses>;
    for (int i = 0; i < kClasses; ++i) {
      (*p)[i] = new BufferPool(size_t{1} << (20 + i), size_t{16} >> i);
    }
    return p;
  }();
  int c = 0;
  while (c + 1 < kClasses && (uint64_t{1} << (20 + c)) < len) ++c;
  return (*pools)[c]->Get(len);
}

}  // namespace

void DecodingBlobSource::Add(std::shared_ptr<const SeekIndex> shared) {
  absl::MutexLock l(&mu_);
  windows_.erase(shared->diff_id);
  layers_[shared->diff_id] = std::move(shared);
}

void DecodingBlobSource::AddWithWindows(std::shared_ptr<SeekWindowSource> windows) {
  // The index lives in the source's table: an aliasing pointer keeps the source alive.
  std::shared_ptr<const SeekIndex> index(windows, &windows->index());
  absl::MutexLock l(&mu_);
  windows_[index->diff_id] = std::move(windows);
  layers_[index->diff_id] = std::move(index);
}

absl::StatusOr<std::shared_ptr<const std::string>> DecodingBlobSource::WindowFor(
    const SeekIndex& index, size_t point, absl::Time deadline) {
  const SeekPoint& p = index.points[point];
  if (p.kind != SeekPoint::Kind::kBlockBoundary || !p.window.empty()) return nullptr;
  std::shared_ptr<SeekWindowSource> windows;
  {
    absl::MutexLock l(&mu_);
    auto it = windows_.find(index.diff_id);
    if (it == windows_.end() || &it->second->index() != &index) return nullptr;
    windows = it->second;
  }
  return windows->Window(point, deadline);
}

bool DecodingBlobSource::Serves(const Digest& diff_id) const { return Find(diff_id) != nullptr; }

std::shared_ptr<const SeekIndex> DecodingBlobSource::Find(const Digest& diff_id) const {
  absl::MutexLock l(&mu_);
  auto it = layers_.find(diff_id);
  return it == layers_.end() ? nullptr : it->second;
}

absl::StatusOr<std::string> DecodingBlobSource::FetchRange(const Digest& blob, uint64_t offset,
                                                           uint64_t length, absl::Time deadline) {
  if (Find(blob) == nullptr) return inner_->FetchRange(blob, offset, length, deadline);
  std::string out;
  out.reserve(length);
  absl::Status s = StreamRange(blob, offset, length, deadline, [&](absl::string_view piece) {
    out.append(piece.data(), piece.size());
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

void DecodingBlobSource::EvictLocked() {
  while (span_bytes_ > kMaxSpanMemory && !span_order_.empty()) {
    auto it = spans_.find(span_order_.front());
    if (it != spans_.end()) {
      span_bytes_ -= std::min(span_bytes_, it->second->counted);
      spans_.erase(it);
    }
    span_order_.erase(span_order_.begin());
  }
}

std::shared_ptr<DecodingBlobSource::Span> DecodingBlobSource::SpanFor(const Digest& diff_id,
                                                                      size_t point, uint64_t from,
                                                                      uint64_t to) {
  const SpanKey key{diff_id, point};
  absl::MutexLock l(&mu_);
  auto it = spans_.find(key);
  if (it != spans_.end()) {
    Span& s = *it->second;
    const bool again = std::any_of(s.served.begin(), s.served.end(),
                                   [&](const auto& r) { return from < r.second && r.first < to; });
    if (!again) {
      s.served.push_back({from, to});
      return it->second;
    }
    // A refetch: the cache did not like what it got. Decode from the registry again.
    span_bytes_ -= std::min(span_bytes_, s.counted);
    spans_.erase(it);
  }
  auto span = std::make_shared<Span>();
  span->served.push_back({from, to});
  // Decoded from the point but not asked for (ranges later asked of the span may use it).
  lead_in_bytes_.fetch_add(from, std::memory_order_relaxed);
  spans_[key] = span;
  span_order_.erase(std::remove(span_order_.begin(), span_order_.end(), key), span_order_.end());
  span_order_.push_back(key);
  return span;
}

void DecodingBlobSource::Forget(const Digest& diff_id, size_t point,
                                const std::shared_ptr<Span>& span) {
  absl::MutexLock l(&mu_);
  auto it = spans_.find({diff_id, point});
  if (it != spans_.end() && it->second == span) EraseLocked(it);
}

void DecodingBlobSource::EraseLocked(std::map<SpanKey, std::shared_ptr<Span>>::iterator it) {
  span_bytes_ -= std::min(span_bytes_, it->second->counted);
  auto at = std::find(span_order_.begin(), span_order_.end(), it->first);
  if (at != span_order_.end()) span_order_.erase(at);
  spans_.erase(it);
}

void DecodingBlobSource::Delivered(const Digest& diff_id, size_t point,
                                   const std::shared_ptr<Span>& span, uint64_t n,
                                   uint64_t span_len) {
  absl::MutexLock l(&mu_);
  span->handed += n;
  if (span->handed < span_len) return;
  auto it = spans_.find({diff_id, point});
  if (it != spans_.end() && it->second == span) EraseLocked(it);
}

absl::Status DecodingBlobSource::Extend(const SeekIndex& index, size_t point, Span& span,
                                        uint64_t to, absl::Time deadline) {
  const uint64_t start = index.points[point].uncompressed_offset;
  const uint64_t span_len = SpanEnd(index, point) - start;
  if (span.decoder == nullptr) {
    ASSIGN_OR_RETURN(std::shared_ptr<const std::string> window, WindowFor(index, point, deadline));
    ASSIGN_OR_RETURN(span.decoder,
                     SpanDecoder::Create(index, point, LayerName(index), inflater_,
                                         window ? std::string_view(*window) : std::string_view()));
    span.next_compressed = span.decoder->compressed_start();
  }
  // The layer's own ratio says about how many compressed bytes give the bytes still wanted;
  // a little more, so that one request usually does, and never past the next point unless the
  // stream says it must (then up to the layer's end).
  const double ratio = index.uncompressed_size == 0
                           ? 1.0
                           : static_cast<double>(index.compressed_size) /
                                 static_cast<double>(index.uncompressed_size);
  const uint64_t span_compressed_end = index.CompressedEndFor(start + span_len);
  // Decoded straight into the span's buffer, taken whole once: it never moves, so the bytes
  // below what was decoded can be handed out without a copy (ServeFromSpan).
  if (span.buf.capacity() < span_len) span.buf = SpanBuffer(span_len);
  char* const buf = span.buf.data();
  uint64_t* const size = &span.size;
  while (*size < to) {
    const uint64_t want = to - *size;
    // At least 256 KiB: a decoder gives nothing until it holds a whole block (zstd's are up
    // to 128 KiB), and a short range would otherwise creep there in 16 KiB requests.
    uint64_t end =
        span.next_compressed +
        std::max<uint64_t>(static_cast<uint64_t>(want * ratio * 1.02) + (16 << 10), 256 << 10);
    end = std::min(end, span.next_compressed < span_compressed_end ? span_compressed_end
                                                                   : index.compressed_size);
    if (end <= span.next_compressed) {
      return absl::DataLossError(
          absl::StrCat(LayerName(index), ": the compressed stream ends at uncompressed offset ",
                       start + *size, ", before ", start + to));
    }
    SpanDecoder& decoder = *span.decoder;
    absl::Status s = inner_->StreamRange(
        index.layer_digest, span.next_compressed, end - span.next_compressed, deadline,
        [&](absl::string_view piece) {
          compressed_bytes_.fetch_add(piece.size(), std::memory_order_relaxed);
          return decoder.Feed(std::string_view(piece.data(), piece.size()),
                              [&](std::string_view out) {
                                decoded_bytes_.fetch_add(out.size(), std::memory_order_relaxed);
                                // What runs past the span's end is not kept (the next span
                                // decodes it from its own point).
                                const uint64_t n = std::min<uint64_t>(span_len - *size, out.size());
                                memcpy(buf + *size, out.data(), n);
                                *size += n;
                                return absl::OkStatus();
                              });
        });
    RETURN_IF_ERROR(s);
    span.next_compressed = end;
  }
  return absl::OkStatus();
}

absl::Status DecodingBlobSource::ServeFromSpan(
    const SeekIndex& index, size_t point, uint64_t from, uint64_t to, absl::Time deadline,
    const std::function<absl::Status(absl::string_view)>& sink) {
  std::shared_ptr<Span> span = SpanFor(index.diff_id, point, from, to);
  // [from, to) of the span's buffer, which is final once decoded and never moves (Extend
  // reserves it whole); `span` keeps it alive while the sink copies it.
  absl::string_view out;
  {
    if (!span->mu.LockWhenWithDeadline(absl::Condition::kTrue, deadline)) {
      span->mu.Unlock();
      return absl::DeadlineExceededError(absl::StrCat(
          LayerName(index), ": waiting for the span at seek point ", point, " to be decoded"));
    }
    absl::Status s = span->status;
    if (s.ok() && span->size < to) {
      const uint64_t before = span->size;
      s = Extend(index, point, *span, to, deadline);
      if (!s.ok()) span->status = s;
      absl::MutexLock l(&mu_);
      auto it = spans_.find({index.diff_id, point});
      if (it != spans_.end() && it->second == span) {  // not evicted meanwhile
        span->counted += span->size - before;
        span_bytes_ += span->size - before;
        EvictLocked();
      }
    }
    if (s.ok()) out = absl::string_view(span->buf.data() + from, to - from);
    span->mu.Unlock();
    if (!s.ok()) {
      Forget(index.diff_id, point, span);  // the next fetch starts afresh
      return s;
    }
  }
  ranges_.fetch_add(1, std::memory_order_relaxed);
  absl::Status s = sink(out);
  Delivered(index.diff_id, point, span, to - from,
            SpanEnd(index, point) - index.points[point].uncompressed_offset);
  return s;
}

absl::Status DecodingBlobSource::StreamDirect(
    const SeekIndex& index, uint64_t offset, uint64_t length, absl::Time deadline,
    const std::function<absl::Status(absl::string_view)>& sink) {
  ASSIGN_OR_RETURN(std::shared_ptr<const std::string> window,
                   WindowFor(index, index.PointFor(offset), deadline));
  SeekRangeStats stats;
  absl::Status s = DecodeSeekRange(
      index, offset, length, LayerName(index),
      [&](uint64_t from, uint64_t n, const SpanDecoder::Sink& compressed) {
        return inner_->StreamRange(
            index.layer_digest, from, n, deadline, [&](absl::string_view piece) {
              return compressed(std::string_view(piece.data(), piece.size()));
            });
      },
      [&](std::string_view piece) { return sink(absl::string_view(piece.data(), piece.size())); },
      inflater_, &stats, window ? std::string_view(*window) : std::string_view());
  ranges_.fetch_add(1, std::memory_order_relaxed);
  compressed_bytes_.fetch_add(stats.compressed_bytes, std::memory_order_relaxed);
  decoded_bytes_.fetch_add(stats.lead_in + (s.ok() ? length : 0), std::memory_order_relaxed);
  lead_in_bytes_.fetch_add(stats.lead_in, std::memory_order_relaxed);
  return s;
}

absl::Status DecodingBlobSource::StreamRange(
    const Digest& blob, uint64_t offset, uint64_t length, absl::Time deadline,
    const std::function<absl::Status(absl::string_view)>& sink) {
  std::shared_ptr<const SeekIndex> index = Find(blob);
  if (index == nullptr) return inner_->StreamRange(blob, offset, length, deadline, sink);
  if (offset > index->uncompressed_size || length > index->uncompressed_size - offset) {
    return absl::OutOfRangeError(absl::StrCat(LayerName(*index), ": range ", offset, "+", length,
                                              " is past the end (", index->uncompressed_size,
                                              " bytes)"));
  }
  const uint64_t end = offset + length;
  // A range over several spans (the cache's stream requests, 64 MiB) has its whole spans in
  // the middle decoded from one fetch by one decoder, as a stream: one request per range, not
  // one per span (a 1 MiB zstd frame each), which left a cold load waiting on round trips. The
  // spans at its two ends may be shared with the neighbouring requests, and go through the
  // span table as before.
  if (length > 0) {
    const size_t first = index->PointFor(offset);
    const size_t last = index->PointFor(end - 1);
    if (last >= first + kStreamSpans) {
      const uint64_t from = SpanEnd(*index, first);
      const uint64_t to = index->points[last].uncompressed_offset;
      RETURN_IF_ERROR(StreamRangeBySpan(*index, offset, from, deadline, sink));
      RETURN_IF_ERROR(StreamDirect(*index, from, to - from, deadline, sink));
      return StreamRangeBySpan(*index, to, end, deadline, sink);
    }
  }
  return StreamRangeBySpan(*index, offset, end, deadline, sink);
}

absl::Status DecodingBlobSource::StreamRangeBySpan(
    const SeekIndex& index, uint64_t offset, uint64_t end, absl::Time deadline,
    const std::function<absl::Status(absl::string_view)>& sink) {
  uint64_t at = offset;
  while (at < end) {
    const size_t point = index.PointFor(at);
    const uint64_t span_start = index.points[point].uncompressed_offset;
    const uint64_t span_end = SpanEnd(index, point);
    const uint64_t to = std::min(end, span_end);
    if (span_end - span_start > kMaxSpan) {
      RETURN_IF_ERROR(StreamDirect(index, at, to - at, deadline, sink));
    } else {
      RETURN_IF_ERROR(
          ServeFromSpan(index, point, at - span_start, to - span_start, deadline, sink));
    }
    at = to;
  }
  return absl::OkStatus();
}

std::string DecodingBlobSource::EndpointOf(const Digest& blob) {
  std::shared_ptr<const SeekIndex> index = Find(blob);
  return inner_->EndpointOf(index == nullptr ? blob : index->layer_digest);
}

DecodingBlobSource::Stats DecodingBlobSource::stats() const {
  Stats s;
  s.ranges = ranges_.load(std::memory_order_relaxed);
  s.compressed_bytes = compressed_bytes_.load(std::memory_order_relaxed);
  s.decoded_bytes = decoded_bytes_.load(std::memory_order_relaxed);
  s.lead_in_bytes = lead_in_bytes_.load(std::memory_order_relaxed);
  absl::MutexLock l(&mu_);
  for (const auto& [diff_id, windows] : windows_) {
    const SeekWindowSource::Stats w = windows->stats();
    s.windows_fetched += w.fetches;
    s.window_bytes += w.fetched_bytes;
  }
  return s;
}

}  // namespace modelfs
