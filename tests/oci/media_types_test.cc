#include "core/oci/media_types.h"

#include <gtest/gtest.h>

namespace modelfs {
namespace {

TEST(MediaTypesTest, CncfWeightRawMapsToWeightRaw) {
  auto info = ClassifyLayerMediaType("application/vnd.cncf.model.weight.v1.raw");
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->kind, LayerKind::kWeight);
  EXPECT_EQ(info->encoding, LayerEncoding::kRaw);
  EXPECT_FALSE(info->legacy);
}

TEST(MediaTypesTest, WeightConfigIsNotMistakenForWeight) {
  auto info = ClassifyLayerMediaType("application/vnd.cncf.model.weight.config.v1.tar+zstd");
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->kind, LayerKind::kWeightConfig);
  EXPECT_EQ(info->encoding, LayerEncoding::kTarZstd);
}

TEST(MediaTypesTest, LegacyCnaiNamesAreAcceptedAndFlagged) {
  auto info = ClassifyLayerMediaType("application/vnd.cnai.model.doc.v1.tar+gzip");
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->kind, LayerKind::kDoc);
  EXPECT_EQ(info->encoding, LayerEncoding::kTarGzip);
  EXPECT_TRUE(info->legacy);
}

TEST(MediaTypesTest, ImageLayersMapToImageKind) {
  EXPECT_EQ(ClassifyLayerMediaType("application/vnd.oci.image.layer.v1.tar"),
            (LayerMediaTypeInfo{LayerKind::kImage, LayerEncoding::kTar}));
  EXPECT_EQ(ClassifyLayerMediaType("application/vnd.docker.image.rootfs.diff.tar.gzip"),
            (LayerMediaTypeInfo{LayerKind::kImage, LayerEncoding::kTarGzip}));
  EXPECT_EQ(ClassifyLayerMediaType("application/vnd.oci.image.layer.v1.tar+zstd"),
            (LayerMediaTypeInfo{LayerKind::kImage, LayerEncoding::kTarZstd}));
}

TEST(MediaTypesTest, UnknownAndConfigTypesAreNotLayers) {
  EXPECT_FALSE(ClassifyLayerMediaType("application/vnd.cncf.model.config.v1+json").has_value());
  EXPECT_FALSE(ClassifyLayerMediaType("application/vnd.cncf.model.weight.v1.tar+lz4").has_value());
  EXPECT_FALSE(ClassifyLayerMediaType("application/vnd.cncf.model.weight.v2.raw").has_value());
  EXPECT_FALSE(ClassifyLayerMediaType("application/octet-stream").has_value());
  EXPECT_FALSE(ClassifyLayerMediaType("").has_value());
}

TEST(MediaTypesTest, EveryBuiltMediaTypeClassifiesBackToItsKindAndEncoding) {
  for (LayerKind k : {LayerKind::kWeight, LayerKind::kWeightConfig, LayerKind::kDoc,
                      LayerKind::kCode, LayerKind::kDataset}) {
    for (LayerEncoding e : {LayerEncoding::kRaw, LayerEncoding::kTar, LayerEncoding::kTarGzip,
                            LayerEncoding::kTarZstd}) {
      const std::string mt = ModelLayerMediaType(k, e);
      EXPECT_EQ(mt, std::string("application/vnd.cncf.model.") + std::string(LayerKindName(k)) +
                        ".v1." + std::string(LayerEncodingName(e)));
      EXPECT_EQ(ClassifyLayerMediaType(mt), (LayerMediaTypeInfo{k, e})) << mt;
    }
  }
}

TEST(MediaTypesTest, ManifestAndIndexPredicatesCoverOciAndDocker) {
  EXPECT_TRUE(IsManifestMediaType(kOciManifestMediaType));
  EXPECT_TRUE(IsManifestMediaType(kDockerManifestMediaType));
  EXPECT_FALSE(IsManifestMediaType(kOciIndexMediaType));
  EXPECT_TRUE(IsIndexMediaType(kOciIndexMediaType));
  EXPECT_TRUE(IsIndexMediaType(kDockerManifestListMediaType));
  EXPECT_TRUE(IsModelArtifactType("application/vnd.cncf.model.manifest.v1+json"));
  EXPECT_TRUE(IsModelArtifactType("application/vnd.cnai.model.manifest.v1+json"));
  EXPECT_TRUE(IsModelConfigMediaType("application/vnd.cnai.model.config.v1+json"));
  EXPECT_FALSE(IsModelConfigMediaType(kOciConfigMediaType));
}

}  // namespace
}  // namespace modelfs
