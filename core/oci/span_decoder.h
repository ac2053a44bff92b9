// SpanDecoder: decodes a compressed tar layer from one of its seek points (seek_index.h), and
// DecodeSeekRange, which serves a byte range of the uncompressed layer by decoding from the
// nearest point before it, discarding the lead-in. Each codec has its span decoder
// (LayerCodec::new_span_decoder): gzip resumes a raw inflate at a block boundary with the
// point's bit offset and window (ISA-L's igzip by default, zlib on request:
// bench/span_inflate_bench measures both); zstd decodes frame after frame with libzstd.
//
// Nothing here verifies content: the bytes a point leads to are as good as the point, so the
// caller checks every decoded byte against the chunk hashes of the uncompressed layer
// (the blob cache does, before serving).
//
// Thread safety: a SpanDecoder belongs to one thread; DecodeSeekRange keeps no state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/buffer_pool.h"
#include "core/oci/seek_index.h"

namespace modelfs {

enum class GzipInflater { kIsal, kZlib };

class SpanDecoder {
 public:
  using Sink = std::function<absl::Status(std::string_view)>;

  // The index's codec's decoder, starting at `index.points[point]`. `layer` names the layer in
  // errors. `stored_window`: the point's window as stored (raw deflate), when the index holds
  // none because it came from a windows table (seek_windows.h) and the caller fetched and
  // checked the window apart. Errors: kInvalidArgument for a point out of range, a window that
  // does not inflate, or an index whose encoding is not compressed; kResourceExhausted when the
  // library cannot allocate its state.
  static absl::StatusOr<std::unique_ptr<SpanDecoder>> Create(
      const SeekIndex& index, size_t point, std::string layer,
      GzipInflater inflater = GzipInflater::kIsal, std::string_view stored_window = {});
  virtual ~SpanDecoder() = default;

  // The compressed offset the first byte fed must be at: the point's, or one byte earlier for
  // a gzip block that starts inside a byte.
  uint64_t compressed_start() const { return compressed_start_; }
  uint64_t produced() const { return produced_; }  // bytes given to the sink since the point

  // Decodes the next compressed bytes; the decoded bytes (from the point's uncompressed offset
  // on) go to `sink`. Errors: kDataLoss naming the layer and the compressed offset (corrupt
  // data, a checksum that does not match, bytes past the end that start no member or frame);
  // the sink's errors.
  virtual absl::Status Feed(std::string_view compressed, const Sink& sink) = 0;

 protected:
  SpanDecoder(std::string layer, uint64_t compressed_start)
      : layer_(std::move(layer)), compressed_start_(compressed_start) {}
  // The bytes a codec's decoder hands the sink at most at a time, and its buffer for them, from
  // the read path's pool (buffer_pool.h): a span is decoded every megabyte or few, and a fresh
  // buffer each time would be a fresh mapping whose pages all fault.
  static constexpr size_t kOutPiece = 256 << 10;
  static BufferPool::Buffer OutPiece() { return BufferPool::Shared().Get(kOutPiece); }

  const std::string layer_;
  const uint64_t compressed_start_;
  uint64_t consumed_ = 0;  // compressed bytes fed so far
  uint64_t produced_ = 0;
};

// Fetches compressed bytes [offset, offset + length) of the layer and hands them to `sink` in
// order (RemoteBlobSource::StreamRange over the compressed blob).
using CompressedFetch =
    std::function<absl::Status(uint64_t offset, uint64_t length, const SpanDecoder::Sink& sink)>;

// What DecodeSeekRange fetched, for stats and tests.
struct SeekRangeStats {
  uint64_t compressed_bytes = 0;  // compressed bytes fetched
  uint64_t lead_in = 0;           // decoded bytes discarded before `offset`
};

// Delivers bytes [offset, offset + length) of the uncompressed layer to `sink`, in order,
// decoding from the last point at or before `offset`; only the compressed bytes up to the
// first point at or after the range's end are fetched (more only if the stream says so).
// `stored_window`: the window of the point the range starts from (index.PointFor(offset)), for
// an index without inline windows (SpanDecoder::Create).
// Errors: kOutOfRange for a range past index.uncompressed_size; kDataLoss when the stream
// ends before the range does; the decoder's, fetch's and sink's errors.
absl::Status DecodeSeekRange(const SeekIndex& index, uint64_t offset, uint64_t length,
                             const std::string& layer, const CompressedFetch& fetch,
                             const SpanDecoder::Sink& sink,
                             GzipInflater inflater = GzipInflater::kIsal,
                             SeekRangeStats* stats = nullptr, std::string_view stored_window = {});

}  // namespace modelfs
