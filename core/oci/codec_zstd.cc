// The zstd codec (.tar+zstd): the whole-stream decoder and the seek index builder through
// libzstd's streaming API, which reads frame after frame (and skips skippable frames) by itself
// and says where each frame starts (zstd_decode_stream.h); the span decoder from a frame start.
// A seek point is a frame start, so a layer of one frame has one point (push writes frames of a
// chunk each, zstd_frames.h; SeekIndex::served_by_range says when one point is too few).
#include <zstd.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/oci/layer_codec.h"
#include "core/oci/layer_decoder.h"
#include "core/oci/layer_media_types.h"
#include "core/oci/seek_index.h"
#include "core/oci/span_decoder.h"
#include "core/oci/zstd_decode_stream.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

// zstd through libzstd's streaming API, which reads frame after frame (and skips skippable
// frames) by itself (zstd_decode_stream.h).
class ZstdDecoder : public LayerDecoder {
  static_assert(ZstdDecodeStream::kMaxPiece <= kMaxPiece);

 public:
  ZstdDecoder(std::string layer, std::unique_ptr<ZstdDecodeStream> stream)
      : LayerDecoder(std::move(layer)), stream_(std::move(stream)) {}

  absl::Status Feed(std::string_view in, const Sink& sink) override {
    absl::Status st = stream_->Feed(in, sink);
    consumed_ = stream_->consumed();
    produced_ = stream_->produced();
    return st;
  }

  absl::Status Finish() override { return stream_->Finish(); }

 private:
  const std::unique_ptr<ZstdDecodeStream> stream_;
};

// zstd through ZstdDecodeStream, which says where each frame starts.
class ZstdIndexBuilder final : public SeekIndexBuilder {
 public:
  ZstdIndexBuilder(std::string layer, std::unique_ptr<ZstdDecodeStream> stream)
      : SeekIndexBuilder(std::move(layer), LayerEncoding::kTarZstd), stream_(std::move(stream)) {}

  absl::Status Feed(std::string_view in, const Sink& sink) override {
    compressed_hash_.Update(in);
    return stream_->Feed(
        in,
        [&](std::string_view piece) {
          uncompressed_hash_.Update(piece);
          return sink(piece);
        },
        [&](uint64_t compressed_offset) {
          // The next frame starts here. A frame that adds no bytes gets no point of its own:
          // the one before it covers it.
          const uint64_t produced = stream_->produced();
          if (produced > 0 && produced > index_.points.back().uncompressed_offset) {
            SeekPoint p;
            p.uncompressed_offset = produced;
            p.compressed_offset = compressed_offset;
            index_.points.push_back(std::move(p));
          }
        });
  }

  absl::StatusOr<SeekIndex> Finish() override {
    RETURN_IF_ERROR(stream_->Finish());
    return TakeIndex(stream_->consumed(), stream_->produced());
  }

 private:
  const std::unique_ptr<ZstdDecodeStream> stream_;
};

// zstd decompression contexts, kept for the next span: a context holds the frame's window
// (about a megabyte for push's frames), which would otherwise be mapped and faulted anew for
// every frame.
class DctxPool {
 public:
  static DctxPool& Get() {
    static DctxPool* const pool = new DctxPool;  // never destroyed: used to the end
    return *pool;
  }
  ZSTD_DCtx* Take() {
    {
      absl::MutexLock lock(&mu_);
      if (!idle_.empty()) {
        ZSTD_DCtx* d = idle_.back();
        idle_.pop_back();
        return d;
      }
    }
    return ZSTD_createDCtx();
  }
  void Give(ZSTD_DCtx* d) {
    if (d == nullptr) return;
    ZSTD_DCtx_reset(d, ZSTD_reset_session_only);
    {
      absl::MutexLock lock(&mu_);
      if (idle_.size() < kMaxIdle) {
        idle_.push_back(d);
        return;
      }
    }
    ZSTD_freeDCtx(d);
  }

 private:
  static constexpr size_t kMaxIdle = 8;
  absl::Mutex mu_;
  std::vector<ZSTD_DCtx*> idle_ ABSL_GUARDED_BY(mu_);
};

class ZstdSpan final : public SpanDecoder {
 public:
  ZstdSpan(std::string layer, const SeekPoint& p, ZSTD_DCtx* dctx)
      : SpanDecoder(std::move(layer), p.compressed_offset), dctx_(dctx), out_(OutPiece()) {}
  ~ZstdSpan() override { DctxPool::Get().Give(dctx_); }

  absl::Status Feed(std::string_view in, const Sink& sink) override {
    ZSTD_inBuffer input{in.data(), in.size(), 0};
    while (input.pos < input.size || pending_output_) {
      ZSTD_outBuffer output{out_.data(), kOutPiece, 0};
      const size_t r = ZSTD_decompressStream(dctx_, &output, &input);
      if (ZSTD_isError(r)) {
        return absl::DataLossError(absl::StrCat(
            layer_, ": zstd stream is corrupt near compressed ", "offset ",
            compressed_start_ + consumed_ + input.pos, " (", ZSTD_getErrorName(r), ")"));
      }
      pending_output_ = output.pos == output.size;
      if (output.pos > 0) {
        produced_ += output.pos;
        RETURN_IF_ERROR(sink(std::string_view(out_.data(), output.pos)));
      }
    }
    consumed_ += in.size();
    return absl::OkStatus();
  }

 private:
  ZSTD_DCtx* const dctx_;
  BufferPool::Buffer out_;  // kOutPiece bytes used
  bool pending_output_ = false;
};

absl::StatusOr<std::unique_ptr<LayerDecoder>> NewDecoder(std::string layer) {
  ASSIGN_OR_RETURN(std::unique_ptr<ZstdDecodeStream> stream, ZstdDecodeStream::Create(layer));
  return std::unique_ptr<LayerDecoder>(new ZstdDecoder(std::move(layer), std::move(stream)));
}

absl::StatusOr<std::unique_ptr<SeekIndexBuilder>> NewSeekIndexBuilder(std::string layer,
                                                                      uint64_t /*spacing*/) {
  ASSIGN_OR_RETURN(std::unique_ptr<ZstdDecodeStream> stream, ZstdDecodeStream::Create(layer));
  return std::unique_ptr<SeekIndexBuilder>(
      new ZstdIndexBuilder(std::move(layer), std::move(stream)));
}

absl::StatusOr<std::unique_ptr<SpanDecoder>> NewSpanDecoder(const SeekPoint& p, std::string layer,
                                                            GzipInflater /*inflater*/,
                                                            std::string_view /*stored_window*/) {
  ZSTD_DCtx* dctx = DctxPool::Get().Take();
  if (dctx == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(layer, ": cannot allocate a zstd context"));
  }
  return std::unique_ptr<SpanDecoder>(new ZstdSpan(std::move(layer), p, dctx));
}

}  // namespace

constinit const LayerCodec kZstdCodec = {
    .name = "tar+zstd",
    .image_media_types = {kOciLayerTarZstdMediaType},
    .tar = true,
    .seek_id = 2,
    .seek_name = "zstd",
    .new_decoder = NewDecoder,
    .new_seek_index_builder = NewSeekIndexBuilder,
    .new_span_decoder = NewSpanDecoder,
};

}  // namespace modelfs
