// Fuzzes LayerDecoder (gzip through ISA-L, zstd through libzstd): never aborts, and decoding
// the same bytes in one piece or in pieces of fuzzer-chosen sizes gives the same outcome, the
// same decoded size and the same digest. The first byte picks the encoding and the piece size.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/oci/layer_decoder.h"

using namespace modelfs;

namespace {

struct Outcome {
  absl::StatusCode code = absl::StatusCode::kOk;
  uint64_t size = 0;
  Digest digest;
};

Outcome Decode(LayerEncoding encoding, std::string_view in, size_t piece) {
  const Digest layer = Digest::Of("fuzz");
  Outcome out;
  absl::StatusOr<DecodedLayer> d = DecodeLayer(
      encoding, layer, std::nullopt,
      [&](uint64_t offset, std::string* out_piece) {
        *out_piece = offset >= in.size() ? std::string() : std::string(in.substr(offset, piece));
        return absl::OkStatus();
      },
      [&](std::string_view bytes) -> absl::Status {
        // A small input may expand a lot: stop at 64 MiB rather than time out.
        if (out.size + bytes.size() > (64u << 20)) return absl::ResourceExhaustedError("big");
        out.size += bytes.size();
        return absl::OkStatus();
      });
  out.code = d.status().code();
  if (d.ok()) {
    out.digest = d->digest;
    if (d->size != out.size) abort();
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const LayerEncoding encoding = data[0] & 1 ? LayerEncoding::kTarZstd : LayerEncoding::kTarGzip;
  const size_t piece = 1 + (data[0] >> 1);
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  const Outcome whole = Decode(encoding, in, in.size() + 1);
  const Outcome pieces = Decode(encoding, in, piece);
  if (whole.code != pieces.code) abort();
  if (whole.code == absl::StatusCode::kOk &&
      (whole.size != pieces.size || whole.digest != pieces.digest)) {
    abort();
  }
  return 0;
}
