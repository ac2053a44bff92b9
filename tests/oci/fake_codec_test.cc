// The proof that a layer encoding is declared once (layer_codec.h): a fake codec, "tar+xor"
// (testsupport/fakes/fake_xor_codec.h, written as a new codec file would be), registered in
// place of its table line (ScopedLayerCodecForTest), is picked up by every path that reads or
// writes a layer's encoding without registry or FUSE: media types both ways, the whole-stream
// decoder, the seek index builder and the file format, the span decoder behind
// DecodeSeekRange, the layers of M, and V (built, model.json written and read back with the
// seek index checked against it). The read path through the blob cache is in
// tests/cache/decoding_blob_source_test.cc (AFakeCodecLayerIsServedThroughItsSeekIndex).
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/oci/layer_codec.h"
#include "core/oci/layer_decoder.h"
#include "core/oci/media_types.h"
#include "core/oci/modelpack.h"
#include "core/oci/seek_index.h"
#include "core/oci/span_decoder.h"
#include "core/oci/tar.h"
#include "core/oci/volume_image.h"
#include "core/status/status_macros.h"
#include "testsupport/fakes/fake_xor_codec.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::kXor;
using ::modelfs::testing::kXorCodec;
using ::modelfs::testing::kXorFrame;
using ::modelfs::testing::kXorImageMediaType;
using ::modelfs::testing::StatusIs;
using ::modelfs::testing::XorEncode;
using ::testing::HasSubstr;

// The table's line for the fake codec, for one test.
class FakeCodecTest : public ::testing::Test {
 protected:
  ScopedLayerCodecForTest registered_{kXorCodec};
};

// A tar of one weight file: what a ModelPack tar layer holds.
std::string Tar() {
  std::string weights(300000, '\0');
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<char>(i * 31 + (i >> 9));
  TarWriter tar;
  EXPECT_OK(tar.AddFile("model.bin", weights));
  return tar.Finish();
}

TEST(FakeCodecUnregisteredTest, ItsMediaTypeIsNoLayerAndItsSeekIdNoEncoding) {
  EXPECT_FALSE(ClassifyLayerMediaType("application/vnd.cncf.model.weight.v1.tar+xor"));
  SeekIndex index;
  index.encoding = kXor;
  index.compressed_size = 10;
  index.uncompressed_size = 10;
  index.points.push_back(SeekPoint{});
  EXPECT_THAT(ParseSeekIndex(SerializeSeekIndex(index)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("encoding 200 is not 1 (gzip) or 2 (zstd)")));
}

TEST_F(FakeCodecTest, ItsMediaTypesAreRecognisedAndBuilt) {
  EXPECT_EQ(ModelLayerMediaType(LayerKind::kWeight, kXor),
            "application/vnd.cncf.model.weight.v1.tar+xor");
  EXPECT_EQ(ClassifyLayerMediaType("application/vnd.cncf.model.weight.v1.tar+xor"),
            (LayerMediaTypeInfo{LayerKind::kWeight, kXor}));
  EXPECT_EQ(ClassifyLayerMediaType("application/vnd.cnai.model.doc.v1.tar+xor"),
            (LayerMediaTypeInfo{LayerKind::kDoc, kXor, /*legacy=*/true}));
  EXPECT_EQ(ModelLayerMediaType(LayerKind::kImage, kXor), kXorImageMediaType);
  EXPECT_EQ(ClassifyLayerMediaType(kXorImageMediaType),
            (LayerMediaTypeInfo{LayerKind::kImage, kXor}));
  EXPECT_TRUE(IsCompressedEncoding(kXor));
  EXPECT_EQ(LayerEncodingName(kXor), "tar+xor");
}

TEST_F(FakeCodecTest, ALayerIsDecodedWholeAndCheckedAgainstItsDiffId) {
  const std::string tar = Tar();
  const std::string xor_layer = XorEncode(tar);
  std::string out;
  auto read = [&](uint64_t offset, std::string* piece) {
    *piece = std::string(std::string_view(xor_layer).substr(offset, 7777));
    return absl::OkStatus();
  };
  auto sink = [&](std::string_view b) {
    out.append(b);
    return absl::OkStatus();
  };
  ASSERT_OK_AND_ASSIGN(DecodedLayer d,
                       DecodeLayer(kXor, Digest::Of(xor_layer), Digest::Of(tar), read, sink));
  EXPECT_EQ(out, tar);
  EXPECT_EQ(d.digest, Digest::Of(tar));
  EXPECT_EQ(d.size, tar.size());
  EXPECT_THAT(DecodeLayer(kXor, Digest::Of(xor_layer), Digest::Of("other"), read,
                          [](std::string_view) { return absl::OkStatus(); }),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("decompressed content")));
}

TEST_F(FakeCodecTest, ItsSeekIndexHasAPointPerFrameAndSurvivesTheFileFormat) {
  const std::string tar = Tar();
  const std::string xor_layer = XorEncode(tar);
  std::string plain;
  ASSERT_OK_AND_ASSIGN(SeekIndex index, BuildSeekIndex(kXor, xor_layer, &plain));
  EXPECT_EQ(plain, tar);
  EXPECT_EQ(index.encoding, kXor);
  EXPECT_EQ(index.layer_digest, Digest::Of(xor_layer));
  EXPECT_EQ(index.diff_id, Digest::Of(tar));
  ASSERT_EQ(index.points.size(), (tar.size() + kXorFrame - 1) / kXorFrame);
  for (size_t i = 0; i < index.points.size(); ++i) {
    EXPECT_EQ(index.points[i].uncompressed_offset, i * kXorFrame);
    EXPECT_EQ(index.points[i].compressed_offset, i * (kXorFrame + 4));
  }
  const std::string file = SerializeSeekIndex(index);
  EXPECT_EQ(static_cast<uint8_t>(file[12]), 200);  // the codec's seek_id, on disk
  ASSERT_OK_AND_ASSIGN(SeekIndex back, ParseSeekIndex(file));
  EXPECT_EQ(back, index);
}

TEST_F(FakeCodecTest, ARangeIsReadFromTheFrameBeforeItOnly) {
  const std::string tar = Tar();
  const std::string xor_layer = XorEncode(tar);
  ASSERT_OK_AND_ASSIGN(SeekIndex index, BuildSeekIndex(kXor, xor_layer));
  const uint64_t offset = 3 * kXorFrame + 100;
  const uint64_t length = kXorFrame;  // into the next frame
  std::string out;
  SeekRangeStats stats;
  ASSERT_OK(DecodeSeekRange(
      index, offset, length, "layer xor",
      [&](uint64_t off, uint64_t len, const SpanDecoder::Sink& sink) {
        return sink(std::string_view(xor_layer).substr(off, len));
      },
      [&](std::string_view b) {
        out.append(b);
        return absl::OkStatus();
      },
      GzipInflater::kIsal, &stats));
  EXPECT_EQ(out, tar.substr(offset, length));
  EXPECT_EQ(stats.lead_in, 100u);
  EXPECT_EQ(stats.compressed_bytes, 2 * (kXorFrame + 4));  // frames 3 and 4, nothing else
}

TEST_F(FakeCodecTest, AVolumeImageCarriesItsSeekIndexAndReadsBack) {
  const std::string tar = Tar();
  const std::string xor_layer = XorEncode(tar);
  ASSERT_OK_AND_ASSIGN(SeekIndex seek, BuildSeekIndex(kXor, xor_layer));
  ChunkIndex chunks = BuildChunkIndex(tar, 64 << 10);
  chunks.content = ChunkIndex::Content::kUncompressed;
  ModelPackConfig config;
  config.modelfs.diff_ids = {Digest::Of(tar)};
  const std::vector<ModelLayerInput> layers = {
      {"model", Digest::Of(xor_layer), xor_layer.size(), LayerKind::kWeight, kXor, ""}};
  ASSERT_OK_AND_ASSIGN(Manifest m, BuildModelManifest(SerializeModelPackConfig(config), layers));
  ASSERT_OK_AND_ASSIGN(std::vector<ModelLayer> resolved, ResolveModelLayers(m));
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].encoding, kXor);

  VolumeImageInput in;
  in.model_manifest = DescribeBlob(kOciManifestMediaType, SerializeManifest(m));
  in.model = m;
  in.repository = "registry.local:5000/models/xor";
  in.chunk_indexes = {chunks};
  in.seek_indexes = {seek};
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(in));
  const VolumeLayerRecord& rec = v.model_info.layers.at(0);
  EXPECT_EQ(rec.media_type, "application/vnd.cncf.model.weight.v1.tar+xor");
  ASSERT_TRUE(rec.seek_index.has_value());
  EXPECT_EQ(rec.seek_index->encoding, kXor);
  EXPECT_THAT(SerializeVolumeModelJson(v.model_info), HasSubstr("\"encoding\":\"xor\""));

  ASSERT_OK_AND_ASSIGN(VolumeLayerContents back, ParseVolumeLayer(v.layer));
  EXPECT_EQ(back.model, v.model_info);
  EXPECT_EQ(back.seek_indexes.at(Digest::Of(xor_layer)), seek);
  EXPECT_EQ(back.chunk_indexes.at(Digest::Of(xor_layer)), chunks);
}

}  // namespace
}  // namespace modelfs
