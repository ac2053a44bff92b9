// The codec table's on-disk and on-wire values (layer_codec.h): a V or seek index written before
// the table existed names its encodings with these, so they never change.
#include "core/oci/layer_codec.h"

#include <gtest/gtest.h>

#include <sstream>

#include "core/oci/media_types.h"

namespace modelfs {
namespace {

TEST(LayerCodecTest, EachCodecKeepsItsNameSeekIdAndSeekName) {
  EXPECT_EQ(LayerEncoding::kRaw.name(), "raw");
  EXPECT_EQ(LayerEncoding::kTar.name(), "tar");
  EXPECT_EQ(LayerEncoding::kTarGzip.name(), "tar+gzip");
  EXPECT_EQ(LayerEncoding::kTarZstd.name(), "tar+zstd");
  EXPECT_EQ(kGzipCodec.seek_id, 1u);
  EXPECT_EQ(kZstdCodec.seek_id, 2u);
  EXPECT_EQ(LayerEncoding::kTarGzip.seek_name(), "gzip");
  EXPECT_EQ(LayerEncoding::kTarZstd.seek_name(), "zstd");
  EXPECT_EQ(kRawCodec.seek_id, 0u);
  EXPECT_EQ(kTarCodec.seek_id, 0u);
}

TEST(LayerCodecTest, OnlyTheCompressedCodecsDecodeAndOnlyGzipPointsCarryWindows) {
  EXPECT_FALSE(LayerEncoding::kRaw.compressed());
  EXPECT_FALSE(LayerEncoding::kRaw.tar());
  EXPECT_FALSE(LayerEncoding::kTar.compressed());
  EXPECT_TRUE(LayerEncoding::kTar.tar());
  for (const LayerCodec* c : {&kGzipCodec, &kZstdCodec}) {
    EXPECT_TRUE(c->compressed()) << c->name;
    EXPECT_TRUE(c->tar) << c->name;
    EXPECT_NE(c->new_decoder, nullptr) << c->name;
    EXPECT_NE(c->new_seek_index_builder, nullptr) << c->name;
    EXPECT_NE(c->new_span_decoder, nullptr) << c->name;
  }
  EXPECT_TRUE(kGzipCodec.windowed_points);
  EXPECT_FALSE(kZstdCodec.windowed_points);
}

TEST(LayerCodecTest, LookupsFindEachCodecByWhatIsWrittenOfIt) {
  EXPECT_EQ(FindLayerCodecByName("tar+zstd"), &kZstdCodec);
  EXPECT_EQ(FindLayerCodecByName("raw"), &kRawCodec);
  EXPECT_EQ(FindLayerCodecByName("tar+lz4"), nullptr);
  EXPECT_EQ(FindLayerCodecByName(""), nullptr);
  EXPECT_EQ(FindLayerCodecBySeekId(1), &kGzipCodec);
  EXPECT_EQ(FindLayerCodecBySeekId(2), &kZstdCodec);
  EXPECT_EQ(FindLayerCodecBySeekId(0), nullptr);
  EXPECT_EQ(FindLayerCodecBySeekId(3), nullptr);
  EXPECT_EQ(FindLayerCodecBySeekName("gzip"), &kGzipCodec);
  EXPECT_EQ(FindLayerCodecBySeekName(""), nullptr);
  EXPECT_EQ(FindLayerCodecByImageMediaType(kOciLayerTarMediaType), &kTarCodec);
  EXPECT_EQ(FindLayerCodecByImageMediaType(kDockerLayerTarGzipMediaType), &kGzipCodec);
  EXPECT_EQ(FindLayerCodecByImageMediaType(kOciLayerTarZstdMediaType), &kZstdCodec);
  EXPECT_EQ(FindLayerCodecByImageMediaType(""), nullptr);
  EXPECT_EQ(CompressedCodecList(/*with_ids=*/true), "1 (gzip) or 2 (zstd)");
  EXPECT_EQ(CompressedCodecList(/*with_ids=*/false), "gzip or zstd");
}

TEST(LayerCodecTest, AnEncodingPrintsAsItsName) {
  std::ostringstream os;
  os << LayerEncoding::kTarGzip;
  EXPECT_EQ(os.str(), "tar+gzip");
  EXPECT_EQ(LayerEncoding(), LayerEncoding::kRaw);
  EXPECT_NE(LayerEncoding::kTarGzip, LayerEncoding::kTarZstd);
}

}  // namespace
}  // namespace modelfs
