// DecodingBlobSource: a RemoteBlobSource decorator that serves the uncompressed bytes of
// compressed tar layers (.tar+gzip, .tar+zstd) lazily. A layer added with its seek index
// (core/oci/seek_index.h) is served under its diffId: a range is decoded from the nearest seek
// point before it, from the compressed span(s) the inner source (the registry) returns, and
// the lead-in is discarded. Every other digest goes to the inner source unchanged.
//
// Spans (the bytes between two seek points) are decoded by one decoder each, kept in memory
// for a while (at most kMaxSpanMemory bytes of decoded prefixes): a span's decoder goes only as
// far as the furthest range asked of it, fetching the compressed bytes it needs for that (an
// estimate from the layer's ratio, then more if short), and the next range inside the span
// continues from there. So the cache's concurrent chunk fetches inside one span (the kernel
// splits a 4 MiB read into several) fetch and decode it once, and a read costs the compressed
// bytes from the point before it to its end. A range over more than kStreamSpans spans (the
// cache's stream requests) has the whole spans in its middle decoded from one fetch by one
// decoder, without the table: one request per range rather than one per span. A range asked
// for a second time (the cache
// refetching after a chunk failed verification) is decoded afresh from the registry, never
// answered from memory again. A span over kMaxSpan bytes (a zstd layer of a few huge frames)
// is streamed per range instead.
//
// Like any RemoteBlobSource it returns UNVERIFIED bytes: the cache registers the diffId as an
// ordinary chunk-mode layer with the chunk index of the uncompressed bytes, and checks each
// chunk before serving it. A corrupt span, a lying seek point or a wrong window therefore ends
// in kDataLoss from the cache, never in a served byte. The compressed layer's own digest is not
// checked per read; the cache's audit of the layer it holds checks the diffId.
//
// Thread safety: safe for concurrent calls; mu_ is a leaf lock, never held across a fetch.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/base/buffer_pool.h"
#include "core/cache/remote_blob_source.h"
#include "core/cache/seek_window_source.h"
#include "core/oci/seek_index.h"
#include "core/oci/span_decoder.h"

namespace modelfs {

class DecodingBlobSource final : public RemoteBlobSource {
 public:
  static constexpr uint64_t kMaxSpan = 16ull << 20;
  static constexpr uint64_t kMaxSpanMemory = 64ull << 20;
  // A range over at least this many spans beyond its first has its middle spans streamed from
  // one fetch (StreamDirect) rather than span by span.
  static constexpr size_t kStreamSpans = 3;

  // `inner` is not owned and must outlive this source.
  explicit DecodingBlobSource(RemoteBlobSource* inner, GzipInflater inflater = GzipInflater::kIsal)
      : inner_(inner), inflater_(inflater) {}

  // From now on, serves `seek.diff_id` (seek.uncompressed_size bytes) by decoding spans of
  // `seek.layer_digest`. Adding a diffId again replaces its index.
  void Add(std::shared_ptr<const SeekIndex> seek);
  // The same from a windows table (seek_windows.h): serves the table's diffId through its
  // index (every point), and a decode that starts at a block boundary first takes the point's
  // window from `windows`, fetched and checked there (kDataLoss when it does not match: the
  // range fails and nothing of it is served).
  void AddWithWindows(std::shared_ptr<SeekWindowSource> windows);
  // True when `diff_id` is served here.
  bool Serves(const Digest& diff_id) const;

  // RemoteBlobSource. For an added diffId: bytes [offset, offset + length) of the uncompressed
  // layer. Errors: the inner source's; kDataLoss from a compressed span that does not decode
  // (naming the compressed layer and offset) or that ends before the range; kOutOfRange past
  // the uncompressed size.
  absl::StatusOr<std::string> FetchRange(const Digest& blob, uint64_t offset, uint64_t length,
                                         absl::Time deadline) override;
  absl::Status StreamRange(const Digest& blob, uint64_t offset, uint64_t length,
                           absl::Time deadline,
                           const std::function<absl::Status(absl::string_view)>& sink) override;
  // An added diffId is served by the compressed layer's endpoint.
  std::string EndpointOf(const Digest& blob) override;

  struct Stats {
    uint64_t ranges = 0;            // ranges served
    uint64_t compressed_bytes = 0;  // compressed bytes fetched for them
    uint64_t decoded_bytes = 0;     // bytes decoded, lead-in included
    uint64_t lead_in_bytes = 0;     // decoded from a point before the first range asked of it
    uint64_t windows_fetched = 0;   // gzip windows fetched per point (SeekWindowSource)
    uint64_t window_bytes = 0;      // their bytes
  };
  Stats stats() const;

 private:
  // One span's decoder and what it decoded so far. Its mu is held across the fetches that
  // extend it (ranges of one span are decoded in order, by one caller at a time); it is taken
  // with the caller's deadline, and never with the source's mu_ held.
  struct Span {
    absl::Mutex mu;
    std::unique_ptr<SpanDecoder> decoder ABSL_GUARDED_BY(mu);
    uint64_t next_compressed ABSL_GUARDED_BY(mu) = 0;  // next compressed offset to fetch
    // Decoded from the point: `size` bytes of `buf`, <= the span. The buffer (a pooled one
    // of the span's size) is taken whole at the first Extend, so it never moves and bytes
    // below `size` are final (handed out without the lock).
    BufferPool::Buffer buf ABSL_GUARDED_BY(mu);
    uint64_t size ABSL_GUARDED_BY(mu) = 0;
    absl::Status status ABSL_GUARDED_BY(mu);  // a failure sticks to this Span
    // Ranges handed out (offsets within the span), guarded by the source's mu_.
    std::vector<std::pair<uint64_t, uint64_t>> served;
    uint64_t counted = 0;  // bytes counted in span_bytes_, guarded by the source's mu_
    uint64_t handed = 0;   // bytes of `served` delivered, guarded by the source's mu_
  };
  using SpanKey = std::pair<Digest, size_t>;  // diffId, seek point

  std::shared_ptr<const SeekIndex> Find(const Digest& diff_id) const;
  // The stored window a decoder starting at `point` needs from the layer's windows source;
  // null when the index holds its windows inline (or the point is a stream start).
  absl::StatusOr<std::shared_ptr<const std::string>> WindowFor(const SeekIndex& index, size_t point,
                                                               absl::Time deadline);
  // The span at `point` for the range [from, to) within it: the cached one, or a new one when
  // there is none or the range was served from it before.
  std::shared_ptr<Span> SpanFor(const Digest& diff_id, size_t point, uint64_t from, uint64_t to);
  // Delivers [from, to) of the span at `point` (offsets within it) to `sink`, decoding further
  // as needed.
  absl::Status ServeFromSpan(const SeekIndex& index, size_t point, uint64_t from, uint64_t to,
                             absl::Time deadline,
                             const std::function<absl::Status(absl::string_view)>& sink);
  absl::Status Extend(const SeekIndex& index, size_t point, Span& span, uint64_t to,
                      absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(span.mu);
  void Forget(const Digest& diff_id, size_t point, const std::shared_ptr<Span>& span);
  // Counts `n` bytes of the span delivered; a span delivered whole is forgotten at once (a
  // range asked again is decoded afresh anyway), so its buffer goes back to the pool.
  void Delivered(const Digest& diff_id, size_t point, const std::shared_ptr<Span>& span, uint64_t n,
                 uint64_t span_len);
  // [offset, end) of an added layer, span by span through the span table (or StreamDirect for
  // a span over kMaxSpan).
  absl::Status StreamRangeBySpan(const SeekIndex& index, uint64_t offset, uint64_t end,
                                 absl::Time deadline,
                                 const std::function<absl::Status(absl::string_view)>& sink);
  // Streams [offset, offset + length) from one fetch and one decoder: a span too big to hold,
  // or the whole spans in the middle of a long range.
  absl::Status StreamDirect(const SeekIndex& index, uint64_t offset, uint64_t length,
                            absl::Time deadline,
                            const std::function<absl::Status(absl::string_view)>& sink);
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops a span from the table and from span_order_.
  void EraseLocked(std::map<SpanKey, std::shared_ptr<Span>>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  RemoteBlobSource* const inner_;
  const GzipInflater inflater_;
  mutable absl::Mutex mu_;
  std::map<Digest, std::shared_ptr<const SeekIndex>> layers_ ABSL_GUARDED_BY(mu_);  // by diffId
  std::map<Digest, std::shared_ptr<SeekWindowSource>> windows_ ABSL_GUARDED_BY(mu_);
  std::map<SpanKey, std::shared_ptr<Span>> spans_ ABSL_GUARDED_BY(mu_);
  std::vector<SpanKey> span_order_ ABSL_GUARDED_BY(mu_);  // oldest first
  uint64_t span_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> ranges_{0}, compressed_bytes_{0}, decoded_bytes_{0}, lead_in_bytes_{0};
};

}  // namespace modelfs
