// LayerDecoder::Create, which hands over to the codec (codec_gzip.cc and codec_zstd.cc hold the
// decoders), and DecodeLayer on top of it.
#include "core/oci/layer_decoder.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs {

absl::StatusOr<std::unique_ptr<LayerDecoder>> LayerDecoder::Create(LayerEncoding encoding,
                                                                   std::string layer) {
  if (encoding.codec().new_decoder == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(layer, ": encoding ", std::string(encoding.name()), " is not compressed"));
  }
  return encoding.codec().new_decoder(std::move(layer));
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
