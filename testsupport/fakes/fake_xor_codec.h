// A fake layer codec, "tar+xor", for tests that show a new encoding is picked up everywhere the
// codec table is consulted (layer_codec.h): defined as a codec file defines one, and
// registered in place of its table line with ScopedLayerCodecForTest{kXorCodec}.
//
// The format: frames, each a 4-byte little-endian length N and N bytes XORed with 0x5a
// (XorEncode writes it). A seek point is a frame start, as zstd's are; its seek_id is 200, its
// model.json name "xor", its image layer media type kXorImageMediaType.
//
// Thread safety: the codec is immutable; each decoder and builder belongs to one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/oci/layer_codec.h"
#include "core/oci/layer_decoder.h"
#include "core/oci/seek_index.h"
#include "core/oci/span_decoder.h"
#include "core/status/status_macros.h"

namespace modelfs::testing {

inline constexpr char kXorKey = 0x5a;
inline constexpr size_t kXorFrame = 40000;

inline constexpr std::string_view kXorImageMediaType =
    "application/vnd.example.image.layer.v1.tar+xor";

inline absl::StatusOr<std::unique_ptr<LayerDecoder>> NewXorDecoder(std::string layer);
inline absl::StatusOr<std::unique_ptr<SeekIndexBuilder>> NewXorIndexBuilder(std::string layer,
                                                                            uint64_t spacing);
inline absl::StatusOr<std::unique_ptr<SpanDecoder>> NewXorSpan(const SeekPoint& p,
                                                               std::string layer, GzipInflater,
                                                               std::string_view);

// The codec: what its file would define, and the table would list.
inline constinit const LayerCodec kXorCodec = {
    .name = "tar+xor",
    .image_media_types = {kXorImageMediaType},
    .tar = true,
    .seek_id = 200,
    .seek_name = "xor",
    .new_decoder = NewXorDecoder,
    .new_seek_index_builder = NewXorIndexBuilder,
    .new_span_decoder = NewXorSpan,
};
inline constexpr LayerEncoding kXor{kXorCodec};

inline std::string XorEncode(std::string_view plain, size_t frame = kXorFrame) {
  std::string out;
  for (size_t at = 0; at < plain.size(); at += frame) {
    const std::string_view f = plain.substr(at, frame);
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((f.size() >> (8 * i)) & 0xff));
    for (char c : f) out.push_back(static_cast<char>(c ^ kXorKey));
  }
  return out;
}

// Follows the frames of a stream fed in pieces: `start` where each frame begins (its compressed
// offset), `sink` the decoded bytes.
class XorFrames {
 public:
  using Sink = std::function<absl::Status(std::string_view)>;
  absl::Status Feed(std::string_view in, uint64_t base, const std::function<void(uint64_t)>& start,
                    const Sink& sink) {
    for (size_t pos = 0; pos < in.size();) {
      if (left_ == 0) {
        if (have_ == 0) start(base + pos);
        header_[have_++] = in[pos++];
        if (have_ < 4) continue;
        have_ = 0;
        for (int i = 3; i >= 0; --i) left_ = left_ << 8 | static_cast<uint8_t>(header_[i]);
        if (left_ == 0) {
          return absl::DataLossError(absl::StrCat("xor: empty frame at ", base + pos - 4));
        }
        ++frames_;
        continue;
      }
      const size_t n = std::min<uint64_t>(left_, in.size() - pos);
      std::string out(in.substr(pos, n));
      for (char& c : out) c ^= kXorKey;
      pos += n;
      left_ -= n;
      RETURN_IF_ERROR(sink(out));
    }
    return absl::OkStatus();
  }
  bool ended() const { return frames_ > 0 && have_ == 0 && left_ == 0; }

 private:
  char header_[4] = {};
  size_t have_ = 0;
  uint64_t left_ = 0;
  uint64_t frames_ = 0;
};

class XorDecoder final : public LayerDecoder {
 public:
  explicit XorDecoder(std::string layer) : LayerDecoder(std::move(layer)) {}
  absl::Status Feed(std::string_view in, const Sink& sink) override {
    RETURN_IF_ERROR(frames_.Feed(
        in, consumed_, [](uint64_t) {},
        [&](std::string_view plain) {
          produced_ += plain.size();
          return sink(plain);
        }));
    consumed_ += in.size();
    return absl::OkStatus();
  }
  absl::Status Finish() override {
    if (frames_.ended()) return absl::OkStatus();
    return absl::DataLossError(absl::StrCat(layer_, ": xor stream ends inside a frame"));
  }

 private:
  XorFrames frames_;
};

class XorIndexBuilder final : public SeekIndexBuilder {
 public:
  explicit XorIndexBuilder(std::string layer) : SeekIndexBuilder(std::move(layer), kXor) {}
  absl::Status Feed(std::string_view in, const Sink& sink) override {
    compressed_hash_.Update(in);
    RETURN_IF_ERROR(frames_.Feed(
        in, consumed_,
        [&](uint64_t compressed_offset) {
          if (produced_ > index_.points.back().uncompressed_offset) {
            SeekPoint p;
            p.uncompressed_offset = produced_;
            p.compressed_offset = compressed_offset;
            index_.points.push_back(std::move(p));
          }
        },
        [&](std::string_view plain) {
          produced_ += plain.size();
          uncompressed_hash_.Update(plain);
          return sink(plain);
        }));
    consumed_ += in.size();
    return absl::OkStatus();
  }
  absl::StatusOr<SeekIndex> Finish() override {
    if (!frames_.ended()) return absl::DataLossError(absl::StrCat(layer_, ": ends in a frame"));
    return TakeIndex(consumed_, produced_);
  }

 private:
  XorFrames frames_;
  uint64_t consumed_ = 0;
  uint64_t produced_ = 0;
};

class XorSpan final : public SpanDecoder {
 public:
  XorSpan(std::string layer, const SeekPoint& p)
      : SpanDecoder(std::move(layer), p.compressed_offset) {}
  absl::Status Feed(std::string_view in, const Sink& sink) override {
    RETURN_IF_ERROR(frames_.Feed(
        in, compressed_start_ + consumed_, [](uint64_t) {},
        [&](std::string_view plain) {
          produced_ += plain.size();
          return sink(plain);
        }));
    consumed_ += in.size();
    return absl::OkStatus();
  }

 private:
  XorFrames frames_;
};

inline absl::StatusOr<std::unique_ptr<LayerDecoder>> NewXorDecoder(std::string layer) {
  return std::unique_ptr<LayerDecoder>(new XorDecoder(std::move(layer)));
}
inline absl::StatusOr<std::unique_ptr<SeekIndexBuilder>> NewXorIndexBuilder(std::string layer,
                                                                            uint64_t /*spacing*/) {
  return std::unique_ptr<SeekIndexBuilder>(new XorIndexBuilder(std::move(layer)));
}
inline absl::StatusOr<std::unique_ptr<SpanDecoder>> NewXorSpan(const SeekPoint& p,
                                                               std::string layer, GzipInflater,
                                                               std::string_view) {
  return std::unique_ptr<SpanDecoder>(new XorSpan(std::move(layer), p));
}

}  // namespace modelfs::testing
