// The layer codecs: how a layer's bytes are packed (a raw file, a tar, a compressed tar), each
// declared once, in one entry of one table, which everything that depends on the packing
// consults instead of switching on it: the media types (media_types.h), the seek index and its
// builders (seek_index.h), the whole-stream decoder (layer_decoder.h), the span decoder
// (span_decoder.h), push and convert, the volume image's model.json, the loader and the
// snapshotter's lazy lower layers.
//
// A codec is a LayerCodec value in its own file (codec_gzip.cc, codec_zstd.cc; raw and tar,
// which decode nothing, in layer_codec.cc) and one entry in the table (layer_codec.cc). A
// LayerEncoding is a handle to one: what a ModelLayer, a media type's classification and a
// SeekIndex carry. Adding an encoding is one new file (codec_<name>.cc) and, in
// layer_codec.cc, its declaration and its table line; a named handle below only if code must
// choose it by name, as push chooses zstd.
//
// Values on disk and on the wire come from here and never change for a codec: `name` (the last
// part of a ModelPack layer media type), `image_media_types`, `seek_id` (the encoding number in
// a seek index and a seek windows file, docs/seek-index.md) and `seek_name` (model.json's
// seekIndex.encoding, docs/volume-image.md).
//
// Thread safety: the table and every codec are immutable; lookups are safe from any thread.
// ScopedLayerCodecForTest is for tests only (see there).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace modelfs {

class LayerDecoder;
class SeekIndexBuilder;
class SpanDecoder;
struct SeekPoint;
enum class GzipInflater;

// What a codec provides. The three factories are set for a compressed codec, unset (null) for
// raw and tar; each names the layer in its errors as `layer` says ("layer sha256:...").
struct LayerCodec {
  // A decoder of the whole compressed stream (LayerDecoder::Create). Errors: kResourceExhausted
  // when the library cannot allocate its state.
  using NewDecoder = absl::StatusOr<std::unique_ptr<LayerDecoder>> (*)(std::string layer);
  // A one-pass seek index builder (SeekIndexBuilder::Create); `spacing`: the uncompressed bytes
  // between points, for a codec that picks its points (gzip), ignored by one whose points are
  // where the stream's frames start.
  using NewSeekIndexBuilder =
      absl::StatusOr<std::unique_ptr<SeekIndexBuilder>> (*)(std::string layer, uint64_t spacing);
  // A decoder starting at `point` (SpanDecoder::Create, which has checked the point is one of
  // the index's). `stored_window`: the point's window when the index came without inline
  // windows (seek_windows.h). `inflater` picks gzip's library; other codecs ignore it.
  using NewSpanDecoder = absl::StatusOr<std::unique_ptr<SpanDecoder>> (*)(
      const SeekPoint& point, std::string layer, GzipInflater inflater,
      std::string_view stored_window);

  // "raw", "tar", "tar+gzip", "tar+zstd": a ModelPack layer media type ends ".v1.<name>".
  std::string_view name;
  // OCI and Docker image layer media types in this encoding; the first is written for
  // LayerKind::kImage. Empty for raw (an image layer is a tar at least).
  std::string_view image_media_types[2] = {};
  bool tar = false;  // the bytes (once decoded) are a tar
  // Compressed codecs only. The encoding number in a seek index (and seek windows) file, never
  // 0, and model.json's name for it: both on disk, never changed.
  uint32_t seek_id = 0;
  std::string_view seek_name;
  // Its seek points may be block boundaries, each carrying the window of bytes before it
  // (gzip): V may keep the windows apart in a seek windows file (seek_windows.h). Without it,
  // every point is a stream start (a frame a decoder enters afresh).
  bool windowed_points = false;
  NewDecoder new_decoder = nullptr;
  NewSeekIndexBuilder new_seek_index_builder = nullptr;
  NewSpanDecoder new_span_decoder = nullptr;

  bool compressed() const { return seek_id != 0; }
};

// The codecs code names (the rest of the table is found by media type or seek id only).
extern const LayerCodec kRawCodec;   // layer_codec.cc
extern const LayerCodec kTarCodec;   // layer_codec.cc
extern const LayerCodec kGzipCodec;  // codec_gzip.cc
extern const LayerCodec kZstdCodec;  // codec_zstd.cc

// A handle to a codec: compared, copied and stored as a pointer.
class LayerEncoding {
 public:
  static const LayerEncoding kRaw;
  static const LayerEncoding kTar;
  static const LayerEncoding kTarGzip;
  static const LayerEncoding kTarZstd;

  constexpr LayerEncoding() : codec_(&kRawCodec) {}
  constexpr explicit LayerEncoding(const LayerCodec& codec) : codec_(&codec) {}

  const LayerCodec& codec() const { return *codec_; }
  // The codec's name: "raw", "tar", "tar+gzip", "tar+zstd".
  std::string_view name() const { return codec_->name; }
  bool tar() const { return codec_->tar; }  // the (decoded) bytes are a tar
  // Decoded through a LayerDecoder; served by range through a seek index.
  bool compressed() const { return codec_->compressed(); }
  // "gzip", "zstd": model.json's seekIndex.encoding; "" for an uncompressed codec.
  std::string_view seek_name() const { return codec_->seek_name; }

  friend constexpr bool operator==(const LayerEncoding&, const LayerEncoding&) = default;
  friend std::ostream& operator<<(std::ostream& os, LayerEncoding e);  // its name

 private:
  const LayerCodec* codec_;
};
inline constexpr LayerEncoding LayerEncoding::kRaw{kRawCodec};
inline constexpr LayerEncoding LayerEncoding::kTar{kTarCodec};
inline constexpr LayerEncoding LayerEncoding::kTarGzip{kGzipCodec};
inline constexpr LayerEncoding LayerEncoding::kTarZstd{kZstdCodec};

// Lookups in the table (and the codec a test registered); nullptr when none.
const LayerCodec* FindLayerCodecByName(std::string_view name);
const LayerCodec* FindLayerCodecByImageMediaType(std::string_view media_type);
const LayerCodec* FindLayerCodecBySeekId(uint32_t seek_id);
const LayerCodec* FindLayerCodecBySeekName(std::string_view seek_name);
// For messages: the compressed codecs as "1 (gzip) or 2 (zstd)" (`with_ids`) or "gzip or zstd".
std::string CompressedCodecList(bool with_ids);

// Registers `codec` beside the table for the scope's lifetime, so a test can show that a new
// encoding is picked up everywhere (tests/oci/fake_codec_test.cc). One at a time; not for
// production code (the table is the registry there). The codec must outlive the scope.
class ScopedLayerCodecForTest {
 public:
  explicit ScopedLayerCodecForTest(const LayerCodec& codec);
  ~ScopedLayerCodecForTest();
  ScopedLayerCodecForTest(const ScopedLayerCodecForTest&) = delete;
  ScopedLayerCodecForTest& operator=(const ScopedLayerCodecForTest&) = delete;
};

}  // namespace modelfs
