#include "core/oci/manifest.h"

#include <string>

#include "core/oci/media_types.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

const std::string kA(64, 'a');
const std::string kB(64, 'b');
const std::string kC(64, 'c');

std::string ModelManifestJson() {
  return R"({
  "schemaVersion": 2,
  "mediaType": "application/vnd.oci.image.manifest.v1+json",
  "artifactType": "application/vnd.cncf.model.manifest.v1+json",
  "config": {"mediaType": "application/vnd.cncf.model.config.v1+json",
             "digest": "sha256:)" +
         kA + R"(", "size": 301},
  "layers": [
    {"mediaType": "application/vnd.cncf.model.weight.v1.raw", "digest": "sha256:)" +
         kB + R"(",
     "size": 144811360,
     "annotations": {"org.cncf.model.filepath": "model.gguf",
                     "org.opencontainers.image.title": "model.gguf"}}
  ],
  "annotations": {"org.opencontainers.image.created": "2025-01-01T00:00:00Z"}
})";
}

TEST(ParseManifestTest, ReadsEveryFieldOfAModelPackManifest) {
  ASSERT_OK_AND_ASSIGN(Manifest m, ParseManifest(ModelManifestJson()));
  EXPECT_EQ(m.schema_version, 2);
  EXPECT_EQ(m.media_type, kOciManifestMediaType);
  EXPECT_EQ(m.artifact_type, kModelArtifactType);
  EXPECT_EQ(m.config.media_type, kModelConfigMediaType);
  EXPECT_EQ(m.config.digest.str(), "sha256:" + kA);
  EXPECT_EQ(m.config.size, 301u);
  ASSERT_EQ(m.layers.size(), 1u);
  EXPECT_EQ(m.layers[0].size, 144811360u);
  EXPECT_EQ(*m.layers[0].Annotation("org.cncf.model.filepath"), "model.gguf");
  EXPECT_EQ(m.layers[0].Annotation("missing"), nullptr);
  EXPECT_FALSE(m.subject.has_value());
  EXPECT_EQ(m.annotations.at("org.opencontainers.image.created"), "2025-01-01T00:00:00Z");
}

TEST(ParseManifestTest, SerializationIsCompactSortedAndStable) {
  ASSERT_OK_AND_ASSIGN(Manifest m, ParseManifest(ModelManifestJson()));
  const std::string once = SerializeManifest(m);
  EXPECT_EQ(once.find('\n'), std::string::npos);
  EXPECT_EQ(once.substr(0, 58), R"({"annotations":{"org.opencontainers.image.created":"2025-0)");
  ASSERT_OK_AND_ASSIGN(Manifest again, ParseManifest(once));
  EXPECT_EQ(again, m);
  EXPECT_EQ(SerializeManifest(again), once);
  EXPECT_EQ(Digest::Of(SerializeManifest(again)), Digest::Of(once));
}

TEST(ParseManifestTest, NamesTheLayerWithABadDigest) {
  std::string json = ModelManifestJson();
  json.replace(json.find("sha256:" + kB), 7 + 64, "sha256:XYZ");
  EXPECT_THAT(ParseManifest(json),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("manifest.layers[0].digest")));
}

TEST(ParseManifestTest, RefusesNegativeSizes) {
  std::string json = ModelManifestJson();
  json.replace(json.find("144811360"), 9, "-1");
  EXPECT_THAT(ParseManifest(json), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("manifest.layers[0].size: negative size")));
}

TEST(ParseManifestTest, RefusesFractionalSizes) {
  std::string json = ModelManifestJson();
  json.replace(json.find("301"), 3, "3.5");
  EXPECT_THAT(ParseManifest(json),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("manifest.config.size")));
}

TEST(ParseManifestTest, RequiresConfig) {
  EXPECT_THAT(ParseManifest(R"({"schemaVersion":2,"layers":[]})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("manifest.config: required field missing")));
}

TEST(ParseManifestTest, RequiresSchemaVersionTwo) {
  EXPECT_THAT(ParseManifest(R"({"schemaVersion":1})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("manifest.schemaVersion: is 1, want 2")));
}

TEST(ParseManifestTest, SaysWhenTheDocumentIsAnIndex) {
  EXPECT_THAT(
      ParseManifest(
          R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]})"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("use ParseIndex")));
}

TEST(ParseManifestTest, RefusesMalformedJson) {
  EXPECT_THAT(ParseManifest("{\"schemaVersion\":2,"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not valid JSON")));
  EXPECT_THAT(ParseManifest("[]"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a JSON object")));
}

TEST(ParseManifestTest, AcceptsDockerSchema2) {
  const std::string json = R"({"schemaVersion":2,
    "mediaType":"application/vnd.docker.distribution.manifest.v2+json",
    "config":{"mediaType":"application/vnd.docker.container.image.v1+json","size":1469,
              "digest":"sha256:)" +
                           kA + R"("},
    "layers":[{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","size":2811969,
               "digest":"sha256:)" +
                           kB + R"("}]})";
  ASSERT_OK_AND_ASSIGN(Manifest m, ParseManifest(json));
  EXPECT_EQ(m.media_type, kDockerManifestMediaType);
  EXPECT_EQ(m.layers[0].size, 2811969u);
}

TEST(ParseManifestTest, ReadsSubject) {
  const std::string json = R"({"schemaVersion":2,
    "config":{"mediaType":"application/vnd.oci.empty.v1+json","size":2,
              "digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
              "data":"e30="},
    "layers":[],
    "subject":{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":7,
               "digest":"sha256:)" +
                           kC + R"("}})";
  ASSERT_OK_AND_ASSIGN(Manifest m, ParseManifest(json));
  ASSERT_TRUE(m.subject.has_value());
  EXPECT_EQ(m.subject->digest.str(), "sha256:" + kC);
  EXPECT_EQ(m.config.data, std::optional<std::string>("{}"));
  EXPECT_EQ(EffectiveArtifactType(m), kOciEmptyMediaType);
}

TEST(ParseManifestTest, EmbeddedDataMustMatchItsDigest) {
  const std::string json = R"({"schemaVersion":2,
    "config":{"mediaType":"application/vnd.oci.empty.v1+json","size":2,
              "digest":"sha256:)" +
                           kA + R"(","data":"e30="},"layers":[]})";
  EXPECT_THAT(ParseManifest(json),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("manifest.config.data")));
}

TEST(ParseIndexTest, ReadsPlatformsAndArtifactTypes) {
  const std::string json =
      R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json",
    "manifests":[
      {"mediaType":"application/vnd.oci.image.manifest.v1+json","size":500,"digest":"sha256:)" +
      kA + R"(",
       "platform":{"architecture":"arm64","os":"linux","variant":"v8"}},
      {"mediaType":"application/vnd.oci.image.manifest.v1+json","size":600,"digest":"sha256:)" +
      kB + R"(",
       "artifactType":"application/vnd.modelfs.volume.v1+json"}]})";
  ASSERT_OK_AND_ASSIGN(Index index, ParseIndex(json));
  ASSERT_EQ(index.manifests.size(), 2u);
  ASSERT_TRUE(index.manifests[0].platform.has_value());
  EXPECT_EQ(index.manifests[0].platform->architecture, "arm64");
  EXPECT_EQ(index.manifests[0].platform->variant, "v8");
  EXPECT_EQ(index.manifests[1].artifact_type, kVolumeImageArtifactType);
  ASSERT_OK_AND_ASSIGN(Index again, ParseIndex(SerializeIndex(index)));
  EXPECT_EQ(again, index);
}

TEST(ParseIndexTest, NamesTheBadEntry) {
  const std::string json = R"({"schemaVersion":2,"manifests":[{"mediaType":"x","size":1}]})";
  EXPECT_THAT(ParseIndex(json), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("index.manifests[0].digest: required")));
}

TEST(ReferrersFallbackTagTest, IsAlgorithmDashHex) {
  ASSERT_OK_AND_ASSIGN(Digest d, Digest::Parse("sha256:" + kC));
  EXPECT_EQ(ReferrersFallbackTag(d), "sha256-" + kC);
}

TEST(DescribeBlobTest, GivesDigestAndSizeOfTheBytes) {
  Descriptor d = DescribeBlob(kOciEmptyMediaType, kOciEmptyJson);
  EXPECT_EQ(d.digest.str(),
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
  EXPECT_EQ(d.size, 2u);
  EXPECT_EQ(
      SerializeDescriptor(d),
      R"({"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","mediaType":"application/vnd.oci.empty.v1+json","size":2})");
}

}  // namespace
}  // namespace modelfs
