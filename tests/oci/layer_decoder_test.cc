#include "core/oci/layer_decoder.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "testsupport/testing/compress.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::Gzip;
using ::modelfs::testing::StatusIs;
using ::modelfs::testing::ZstdFrames;
using ::testing::AllOf;
using ::testing::HasSubstr;

const Digest kLayer = Digest::Of("the compressed layer");

// Bytes that compress about as well as bf16 weights: random low bytes, few distinct high ones.
std::string Weights(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i % 2 ? 0x3c + rng() % 3 : rng());
  return out;
}

// Decodes `compressed` fed `piece` bytes at a time; the decoded bytes go to `out`.
absl::StatusOr<DecodedLayer> Decode(LayerEncoding encoding, const std::string& compressed,
                                    std::string* out, std::optional<Digest> diff_id = {},
                                    size_t piece = 64 << 10) {
  return DecodeLayer(
      encoding, kLayer, diff_id,
      [&](uint64_t offset, std::string* out_piece) {
        *out_piece = offset >= compressed.size() ? std::string() : compressed.substr(offset, piece);
        return absl::OkStatus();
      },
      [&](std::string_view bytes) {
        out->append(bytes);
        return absl::OkStatus();
      });
}

TEST(LayerDecoderTest, DecodesAGzipStreamToItsBytesAndDigest) {
  const std::string data = Weights(3 << 20, 1);
  std::string out;
  ASSERT_OK_AND_ASSIGN(DecodedLayer d, Decode(LayerEncoding::kTarGzip, Gzip(data), &out));
  EXPECT_EQ(out, data);
  EXPECT_EQ(d.size, data.size());
  EXPECT_EQ(d.digest, Digest::Of(data));
}

TEST(LayerDecoderTest, DecodesAGzipStreamFedOneByteAtATime) {
  const std::string data = Weights(40000, 2);
  std::string out;
  ASSERT_OK_AND_ASSIGN(DecodedLayer d,
                       Decode(LayerEncoding::kTarGzip, Gzip(data, "model.tar"), &out, {}, 1));
  EXPECT_EQ(out, data);
  EXPECT_EQ(d.digest, Digest::Of(data));
}

TEST(LayerDecoderTest, DecodesConcatenatedGzipMembersAsOneStream) {
  const std::string a = Weights(100000, 3), b = Weights(200000, 4);
  std::string out;
  ASSERT_OK(Decode(LayerEncoding::kTarGzip, Gzip(a) + Gzip(b, "b"), &out).status());
  EXPECT_EQ(out, a + b);
}

TEST(LayerDecoderTest, DecodesAZstdStreamOfManyFrames) {
  const std::string data = Weights((5 << 20) + 12345, 5);
  const std::string compressed = ZstdFrames(data, 1 << 20);
  std::string out;
  ASSERT_OK_AND_ASSIGN(DecodedLayer d, Decode(LayerEncoding::kTarZstd, compressed, &out));
  EXPECT_EQ(out, data);
  EXPECT_EQ(d.size, data.size());
  EXPECT_EQ(d.digest, Digest::Of(data));
}

TEST(LayerDecoderTest, DecodesAZstdStreamWhoseFramesFillTheOutputExactly) {
  const std::string data = Weights(2 * LayerDecoder::kMaxPiece, 13);
  std::string out;
  ASSERT_OK(Decode(LayerEncoding::kTarZstd, ZstdFrames(data, LayerDecoder::kMaxPiece), &out, {},
                   /*piece=*/8 << 20)
                .status());
  EXPECT_EQ(out, data);
}

TEST(LayerDecoderTest, DecodesGzipMembersThatFillTheOutputExactly) {
  const std::string a = Weights(LayerDecoder::kMaxPiece, 14);
  const std::string b = Weights(LayerDecoder::kMaxPiece, 15);
  for (size_t piece : {size_t{1} << 12, size_t{8} << 20}) {
    std::string out;
    ASSERT_OK(Decode(LayerEncoding::kTarGzip, Gzip(a) + Gzip(b), &out, {}, piece).status());
    EXPECT_EQ(out, a + b) << piece;
  }
}

TEST(LayerDecoderTest, AcceptsTheDiffIdOfTheDecodedBytes) {
  const std::string data = Weights(70000, 6);
  std::string out;
  EXPECT_OK(
      Decode(LayerEncoding::kTarZstd, ZstdFrames(data, 1 << 20), &out, Digest::Of(data)).status());
}

TEST(LayerDecoderTest, RefusesADiffIdOtherThanTheDecodedBytesNamingBothDigests) {
  const std::string data = Weights(70000, 7);
  const Digest other = Digest::Of("other");
  std::string out;
  EXPECT_THAT(Decode(LayerEncoding::kTarGzip, Gzip(data), &out, other),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(kLayer.str()), HasSubstr(Digest::Of(data).str()),
                             HasSubstr(other.str()))));
}

TEST(LayerDecoderTest, RefusesAGzipStreamWithACorruptedByte) {
  std::string compressed = Gzip(Weights(1 << 20, 8));
  compressed[compressed.size() / 2] ^= 0x5a;
  std::string out;
  EXPECT_THAT(Decode(LayerEncoding::kTarGzip, compressed, &out),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(kLayer.str())));
}

TEST(LayerDecoderTest, RefusesAGzipStreamWhoseCrcDoesNotMatch) {
  std::string compressed = Gzip(Weights(10000, 9));
  compressed[compressed.size() - 6] ^= 0x01;  // the trailer's CRC-32
  std::string out;
  EXPECT_THAT(Decode(LayerEncoding::kTarGzip, compressed, &out),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("CRC-32 mismatch")));
}

TEST(LayerDecoderTest, RefusesAZstdStreamWithACorruptedByte) {
  std::string compressed = ZstdFrames(Weights(3 << 20, 10), 1 << 20);
  compressed[compressed.size() / 2] ^= 0x5a;
  std::string out;
  EXPECT_THAT(Decode(LayerEncoding::kTarZstd, compressed, &out),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(kLayer.str())));
}

TEST(LayerDecoderTest, RefusesATruncatedGzipStreamNamingTheOffset) {
  const std::string compressed = Gzip(Weights(1 << 20, 11));
  const std::string cut = compressed.substr(0, compressed.size() - 100);
  std::string out;
  EXPECT_THAT(
      Decode(LayerEncoding::kTarGzip, cut, &out),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr(absl::StrCat("ends inside a member at compressed offset ", cut.size()))));
}

TEST(LayerDecoderTest, RefusesAZstdStreamCutInsideAFrame) {
  const std::string compressed = ZstdFrames(Weights(3 << 20, 12), 1 << 20);
  const std::string cut = compressed.substr(0, compressed.size() - 1000);
  std::string out;
  EXPECT_THAT(
      Decode(LayerEncoding::kTarZstd, cut, &out),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr(absl::StrCat("ends inside a frame at compressed offset ", cut.size()))));
}

TEST(LayerDecoderTest, RefusesBytesAfterTheLastGzipMember) {
  std::string out;
  EXPECT_THAT(Decode(LayerEncoding::kTarGzip, Gzip("abc") + std::string(16, '\0'), &out),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not a gzip header")));
}

TEST(LayerDecoderTest, RefusesAnEmptyStream) {
  std::string out;
  EXPECT_THAT(Decode(LayerEncoding::kTarGzip, "", &out),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("no gzip member")));
  EXPECT_THAT(Decode(LayerEncoding::kTarZstd, "", &out),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("no frame")));
}

TEST(LayerDecoderTest, RefusesAnUncompressedEncoding) {
  EXPECT_THAT(LayerDecoder::Create(LayerEncoding::kTar, "layer x").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tar is not compressed")));
}

}  // namespace
}  // namespace modelfs
