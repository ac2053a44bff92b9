// The gzip codec (.tar+gzip, Docker's rootfs.diff.tar.gzip): the whole-stream decoder through
// ISA-L's igzip (1.4-1.9x zlib's inflate on bf16 weights here; docs/design.md, "Numbers"), the
// seek index builder through zlib's inflate with Z_BLOCK (which stops at every deflate block
// boundary and reports the bit position, as zran.c uses it), and the span decoder resumed at a
// seek point (a member start, or a deflate block boundary with its bit offset and window),
// through ISA-L or zlib. A span may run across the end of a gzip member into the next one: the
// raw inflate ends, the 8-byte trailer is skipped, and the next member is read with its header.
#include <isa-l/igzip_lib.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/oci/layer_codec.h"
#include "core/oci/layer_decoder.h"
#include "core/oci/layer_media_types.h"
#include "core/oci/seek_index.h"
#include "core/oci/span_decoder.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

// gzip through ISA-L: one member after another, each with its header parsed and its CRC-32
// checked by the library (crc_flag ISAL_GZIP).
class GzipDecoder : public LayerDecoder {
 public:
  explicit GzipDecoder(std::string layer)
      : LayerDecoder(std::move(layer)),
        state_(std::make_unique<inflate_state>()),
        out_(kMaxPiece, '\0') {
    StartMember();
  }

  absl::Status Feed(std::string_view in, const Sink& sink) override {
    state_->next_in = reinterpret_cast<uint8_t*>(const_cast<char*>(in.data()));
    state_->avail_in = static_cast<uint32_t>(in.size());
    const uint64_t base = consumed_;
    // ISA-L counts avail_in in 32 bits; Feed's callers give pieces of a few MiB.
    if (in.size() > (1u << 30)) {
      return absl::InvalidArgumentError(absl::StrCat(layer_, ": compressed piece too large"));
    }
    while (true) {
      if (state_->block_state == ISAL_BLOCK_FINISH) {
        if (state_->avail_in == 0) break;
        // Another member follows (gzip allows several; pigz --independent, cat a.gz b.gz).
        uint8_t* next = state_->next_in;
        const uint32_t avail = state_->avail_in;
        StartMember();
        state_->next_in = next;
        state_->avail_in = avail;
      }
      state_->next_out = reinterpret_cast<uint8_t*>(out_.data());
      state_->avail_out = static_cast<uint32_t>(out_.size());
      const uint32_t avail_before = state_->avail_in;
      const int r = isal_inflate(state_.get());
      const uint64_t at = base + (in.size() - state_->avail_in);
      if (r != ISAL_DECOMP_OK) {
        return absl::DataLossError(absl::StrCat(layer_, ": gzip stream is corrupt near compressed ",
                                                "offset ", at, " (", ErrorName(r), ")"));
      }
      const size_t n = out_.size() - state_->avail_out;
      if (n > 0) {
        member_started_ = true;
        produced_ += n;
        RETURN_IF_ERROR(sink(std::string_view(out_.data(), n)));
      }
      if (state_->avail_in != avail_before) member_started_ = true;
      if (state_->block_state == ISAL_BLOCK_FINISH) {
        members_++;
        continue;
      }
      if (state_->avail_in == 0 && n < out_.size()) break;  // wants more input
      if (state_->avail_in == avail_before && n == 0) {
        return absl::DataLossError(
            absl::StrCat(layer_, ": gzip stream makes no progress at compressed offset ", at));
      }
    }
    consumed_ += in.size();
    return absl::OkStatus();
  }

  absl::Status Finish() override {
    if (state_->block_state == ISAL_BLOCK_FINISH && members_ > 0) return absl::OkStatus();
    return absl::DataLossError(
        absl::StrCat(layer_, ": gzip stream ends inside a member at compressed offset ", consumed_,
                     members_ == 0 && !member_started_ ? " (no gzip member at all)" : ""));
  }

 private:
  void StartMember() {
    isal_inflate_init(state_.get());
    state_->crc_flag = ISAL_GZIP;
    member_started_ = false;
  }
  static const char* ErrorName(int r) {
    switch (r) {
      case ISAL_INVALID_BLOCK:
        return "invalid deflate block";
      case ISAL_INVALID_SYMBOL:
        return "invalid deflate symbol";
      case ISAL_INVALID_LOOKBACK:
        return "invalid back-reference distance";
      case ISAL_INVALID_WRAPPER:
        return "not a gzip header";
      case ISAL_UNSUPPORTED_METHOD:
        return "unsupported compression method";
      case ISAL_INCORRECT_CHECKSUM:
        return "CRC-32 mismatch";
      case ISAL_NEED_DICT:
        return "needs a preset dictionary";
      default:
        return "igzip error";
    }
  }

  std::unique_ptr<inflate_state> state_;
  std::string out_;
  uint64_t members_ = 0;
  bool member_started_ = false;
};

// Raw deflate at level 9: windows are stored compressed (bf16 weights give about 0.8).
std::string DeflateWindow(std::string_view window) {
  z_stream zs{};
  if (deflateInit2(&zs, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY) != Z_OK) abort();
  std::string out(deflateBound(&zs, window.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(window.data()));
  zs.avail_in = static_cast<uInt>(window.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) abort();  // the buffer is deflateBound's
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

class GzipIndexBuilder final : public SeekIndexBuilder {
 public:
  GzipIndexBuilder(std::string layer, uint64_t spacing)
      : SeekIndexBuilder(std::move(layer), LayerEncoding::kTarGzip),
        spacing_(spacing),
        out_(256 << 10, '\0') {}
  ~GzipIndexBuilder() override {
    if (init_) inflateEnd(&zs_);
  }
  absl::Status Init() {
    if (inflateInit2(&zs_, 15 + 16) != Z_OK) {
      return absl::ResourceExhaustedError(absl::StrCat(layer_, ": cannot allocate inflate state"));
    }
    init_ = true;
    return absl::OkStatus();
  }

  absl::Status Feed(std::string_view in, const Sink& sink) override {
    compressed_hash_.Update(in);
    zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs_.avail_in = static_cast<uInt>(in.size());
    if (in.size() > (1u << 30)) {
      return absl::InvalidArgumentError(absl::StrCat(layer_, ": compressed piece too large"));
    }
    const uint64_t base = consumed_;
    auto pos = [&] { return base + (in.size() - zs_.avail_in); };
    while (true) {
      if (member_done_) {
        if (zs_.avail_in == 0) break;
        // Another member follows (gzip allows several, as `cat a.gz b.gz` writes).
        inflateReset(&zs_);
        member_done_ = false;
        member_start_ = produced_;
        if (produced_ - index_.points.back().uncompressed_offset >= spacing_) {
          SeekPoint p;
          p.uncompressed_offset = produced_;
          p.compressed_offset = pos();
          index_.points.push_back(std::move(p));
        }
      }
      zs_.next_out = reinterpret_cast<Bytef*>(out_.data());
      zs_.avail_out = static_cast<uInt>(out_.size());
      const uInt avail_before = zs_.avail_in;
      const int r = inflate(&zs_, Z_BLOCK);
      if (r != Z_OK && r != Z_STREAM_END && r != Z_BUF_ERROR) {
        return absl::DataLossError(absl::StrCat(layer_, ": gzip stream is corrupt near compressed ",
                                                "offset ", pos(), " (",
                                                zs_.msg ? zs_.msg : "zlib error", ")"));
      }
      const size_t n = out_.size() - zs_.avail_out;
      if (n > 0 || zs_.avail_in != avail_before) member_started_ = true;
      if (n > 0) {
        const std::string_view piece(out_.data(), n);
        produced_ += n;
        uncompressed_hash_.Update(piece);
        tail_.append(piece);
        if (tail_.size() > 2 * SeekIndex::kWindowSize) {
          tail_.erase(0, tail_.size() - SeekIndex::kWindowSize);
        }
        RETURN_IF_ERROR(sink(piece));
      }
      if (r == Z_STREAM_END) {
        member_done_ = true;
        members_++;
        continue;
      }
      // Bit 7: inflate stopped at the end of a block (or of the header); bit 6: that was the
      // last block. A point needs a next block inside this member.
      if ((zs_.data_type & 128) && !(zs_.data_type & 64) && produced_ > member_start_ &&
          produced_ - index_.points.back().uncompressed_offset >= spacing_) {
        SeekPoint p;
        p.uncompressed_offset = produced_;
        p.compressed_offset = pos();
        p.kind = SeekPoint::Kind::kBlockBoundary;
        p.bits = static_cast<uint8_t>(zs_.data_type & 7);
        p.window_size = static_cast<uint32_t>(
            std::min<uint64_t>(SeekIndex::kWindowSize, produced_ - member_start_));
        p.window = DeflateWindow(std::string_view(tail_).substr(tail_.size() - p.window_size));
        index_.points.push_back(std::move(p));
      }
      if (zs_.avail_in == 0 && zs_.avail_out > 0) break;  // wants more input
      if (r == Z_BUF_ERROR) {
        return absl::DataLossError(
            absl::StrCat(layer_, ": gzip stream makes no progress at compressed offset ", pos()));
      }
    }
    consumed_ += in.size();
    return absl::OkStatus();
  }

  absl::StatusOr<SeekIndex> Finish() override {
    if (!member_done_ || members_ == 0) {
      return absl::DataLossError(
          absl::StrCat(layer_, ": gzip stream ends inside a member at compressed offset ",
                       consumed_, members_ == 0 && !member_started_ ? " (no gzip member)" : ""));
    }
    return TakeIndex(consumed_, produced_);
  }

 private:
  const uint64_t spacing_;
  z_stream zs_{};
  bool init_ = false;
  std::string out_;
  std::string tail_;  // the last 32..64 KiB of output
  uint64_t consumed_ = 0;
  uint64_t produced_ = 0;
  uint64_t member_start_ = 0;
  uint64_t members_ = 0;
  bool member_done_ = false;
  bool member_started_ = false;
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

absl::StatusOr<std::unique_ptr<LayerDecoder>> NewDecoder(std::string layer) {
  return std::unique_ptr<LayerDecoder>(new GzipDecoder(std::move(layer)));
}

absl::StatusOr<std::unique_ptr<SeekIndexBuilder>> NewSeekIndexBuilder(std::string layer,
                                                                      uint64_t spacing) {
  auto b = std::make_unique<GzipIndexBuilder>(std::move(layer), spacing);
  RETURN_IF_ERROR(b->Init());
  return std::unique_ptr<SeekIndexBuilder>(std::move(b));
}

absl::StatusOr<std::unique_ptr<SpanDecoder>> NewSpanDecoder(const SeekPoint& p, std::string layer,
                                                            GzipInflater inflater,
                                                            std::string_view stored_window) {
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

}  // namespace

constinit const LayerCodec kGzipCodec = {
    .name = "tar+gzip",
    .image_media_types = {kOciLayerTarGzipMediaType, kDockerLayerTarGzipMediaType},
    .tar = true,
    .seek_id = 1,
    .seek_name = "gzip",
    .windowed_points = true,
    .new_decoder = NewDecoder,
    .new_seek_index_builder = NewSeekIndexBuilder,
    .new_span_decoder = NewSpanDecoder,
};

}  // namespace modelfs
