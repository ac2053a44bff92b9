// Span decoding: SpanDecoder::Create, which hands over to the index's codec (codec_gzip.cc and
// codec_zstd.cc hold the decoders), and DecodeSeekRange on top of it.
#include "core/oci/span_decoder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs {

absl::StatusOr<std::unique_ptr<SpanDecoder>> SpanDecoder::Create(const SeekIndex& index,
                                                                 size_t point, std::string layer,
                                                                 GzipInflater inflater,
                                                                 std::string_view stored_window) {
  if (point >= index.points.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(layer, ": seek point ", point, " out of range (", index.points.size(), ")"));
  }
  const LayerCodec& codec = index.encoding.codec();
  if (codec.new_span_decoder == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(layer, ": a ", std::string(codec.name), " layer has no seek points"));
  }
  return codec.new_span_decoder(index.points[point], std::move(layer), inflater, stored_window);
}

absl::Status DecodeSeekRange(const SeekIndex& index, uint64_t offset, uint64_t length,
                             const std::string& layer, const CompressedFetch& fetch,
                             const SpanDecoder::Sink& sink, GzipInflater inflater,
                             SeekRangeStats* stats, std::string_view stored_window) {
  if (offset > index.uncompressed_size || length > index.uncompressed_size - offset) {
    return absl::OutOfRangeError(absl::StrCat(layer, ": range ", offset, "+", length,
                                              " is past the end of the uncompressed layer (",
                                              index.uncompressed_size, " bytes)"));
  }
  if (length == 0) return absl::OkStatus();
  const size_t point = index.PointFor(offset);
  ASSIGN_OR_RETURN(std::unique_ptr<SpanDecoder> decoder,
                   SpanDecoder::Create(index, point, layer, inflater, stored_window));
  const uint64_t start = index.points[point].uncompressed_offset;
  const uint64_t end = offset + length;
  uint64_t at = start;  // uncompressed offset of the next decoded byte
  bool done = false;
  const SpanDecoder::Sink window = [&](std::string_view piece) -> absl::Status {
    const uint64_t piece_end = at + piece.size();
    if (piece_end > offset && at < end) {
      const uint64_t from = std::max(at, offset) - at;
      const uint64_t to = std::min(piece_end, end) - at;
      RETURN_IF_ERROR(sink(piece.substr(from, to - from)));
    }
    at = piece_end;
    if (at >= end) {
      done = true;
      return absl::CancelledError("range decoded");  // stops the fetch; not an error
    }
    return absl::OkStatus();
  };
  uint64_t from = decoder->compressed_start();
  // The compressed bytes up to the next point after the range hold every byte of it; the rest
  // of the layer is fetched only if a lying index said otherwise.
  for (uint64_t to : {index.CompressedEndFor(end), index.compressed_size}) {
    if (done || to <= from) continue;
    absl::Status s = fetch(from, to - from, [&](std::string_view compressed) -> absl::Status {
      if (stats != nullptr) stats->compressed_bytes += compressed.size();
      return decoder->Feed(compressed, window);
    });
    if (!s.ok() && !done) return s;
    from = to;
  }
  if (stats != nullptr) stats->lead_in += offset - start;
  if (!done) {
    return absl::DataLossError(absl::StrCat(layer, ": the compressed stream ends at uncompressed ",
                                            "offset ", at, ", before the range ", offset, "+",
                                            length, " does"));
  }
  return absl::OkStatus();
}

}  // namespace modelfs
