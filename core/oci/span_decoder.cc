// Span decoding: gzip resumed at a seek point (a member start, or a deflate block boundary with
// its bit offset and window), through ISA-L or zlib; zstd from a frame start through libzstd.
// A span may run across the end of a gzip member into the next one: the raw inflate ends, the
// 8-byte trailer is skipped, and the next member is read with its header.
#include "core/oci/span_decoder.h"

#include <isa-l/igzip_lib.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/base/buffer_pool.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

constexpr size_t kOutPiece = 256 << 10;

// Each decoder's output piece comes from the read path's pool (buffer_pool.h): a span is
// decoded every megabyte or few, and a fresh buffer each time would be a fresh mapping whose
// pages all fault.
BufferPool::Buffer OutPiece() { return BufferPool::Shared().Get(kOutPiece); }

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
constexpr int kGzipTrailer = 8;  // CRC-32 and ISIZE after the deflate data of a member

class ZlibSpan final : public SpanDecoder {
 public:
  ZlibSpan(std::string layer, const SeekPoint& p, std::string window)
      : SpanDecoder(std::move(layer), p.compressed_offset - (p.bits > 0 ? 1 : 0)),
        raw_(p.kind == SeekPoint::Kind::kBlockBoundary),
        bits_(p.bits),
        window_(std::move(window)),
        out_(OutPiece()) {}
  ~ZlibSpan() override {
    if (init_) inflateEnd(&zs_);
  }
  absl::Status Init() {
    if (inflateInit2(&zs_, raw_ ? -15 : 31) != Z_OK) {
      return absl::ResourceExhaustedError(absl::StrCat(layer_, ": cannot allocate inflate state"));
    }
    init_ = true;
    return absl::OkStatus();
  }

  absl::Status Feed(std::string_view in, const Sink& sink) override {
    if (!primed_) {
      if (bits_ > 0) {
        if (in.empty()) return absl::OkStatus();
        inflatePrime(&zs_, bits_, static_cast<uint8_t>(in[0]) >> (8 - bits_));
        in.remove_prefix(1);
        consumed_ += 1;
      }
      if (raw_ && !window_.empty() &&
          inflateSetDictionary(&zs_, reinterpret_cast<const Bytef*>(window_.data()),
                               static_cast<uInt>(window_.size())) != Z_OK) {
        return absl::InternalError(absl::StrCat(layer_, ": cannot set the inflate window"));
      }
      primed_ = true;
    }
    if (in.size() > (1u << 30)) {
      return absl::InvalidArgumentError(absl::StrCat(layer_, ": compressed piece too large"));
    }
    zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs_.avail_in = static_cast<uInt>(in.size());
    const uint64_t base = compressed_start_ + consumed_;
    auto pos = [&] { return base + (in.size() - zs_.avail_in); };
    while (true) {
      if (skip_ > 0) {
        const uInt n = std::min<uInt>(skip_, zs_.avail_in);
        zs_.next_in += n;
        zs_.avail_in -= n;
        skip_ -= static_cast<int>(n);
        if (skip_ > 0) break;
      }
      if (member_done_) {
        if (zs_.avail_in == 0) break;
        inflateReset2(&zs_, 31);  // the next member, with its header
        raw_ = false;
        member_done_ = false;
      }
      zs_.next_out = reinterpret_cast<Bytef*>(out_.data());
      zs_.avail_out = static_cast<uInt>(kOutPiece);
      const uInt avail_before = zs_.avail_in;
      const int r = inflate(&zs_, Z_NO_FLUSH);
      if (r != Z_OK && r != Z_STREAM_END && r != Z_BUF_ERROR) {
        return absl::DataLossError(absl::StrCat(layer_, ": gzip stream is corrupt near compressed ",
                                                "offset ", pos(), " (",
                                                zs_.msg ? zs_.msg : "zlib error", ")"));
      }
      const size_t n = kOutPiece - zs_.avail_out;
      if (n > 0) {
        produced_ += n;
        RETURN_IF_ERROR(sink(std::string_view(out_.data(), n)));
      }
      if (r == Z_STREAM_END) {
        if (raw_) skip_ = kGzipTrailer;  // zlib checks the trailer only of members it started
        member_done_ = true;
        continue;
      }
      if (zs_.avail_in == 0 && zs_.avail_out > 0) break;
      if (n == 0 && zs_.avail_in == avail_before) {
        return absl::DataLossError(
            absl::StrCat(layer_, ": gzip stream makes no progress at compressed offset ", pos()));
      }
    }
    consumed_ += in.size();
    return absl::OkStatus();
  }

 private:
  z_stream zs_{};
  bool init_ = false;
  bool raw_;
  const uint8_t bits_;
  const std::string window_;
  bool primed_ = false;
  int skip_ = 0;
  bool member_done_ = false;
  BufferPool::Buffer out_;  // kOutPiece bytes used
};

class IsalSpan final : public SpanDecoder {
 public:
  IsalSpan(std::string layer, const SeekPoint& p, std::string window)
      : SpanDecoder(std::move(layer), p.compressed_offset - (p.bits > 0 ? 1 : 0)),
        raw_(p.kind == SeekPoint::Kind::kBlockBoundary),
        bits_(p.bits),
        window_(std::move(window)),
        state_(std::make_unique<inflate_state>()),
        out_(OutPiece()) {
    isal_inflate_init(state_.get());
    state_->crc_flag = raw_ ? ISAL_DEFLATE : ISAL_GZIP;
  }

  absl::Status Feed(std::string_view in, const Sink& sink) override {
    if (!primed_) {
      if (bits_ > 0) {
        if (in.empty()) return absl::OkStatus();
        // igzip keeps unread bits in read_in, lowest first: the same as zlib's inflatePrime.
        state_->read_in = static_cast<uint8_t>(in[0]) >> (8 - bits_);
        state_->read_in_length = bits_;
        in.remove_prefix(1);
        consumed_ += 1;
      }
      if (raw_ && !window_.empty() &&
          isal_inflate_set_dict(state_.get(),
                                reinterpret_cast<uint8_t*>(const_cast<char*>(window_.data())),
                                static_cast<uint32_t>(window_.size())) != COMP_OK) {
        return absl::InternalError(absl::StrCat(layer_, ": cannot set the inflate window"));
      }
      primed_ = true;
    }
    if (in.size() > (1u << 30)) {
      return absl::InvalidArgumentError(absl::StrCat(layer_, ": compressed piece too large"));
    }
    state_->next_in = reinterpret_cast<uint8_t*>(const_cast<char*>(in.data()));
    state_->avail_in = static_cast<uint32_t>(in.size());
    const uint64_t base = compressed_start_ + consumed_;
    auto pos = [&] { return base + (in.size() - state_->avail_in); };
    while (true) {
      if (skip_ > 0) {
        const uint32_t n = std::min<uint32_t>(skip_, state_->avail_in);
        state_->next_in += n;
        state_->avail_in -= n;
        skip_ -= static_cast<int>(n);
        if (skip_ > 0) break;
      }
      if (state_->block_state == ISAL_BLOCK_FINISH) {
        if (state_->avail_in == 0) break;
        uint8_t* next = state_->next_in;
        const uint32_t avail = state_->avail_in;
        isal_inflate_init(state_.get());  // the next member, with its header
        state_->crc_flag = ISAL_GZIP;
        raw_ = false;
        state_->next_in = next;
        state_->avail_in = avail;
      }
      state_->next_out = reinterpret_cast<uint8_t*>(out_.data());
      state_->avail_out = static_cast<uint32_t>(kOutPiece);
      const uint32_t avail_before = state_->avail_in;
      const int r = isal_inflate(state_.get());
      if (r != ISAL_DECOMP_OK) {
        return absl::DataLossError(absl::StrCat(layer_, ": gzip stream is corrupt near compressed ",
                                                "offset ", pos(), " (igzip error ", r, ")"));
      }
      const size_t n = kOutPiece - state_->avail_out;
      if (n > 0) {
        produced_ += n;
        RETURN_IF_ERROR(sink(std::string_view(out_.data(), n)));
      }
      if (state_->block_state == ISAL_BLOCK_FINISH) {
        if (raw_) {
          // igzip reads ahead; what it holds past the end of the deflate data goes back.
          const uint32_t back = static_cast<uint32_t>(state_->read_in_length / 8);
          state_->next_in -= back;
          state_->avail_in += back;
          state_->read_in = 0;
          state_->read_in_length = 0;
          skip_ = kGzipTrailer;
        }
        continue;
      }
      if (state_->avail_in == 0 && n < kOutPiece) break;
      if (n == 0 && state_->avail_in == avail_before) {
        return absl::DataLossError(
            absl::StrCat(layer_, ": gzip stream makes no progress at compressed offset ", pos()));
      }
    }
    consumed_ += in.size();
    return absl::OkStatus();
  }

 private:
  bool raw_;
  const uint8_t bits_;
  const std::string window_;
  bool primed_ = false;
  int skip_ = 0;
  std::unique_ptr<inflate_state> state_;
  BufferPool::Buffer out_;  // kOutPiece bytes used
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

}  // namespace

absl::StatusOr<std::unique_ptr<SpanDecoder>> SpanDecoder::Create(const SeekIndex& index,
                                                                 size_t point, std::string layer,
                                                                 GzipInflater inflater,
                                                                 std::string_view stored_window) {
  if (point >= index.points.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(layer, ": seek point ", point, " out of range (", index.points.size(), ")"));
  }
  const SeekPoint& p = index.points[point];
  if (index.encoding == SeekEncoding::kZstd) {
    ZSTD_DCtx* dctx = DctxPool::Get().Take();
    if (dctx == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(layer, ": cannot allocate a zstd context"));
    }
    return std::unique_ptr<SpanDecoder>(new ZstdSpan(std::move(layer), p, dctx));
  }
  std::string window;
  if (p.kind == SeekPoint::Kind::kBlockBoundary) {
    if (p.window.empty() && !stored_window.empty()) {
      // The index came from a windows table (seek_windows.h): the window was fetched apart.
      SeekPoint with = p;
      with.window.assign(stored_window.data(), stored_window.size());
      ASSIGN_OR_RETURN(window, InflateSeekWindow(with));
    } else {
      ASSIGN_OR_RETURN(window, InflateSeekWindow(p));
    }
  }
  if (inflater == GzipInflater::kIsal) {
    return std::unique_ptr<SpanDecoder>(new IsalSpan(std::move(layer), p, std::move(window)));
  }
  auto z = std::make_unique<ZlibSpan>(std::move(layer), p, std::move(window));
  RETURN_IF_ERROR(z->Init());
  return std::unique_ptr<SpanDecoder>(std::move(z));
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
