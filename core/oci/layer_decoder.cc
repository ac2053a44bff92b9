#include "core/oci/layer_decoder.h"

#include <isa-l/igzip_lib.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/oci/zstd_decode_stream.h"
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

}  // namespace

absl::StatusOr<std::unique_ptr<LayerDecoder>> LayerDecoder::Create(LayerEncoding encoding,
                                                                   std::string layer) {
  switch (encoding) {
    case LayerEncoding::kTarGzip:
      return std::unique_ptr<LayerDecoder>(new GzipDecoder(std::move(layer)));
    case LayerEncoding::kTarZstd: {
      ASSIGN_OR_RETURN(std::unique_ptr<ZstdDecodeStream> stream, ZstdDecodeStream::Create(layer));
      return std::unique_ptr<LayerDecoder>(new ZstdDecoder(std::move(layer), std::move(stream)));
    }
    case LayerEncoding::kRaw:
    case LayerEncoding::kTar:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      layer, ": encoding ", std::string(LayerEncodingName(encoding)), " is not compressed"));
}

absl::StatusOr<DecodedLayer> DecodeLayer(LayerEncoding encoding, const Digest& layer,
                                         const std::optional<Digest>& diff_id,
                                         const CompressedReader& read,
                                         const LayerDecoder::Sink& sink) {
  const std::string name = absl::StrCat("layer ", layer.str());
  ASSIGN_OR_RETURN(std::unique_ptr<LayerDecoder> decoder, LayerDecoder::Create(encoding, name));
  Sha256 hash;
  const LayerDecoder::Sink hashing = [&](std::string_view piece) -> absl::Status {
    hash.Update(piece);
    return sink(piece);
  };
  std::string piece;
  while (true) {
    RETURN_IF_ERROR(read(decoder->consumed(), &piece));
    if (piece.empty()) break;
    RETURN_IF_ERROR(decoder->Feed(piece, hashing));
  }
  RETURN_IF_ERROR(decoder->Finish());
  DecodedLayer out{hash.Finish(), decoder->produced()};
  if (diff_id && out.digest != *diff_id) {
    return absl::DataLossError(absl::StrCat(name, ": decompressed content has digest ",
                                            out.digest.str(), ", the model config's diffId is ",
                                            diff_id->str()));
  }
  return out;
}

}  // namespace modelfs
