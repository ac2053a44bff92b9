// ZstdDecodeStream: a zstd stream decoded frame after frame through libzstd's streaming API
// (which skips skippable frames by itself), with the checks of the format: a corrupt stream, a
// stream with no frame, a stream that ends inside a frame. Shared by the zstd LayerDecoder
// (layer_decoder.cc) and the zstd SeekIndexBuilder (seek_index.cc), which is also told where
// each frame starts. Internal to core/oci.
//
// Thread safety: a value for one thread.
#pragma once

#include <zstd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace modelfs {

class ZstdDecodeStream {
 public:
  // Receives decoded bytes in order, in pieces of at most kMaxPiece bytes.
  using Sink = std::function<absl::Status(std::string_view)>;
  // Told, before the decoder reads on outside any frame, the compressed offset it reads from
  // (where the next frame starts).
  using FrameStart = std::function<void(uint64_t compressed_offset)>;
  static constexpr size_t kMaxPiece = 1 << 20;

  // `layer` names the stream in errors. Errors: kResourceExhausted "<layer>: cannot allocate
  // a zstd context".
  static absl::StatusOr<std::unique_ptr<ZstdDecodeStream>> Create(std::string layer);
  ~ZstdDecodeStream();
  ZstdDecodeStream(const ZstdDecodeStream&) = delete;
  ZstdDecodeStream& operator=(const ZstdDecodeStream&) = delete;

  // Decodes the next compressed bytes. `produced()` counts a piece before the sink gets it;
  // `consumed()` counts `in` once it is all decoded. Errors: kDataLoss "<layer>: zstd stream
  // is corrupt near compressed offset N (<libzstd's reason>)"; the sink's errors.
  absl::Status Feed(std::string_view in, const Sink& sink, const FrameStart& frame_start = nullptr);
  // The compressed stream ends here. Errors: kDataLoss when it holds no frame or ends inside
  // one.
  absl::Status Finish() const;

  uint64_t consumed() const { return consumed_; }
  uint64_t produced() const { return produced_; }

 private:
  ZstdDecodeStream(std::string layer, ZSTD_DCtx* dctx);

  const std::string layer_;
  ZSTD_DCtx* const dctx_;
  std::string out_;
  uint64_t consumed_ = 0;
  uint64_t produced_ = 0;
  bool frame_open_ = false;
  bool saw_input_ = false;
  bool pending_output_ = false;
};

}  // namespace modelfs
