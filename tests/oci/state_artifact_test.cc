#include "core/oci/state_artifact.h"

#include <string>

#include "core/oci/media_types.h"
#include "core/oci/modelpack.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

Descriptor ModelDescriptorFor(std::string_view manifest_bytes) {
  Descriptor d = DescribeBlob(kOciManifestMediaType, manifest_bytes);
  d.artifact_type = std::string(kModelArtifactType);
  return d;
}

StateConfig MakeConfig() {
  StateConfig c;
  c.name = "system-prompt";
  c.format = "llama.cpp";
  c.model = ModelDescriptorFor("{\"the\":\"model\"}");
  c.model.artifact_type.clear();
  c.tokens = 247;
  c.precision = "f16";
  return c;
}

TEST(StateConfigTest, SerializesCompactWithSortedKeys) {
  StateConfig c = MakeConfig();
  EXPECT_EQ(SerializeStateConfig(c),
            absl::StrCat("{\"format\":\"llama.cpp\",\"model\":{\"digest\":\"", c.model.digest.str(),
                         "\",\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
                         "\"size\":15},\"name\":\"system-prompt\",\"precision\":\"f16\","
                         "\"schemaVersion\":1,\"tokens\":247}"));
}

TEST(StateConfigTest, RoundTripsEveryField) {
  StateConfig c = MakeConfig();
  ASSERT_OK_AND_ASSIGN(StateConfig back, ParseStateConfig(SerializeStateConfig(c)));
  EXPECT_EQ(back, c);
}

TEST(StateConfigTest, TokensAndPrecisionAreOptional) {
  StateConfig c = MakeConfig();
  c.tokens.reset();
  c.precision.clear();
  const std::string bytes = SerializeStateConfig(c);
  EXPECT_THAT(bytes, ::testing::Not(HasSubstr("tokens")));
  ASSERT_OK_AND_ASSIGN(StateConfig back, ParseStateConfig(bytes));
  EXPECT_EQ(back, c);
}

// Each case: a config that must be refused, and the field the error must name.
struct Refusal {
  std::string json;
  std::string names;
};

TEST(StateConfigTest, RefusesWhatIsNotExactlyAV1Config) {
  const std::string model =
      "\"model\":{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:"
      "0000000000000000000000000000000000000000000000000000000000000000\",\"size\":1}";
  const std::vector<Refusal> cases = {
      {"[]", "state config"},
      {"{\"schemaVersion\":1,\"name\":\"a\",\"format\":\"f\"}", "state config.model"},
      {"{\"schemaVersion\":2,\"name\":\"a\",\"format\":\"f\"," + model + "}",
       "state config.schemaVersion"},
      {"{\"name\":\"a\",\"format\":\"f\"," + model + "}", "state config.schemaVersion"},
      {"{\"schemaVersion\":1,\"format\":\"f\"," + model + "}", "state config.name"},
      {"{\"schemaVersion\":1,\"name\":\"../x\",\"format\":\"f\"," + model + "}",
       "state config.name"},
      {"{\"schemaVersion\":1,\"name\":\"a\",\"format\":\"\"," + model + "}", "state config.format"},
      {"{\"schemaVersion\":1,\"name\":\"a\",\"format\":\"a b\"," + model + "}",
       "state config.format"},
      {"{\"schemaVersion\":1,\"name\":\"a\",\"format\":\"f\",\"tokens\":-1," + model + "}",
       "state config.tokens"},
      {"{\"schemaVersion\":1,\"name\":\"a\",\"format\":\"f\",\"tokens\":1.5," + model + "}",
       "state config.tokens"},
      {"{\"schemaVersion\":1,\"name\":\"a\",\"format\":\"f\",\"precision\":7," + model + "}",
       "state config.precision"},
      {"{\"schemaVersion\":1,\"name\":\"a\",\"format\":\"f\",\"extra\":true," + model + "}",
       "state config.extra: unknown field"},
      {"{\"schemaVersion\":1,\"name\":\"a\",\"format\":\"f\",\"model\":{\"mediaType\":"
       "\"text/plain\",\"digest\":\"sha256:"
       "0000000000000000000000000000000000000000000000000000000000000000\",\"size\":1}}",
       "state config.model.mediaType"},
      {"{\"schemaVersion\":1,\"name\":\"a\",\"format\":\"f\",\"model\":{\"mediaType\":"
       "\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:00\",\"size\":1}}",
       "digest"},
      {"{\"schemaVersion\":1,\"name\":\"a\",\"format\":\"f\",\"model\":{\"mediaType\":"
       "\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:"
       "0000000000000000000000000000000000000000000000000000000000000000\",\"size\":1,\"x\":1}}",
       "state config.model.x: unknown field"},
  };
  for (const Refusal& r : cases) {
    EXPECT_THAT(ParseStateConfig(r.json),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(r.names)))
        << r.json;
  }
}

TEST(StateConfigTest, RefusesAnOversizedConfigBeforeParsing) {
  std::string big = "{\"pad\":\"" + std::string(kMaxStateConfigBytes, 'x') + "\"}";
  EXPECT_THAT(ParseStateConfig(big),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than 65536")));
}

TEST(StateNameTest, AllowsTagCharactersOnly) {
  EXPECT_OK(CheckStateName("system-prompt_v1.2"));
  EXPECT_THAT(CheckStateName(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckStateName("a/b"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckStateName(".hidden"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckStateName(std::string(129, 'a')), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StateManifestTest, PointsAtItsModelAndNamesEachFile) {
  StateConfig c = MakeConfig();
  Descriptor model = ModelDescriptorFor("{\"the\":\"model\"}");
  const std::string config = SerializeStateConfig(c);
  std::vector<StateFile> files = {{"prompt.state", Digest::Of("abc"), 3},
                                  {"notes/README.md", Digest::Of("hi\n"), 3}};
  ASSERT_OK_AND_ASSIGN(Manifest s, BuildStateManifest(config, model, files));
  EXPECT_EQ(s.artifact_type, kStateArtifactType);
  EXPECT_EQ(s.config.media_type, kStateConfigMediaType);
  EXPECT_EQ(s.config.digest, Digest::Of(config));
  ASSERT_TRUE(s.subject.has_value());
  EXPECT_EQ(s.subject->digest, model.digest);
  EXPECT_EQ(s.subject->artifact_type, kModelArtifactType);
  EXPECT_EQ(s.annotations.at(std::string(kAnnotationStateName)), "system-prompt");
  ASSERT_EQ(s.layers.size(), 2u);
  EXPECT_EQ(s.layers[0].media_type, kStateLayerMediaType);
  EXPECT_EQ(s.layers[0].annotations.at(std::string(kAnnotationFilepath)), "prompt.state");
  EXPECT_EQ(s.layers[1].annotations.at(std::string(kAnnotationFilepath)), "notes/README.md");
  EXPECT_TRUE(IsStateManifest(s));
  EXPECT_FALSE(IsModelManifest(s));
  EXPECT_OK(CheckStateMatchesSubject(s, c));
}

TEST(StateManifestTest, ParsesBackAsAStateWhoseLayersMountAsRawFiles) {
  StateConfig c = MakeConfig();
  Descriptor model = ModelDescriptorFor("{\"the\":\"model\"}");
  ASSERT_OK_AND_ASSIGN(Manifest s, BuildStateManifest(SerializeStateConfig(c), model,
                                                      {{"prompt.state", Digest::Of("abc"), 3}}));
  ASSERT_OK_AND_ASSIGN(Manifest back, ParseManifest(SerializeManifest(s)));
  EXPECT_EQ(back, s);
  ASSERT_OK_AND_ASSIGN(std::vector<ModelLayer> layers, ResolveModelLayers(back));
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].path, "prompt.state");
  EXPECT_EQ(layers[0].encoding, LayerEncoding::kRaw);
}

TEST(StateManifestTest, RefusesAConfigNamingAnotherModel) {
  StateConfig c = MakeConfig();
  Descriptor other = ModelDescriptorFor("{\"another\":\"model\"}");
  EXPECT_THAT(BuildStateManifest(SerializeStateConfig(c), other, {{"s", Digest::Of("a"), 1}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names model")));
}

TEST(StateManifestTest, RefusesUnsafeDuplicateReservedOrNoFiles) {
  StateConfig c = MakeConfig();
  const std::string config = SerializeStateConfig(c);
  EXPECT_THAT(BuildStateManifest(config, c.model, {{"../x", Digest::Of("a"), 1}}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(
      BuildStateManifest(config, c.model, {{"a", Digest::Of("a"), 1}, {"a", Digest::Of("b"), 1}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duplicate")));
  EXPECT_THAT(BuildStateManifest(config, c.model, {{".modelinfo.json", Digest::Of("a"), 1}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reserved")));
  EXPECT_THAT(BuildStateManifest(config, c.model, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least one file")));
}

TEST(StateManifestTest, ASubjectOtherThanTheConfigsModelIsDataLoss) {
  StateConfig c = MakeConfig();
  ASSERT_OK_AND_ASSIGN(Manifest s, BuildStateManifest(SerializeStateConfig(c), c.model,
                                                      {{"s", Digest::Of("a"), 1}}));
  s.subject->digest = Digest::Of("someone else");
  EXPECT_THAT(CheckStateMatchesSubject(s, c),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("is not the model")));
  s.subject.reset();
  EXPECT_THAT(CheckStateMatchesSubject(s, c),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("no subject")));
}

}  // namespace
}  // namespace modelfs
