// A zstd stream decoded frame after frame (see zstd_decode_stream.h).
#include "core/oci/zstd_decode_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs {

absl::StatusOr<std::unique_ptr<ZstdDecodeStream>> ZstdDecodeStream::Create(std::string layer) {
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  if (dctx == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(layer, ": cannot allocate a zstd context"));
  }
  return std::unique_ptr<ZstdDecodeStream>(new ZstdDecodeStream(std::move(layer), dctx));
}

ZstdDecodeStream::ZstdDecodeStream(std::string layer, ZSTD_DCtx* dctx)
    : layer_(std::move(layer)), dctx_(dctx), out_(kMaxPiece, '\0') {}

ZstdDecodeStream::~ZstdDecodeStream() { ZSTD_freeDCtx(dctx_); }

absl::Status ZstdDecodeStream::Feed(std::string_view in, const Sink& sink,
                                    const FrameStart& frame_start) {
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  while (input.pos < input.size || pending_output_) {
    if (frame_start && !frame_open_ && input.pos < input.size) frame_start(consumed_ + input.pos);
    ZSTD_outBuffer output{out_.data(), out_.size(), 0};
    const size_t in_before = input.pos;
    const size_t r = ZSTD_decompressStream(dctx_, &output, &input);
    if (ZSTD_isError(r)) {
      return absl::DataLossError(absl::StrCat(layer_, ": zstd stream is corrupt near compressed ",
                                              "offset ", consumed_ + input.pos, " (",
                                              ZSTD_getErrorName(r), ")"));
    }
    // A call that moved nothing says nothing about the frame: after a frame that filled the
    // output exactly, the next call (made in case output was pending) hints at the next
    // frame's header.
    if (input.pos != in_before || output.pos > 0) frame_open_ = r != 0;
    if (input.pos > 0) saw_input_ = true;
    // A full output buffer may leave decoded bytes inside the context.
    pending_output_ = output.pos == output.size;
    if (output.pos > 0) {
      produced_ += output.pos;
      RETURN_IF_ERROR(sink(std::string_view(out_.data(), output.pos)));
    }
  }
  consumed_ += in.size();
  return absl::OkStatus();
}

absl::Status ZstdDecodeStream::Finish() const {
  if (!saw_input_) {
    return absl::DataLossError(absl::StrCat(layer_, ": zstd stream is empty (no frame)"));
  }
  if (frame_open_) {
    return absl::DataLossError(
        absl::StrCat(layer_, ": zstd stream ends inside a frame at compressed offset ", consumed_));
  }
  return absl::OkStatus();
}

}  // namespace modelfs
