// LayerDecoder: the decompression of a compressed tar layer (.tar+gzip, .tar+zstd) as a
// stream, so a layer of any size is decoded in bounded memory. Each codec has its decoder
// (LayerCodec::new_decoder, layer_codec.h): gzip goes through ISA-L's igzip (1.4-1.9x zlib's
// inflate on bf16 weights here; docs/design.md, "Numbers"), zstd through libzstd. Both accept
// what their command-line tools write and read: several gzip members one after another,
// several zstd frames (and skippable frames) one after another.
//
// The decoder checks what the format itself carries (gzip's CRC-32 and length, zstd's content
// checksum when the frame has one) and refuses a stream that is corrupt, ends inside a member
// or frame, or carries bytes after its end that do not start another one. It verifies nothing
// against a digest: callers check the compressed bytes against the layer digest before
// decoding and the decoded bytes against the layer's diff ID (DecodeLayer below).
//
// Thread safety: a decoder is a value for one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/oci/digest.h"
#include "core/oci/media_types.h"

namespace modelfs {

class LayerDecoder {
 public:
  // Receives decoded bytes in order, in pieces of at most kMaxPiece bytes; an error stops the
  // decoding and is returned by Feed.
  using Sink = std::function<absl::Status(std::string_view)>;
  static constexpr size_t kMaxPiece = 1 << 20;

  // The codec's decoder for `encoding` (a compressed one). `layer` names the layer in errors
  // ("layer sha256:..."). Errors: kInvalidArgument for an encoding that is not compressed,
  // kResourceExhausted when the library cannot allocate its state.
  static absl::StatusOr<std::unique_ptr<LayerDecoder>> Create(LayerEncoding encoding,
                                                              std::string layer);
  virtual ~LayerDecoder() = default;

  // Decodes the next compressed bytes. Errors: kDataLoss naming the layer and the compressed
  // offset (corrupt data, a checksum that does not match, bytes after the end of the stream
  // that start no new member or frame); the sink's errors.
  virtual absl::Status Feed(std::string_view compressed, const Sink& sink) = 0;
  // The compressed stream ends here. Errors: kDataLoss when it ends inside a member or frame,
  // or holds no member or frame at all.
  virtual absl::Status Finish() = 0;

  uint64_t consumed() const { return consumed_; }  // compressed bytes fed so far
  uint64_t produced() const { return produced_; }  // decoded bytes given to the sink so far

 protected:
  explicit LayerDecoder(std::string layer) : layer_(std::move(layer)) {}
  const std::string layer_;
  uint64_t consumed_ = 0;
  uint64_t produced_ = 0;
};

// The decoded stream of a layer: its SHA-256 (the diff ID) and its size.
struct DecodedLayer {
  Digest digest;
  uint64_t size = 0;
};

// Reads the compressed bytes: sets `*piece` to the next piece from `offset`, empty at the end.
// The decoder hands the same string back each time, so a reader can reuse its buffer.
using CompressedReader = std::function<absl::Status(uint64_t offset, std::string* piece)>;

// Decodes a whole layer from `read` into `sink`, hashing the decoded bytes. When `diff_id` is
// given the decoded bytes must hash to it. Errors: the decoder's; kDataLoss "layer <digest>:
// decompressed content has digest <got>, the model config's diffId is <want>" on a mismatch
// (returned after the last byte went to the sink: a caller must not use what the sink
// received until this returns OK); the reader's and the sink's errors.
absl::StatusOr<DecodedLayer> DecodeLayer(LayerEncoding encoding, const Digest& layer,
                                         const std::optional<Digest>& diff_id,
                                         const CompressedReader& read,
                                         const LayerDecoder::Sink& sink);

}  // namespace modelfs
