// SeekIndex: entry points into a compressed tar layer (.tar+gzip, .tar+zstd), so a byte range
// of the uncompressed layer can be decoded from the nearest point before it instead of from
// the start (docs/seek-index.md). gzip points sit at deflate block boundaries every few MiB of
// output and carry the bit offset and the 32 KiB window the decoder resumes with, as zlib's
// examples/zran.c and SOCI's zTOC do; zstd points are frame starts (a single-frame layer has
// one point, so it can only be read whole).
//
// The layer's encoding is its codec (layer_codec.h), which builds the index, says which points
// it may hold, and decodes from them (span_decoder.h); the file names it by the codec's
// seek_id. The index is built in one pass over the compressed layer (SeekIndexBuilder, which also
// hands the uncompressed bytes on, so the chunk index of those bytes is built in the same
// pass) and is itself content-addressed: the volume image names it by digest. It is never
// trusted for content: a point that lies makes the decoded bytes disagree with the chunk
// hashes of the uncompressed layer, which the cache checks before serving anything.
//
// Thread safety: SeekIndex is an immutable value; a SeekIndexBuilder belongs to one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/oci/digest.h"
#include "core/oci/layer_codec.h"

namespace modelfs {

struct SeekPoint {
  enum class Kind : uint8_t {
    kStreamStart = 0,  // a gzip member or zstd frame starts at compressed_offset
    // A deflate block starts inside a member: codecs with windowed_points (gzip) only.
    kBlockBoundary = 1,
  };
  uint64_t uncompressed_offset = 0;
  // The first compressed byte the decoder reads whole. For a block boundary with bits > 0, the
  // block starts `bits` bits before the end of byte compressed_offset - 1.
  uint64_t compressed_offset = 0;
  Kind kind = Kind::kStreamStart;
  uint8_t bits = 0;          // 0..7, block boundaries only
  uint32_t window_size = 0;  // bytes of output before this point the window holds (<= 32 KiB)
  // The window (the last window_size uncompressed bytes before this point) as stored: raw
  // deflate. Empty for stream starts.
  std::string window;
  friend bool operator==(const SeekPoint&, const SeekPoint&) = default;
};

struct SeekIndex {
  static constexpr uint32_t kVersion = 1;
  static constexpr size_t kHeaderSize = 104;  // magic 8, version 4, encoding 4, 2*8, 2*32, 8
  static constexpr size_t kPointFixedSize = 28;
  static constexpr uint32_t kWindowSize = 32768;
  // gzip points are this far apart in uncompressed bytes (or a little more: blocks end where
  // they end). 4 MiB keeps a 4 MiB read within 8 MiB of compressed bytes and costs about 26 KB
  // of windows per 4 MiB (0.6%).
  static constexpr uint64_t kDefaultGzipSpacing = 4ull << 20;

  // A compressed codec; written as its seek_id.
  LayerEncoding encoding = LayerEncoding::kTarGzip;
  Digest layer_digest;  // SHA-256 of the compressed layer (its OCI digest)
  uint64_t compressed_size = 0;
  Digest diff_id;  // SHA-256 of the uncompressed layer
  uint64_t uncompressed_size = 0;
  std::vector<SeekPoint> points;  // points[0] is {0, 0, kStreamStart}; both offsets increase

  // The last point at or before `uncompressed_offset` (0 past the end).
  size_t PointFor(uint64_t uncompressed_offset) const;
  // The compressed offset up to which a decoder started at point `from` must have read to have
  // produced every byte before `uncompressed_end`: the next point's compressed offset at or
  // after it, or the end of the layer.
  uint64_t CompressedEndFor(uint64_t uncompressed_end) const;
  // True when a range can be entered somewhere other than the start (more than one point).
  bool lazy() const { return points.size() > 1; }
  // A layer this small is served through its index even with one point: a read decodes it from
  // the start (at most DecodingBlobSource::kMaxSpan), which costs less than fetching and
  // decoding it whole before the mount is ready (a modelcar's busybox layer).
  static constexpr uint64_t kSmallLayerBytes = 16ull << 20;
  // True when the layer is served through the index, range by range; false when it is fetched
  // whole and decoded before anything of it is served (a large single zstd frame).
  bool served_by_range() const { return lazy() || uncompressed_size <= kSmallLayerBytes; }

  friend bool operator==(const SeekIndex&, const SeekIndex&) = default;
};

// Serialization (docs/seek-index.md). Deterministic; windows are written as stored.
std::string SerializeSeekIndex(const SeekIndex& index);
// Errors: kOutOfRange (truncated); kInvalidArgument naming the field or the point at fault
// (bad magic, version, encoding (a seek_id of no codec); a count the bytes cannot hold, checked
// before allocating; offsets that do not increase or leave the layer; a point kind, bit count or
// window size that the encoding does not allow; trailing bytes). Windows are not inflated here: a
// window that is not raw deflate of exactly window_size bytes is refused by the first decode that
// starts at its point (SpanDecoder::Create, InflateSeekWindow).
absl::StatusOr<SeekIndex> ParseSeekIndex(std::string_view bytes);

// The checks ParseSeekIndex makes of one point read from a file (seek-index.md, "Reading
// rules"), shared with the windows table (seek_windows.h): `index.points` holds the points
// before it, `kind` and `reserved` are the raw fields, `window_len` the stored window's length;
// sets p.kind. Errors: kInvalidArgument prefixed with `where`.
absl::Status CheckSeekPoint(const SeekIndex& index, uint64_t kind, uint64_t reserved,
                            uint64_t window_len, const std::string& where, SeekPoint& p);

// The index with only every k-th point kept (points[0] always), k the smallest for which the
// serialized index is at most `max_bytes`: a decode starts from an earlier point and runs on
// through the points dropped, so any subset that keeps the first point serves every range, only
// with longer spans. gzip windows are about 0.6% of a layer, and a reader without windows
// support (seek_windows.h) fetches every inline one when a model mounts; this bounds them. When
// even the first point alone does not fit, the result is that one point (the layer is then read
// whole).
SeekIndex ThinSeekIndex(SeekIndex index, uint64_t max_bytes);

// The indexes of a model's compressed layers, thinned to `budget` bytes in all when they are
// larger: each to its share by compressed size (at least 64 KiB).
void ThinSeekIndexes(std::vector<SeekIndex>& indexes, uint64_t budget);

// The window of a block-boundary point, uncompressed (window_size bytes). Errors:
// kInvalidArgument when it is not raw deflate of exactly that many bytes.
absl::StatusOr<std::string> InflateSeekWindow(const SeekPoint& point);

// Builds a seek index in one pass over the compressed layer: feed the compressed bytes in
// order, in pieces of any size; the uncompressed bytes go to `sink` in order (so the caller
// builds the chunk index of the uncompressed layer in the same pass). Hashes both streams.
// Each compressed codec has its builder (LayerCodec::new_seek_index_builder), on the state kept
// here: the layer's name, the hashes of both streams and the index it grows.
class SeekIndexBuilder {
 public:
  using Sink = std::function<absl::Status(std::string_view)>;
  // The codec's builder. `layer` names the layer in errors. `gzip_spacing`: uncompressed bytes
  // between gzip points. Errors: kInvalidArgument for an encoding that is not compressed;
  // kResourceExhausted when the library cannot allocate its state.
  static absl::StatusOr<std::unique_ptr<SeekIndexBuilder>> Create(
      LayerEncoding encoding, std::string layer,
      uint64_t gzip_spacing = SeekIndex::kDefaultGzipSpacing);
  virtual ~SeekIndexBuilder() = default;
  // Errors: kDataLoss naming the layer and compressed offset (corrupt stream, a gzip CRC or
  // zstd checksum that does not match, bytes after the end that start no member or frame);
  // the sink's errors.
  virtual absl::Status Feed(std::string_view compressed, const Sink& sink) = 0;
  // Errors: kDataLoss when the stream ends inside a member or frame, or is empty.
  virtual absl::StatusOr<SeekIndex> Finish() = 0;

 protected:
  // The index starts with the point at the start of the stream.
  SeekIndexBuilder(std::string layer, LayerEncoding encoding);
  // The index of a stream that ended after `consumed` compressed and `produced` uncompressed
  // bytes (points that cover nothing at the end dropped).
  SeekIndex TakeIndex(uint64_t consumed, uint64_t produced);

  const std::string layer_;
  Sha256 compressed_hash_;
  Sha256 uncompressed_hash_;
  SeekIndex index_;
};

// Convenience: the index of a compressed layer held in memory (its uncompressed bytes are
// appended to `uncompressed` when not null).
absl::StatusOr<SeekIndex> BuildSeekIndex(LayerEncoding encoding, std::string_view compressed,
                                         std::string* uncompressed = nullptr,
                                         uint64_t gzip_spacing = SeekIndex::kDefaultGzipSpacing);

}  // namespace modelfs
