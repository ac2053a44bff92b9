#include "core/oci/modelpack.h"

#include <string>

#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

Digest D(char c) { return *Digest::Parse("sha256:" + std::string(64, c)); }

ModelPackConfig SampleConfig() {
  ModelPackConfig c;
  c.descriptor.name = "SmolLM2-135M-Instruct";
  c.descriptor.family = "llama";
  c.descriptor.licenses = {"Apache-2.0"};
  c.descriptor.revision = "12fd25f77366fa6b3b4b768ec3050bf629380bac";
  c.config.architecture = "transformer";
  c.config.format = "gguf";
  c.config.param_size = "134.5M";
  c.config.precision = "q8_0";
  c.config.quantization = "gguf";
  c.modelfs.diff_ids = {D('b')};
  return c;
}

TEST(ModelPackConfigTest, SerializesSpecFieldNamesWithoutTimestamp) {
  EXPECT_EQ(
      SerializeModelPackConfig(SampleConfig()),
      R"({"config":{"architecture":"transformer","format":"gguf","paramSize":"134.5M",)"
      R"("precision":"q8_0","quantization":"gguf"},)"
      R"("descriptor":{"family":"llama","licenses":["Apache-2.0"],)"
      R"("name":"SmolLM2-135M-Instruct","revision":"12fd25f77366fa6b3b4b768ec3050bf629380bac"},)"
      R"("modelfs":{"diffIds":["sha256:)" +
          std::string(64, 'b') + R"("],"type":"layers"}})");
}

TEST(ModelPackConfigTest, RoundTripsIncludingCapabilitiesAndCreatedAt) {
  ModelPackConfig c = SampleConfig();
  c.descriptor.created_at = "2025-03-01T12:00:00Z";
  ModelCapabilities cap;
  cap.input_types = {"text"};
  cap.output_types = {"text"};
  cap.tool_usage = true;
  cap.languages = {"en", "fr"};
  c.config.capabilities = cap;
  ASSERT_OK_AND_ASSIGN(ModelPackConfig back, ParseModelPackConfig(SerializeModelPackConfig(c)));
  EXPECT_EQ(back, c);
}

TEST(ModelPackConfigTest, ParsesALegacyModctlConfig) {
  const std::string json =
      R"({"descriptor":{"createdAt":"2025-02-10T08:00:00.123Z","family":"qwen2",
    "name":"Qwen2.5-0.5B","docURL":"https://huggingface.co/Qwen"},
    "config":{"architecture":"transformer","format":"safetensors","paramSize":"0.5b","precision":"bf16",
              "architecture_config":{"type":"transformer","numLayers":24}},
    "modelfs":{"type":"layers","diffIds":["sha256:)" +
      std::string(64, 'c') + R"("]}})";
  ASSERT_OK_AND_ASSIGN(ModelPackConfig c, ParseModelPackConfig(json));
  EXPECT_EQ(c.descriptor.created_at, std::optional<std::string>("2025-02-10T08:00:00.123Z"));
  EXPECT_EQ(c.descriptor.doc_url, "https://huggingface.co/Qwen");
  EXPECT_EQ(c.config.precision, "bf16");
  EXPECT_EQ(c.modelfs.diff_ids, std::vector<Digest>{D('c')});
}

TEST(ModelPackConfigTest, NamesTheBadDiffId) {
  EXPECT_THAT(ParseModelPackConfig(R"({"modelfs":{"type":"layers","diffIds":["sha256:zz"]}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("config.modelfs.diffIds[0]")));
}

TEST(ModelPackConfigTest, RequiresLayersType) {
  EXPECT_THAT(ParseModelPackConfig(R"({"modelfs":{"type":"tarballs","diffIds":[]}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("want 'layers'")));
}

TEST(ModelPackConfigTest, NamesWrongTypedField) {
  EXPECT_THAT(ParseModelPackConfig(R"({"descriptor":{"name":7},"modelfs":{"type":"layers"}})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("config.descriptor.name: not a string")));
}

TEST(ClassifyFileTest, SortsHuggingFaceRepositoryFiles) {
  const std::vector<std::pair<std::string, LayerKind>> cases = {
      {"model-00001-of-00004.safetensors", LayerKind::kWeight},
      {"SmolLM2-135M-Instruct-Q8_0.gguf", LayerKind::kWeight},
      {"pytorch_model.bin", LayerKind::kWeight},
      {"onnx/model.onnx", LayerKind::kWeight},
      {"consolidated.00.pth", LayerKind::kWeight},
      {"config.json", LayerKind::kWeightConfig},
      {"generation_config.json", LayerKind::kWeightConfig},
      {"tokenizer.json", LayerKind::kWeightConfig},
      {"tokenizer_config.json", LayerKind::kWeightConfig},
      {"tokenizer.model", LayerKind::kWeightConfig},
      {"special_tokens_map.json", LayerKind::kWeightConfig},
      {"model.safetensors.index.json", LayerKind::kWeightConfig},
      {"vocab.txt", LayerKind::kWeightConfig},
      {"merges.txt", LayerKind::kWeightConfig},
      {"cl100k_base.tiktoken", LayerKind::kWeightConfig},
      {"chat_template.jinja", LayerKind::kWeightConfig},
      {"README.md", LayerKind::kDoc},
      {"LICENSE", LayerKind::kDoc},
      {"docs/NOTES.txt", LayerKind::kDoc},
      {".gitattributes", LayerKind::kDoc},
      {"modeling_qwen.py", LayerKind::kCode},
      {"scripts/convert.sh", LayerKind::kCode},
      {"data/train.parquet", LayerKind::kDataset},
  };
  for (const auto& [path, kind] : cases) {
    EXPECT_EQ(ClassifyFile(path), kind) << path << " -> " << LayerKindName(ClassifyFile(path));
  }
}

TEST(BuildModelManifestTest, AnnotatesEachLayerWithPathTitleAndMetadata) {
  const std::string config = SerializeModelPackConfig(SampleConfig());
  std::vector<ModelLayerInput> layers = {
      {"model.gguf", D('b'), 144811360, LayerKind::kWeight, LayerEncoding::kRaw, ""},
      {"README.md", D('c'), 12, LayerKind::kDoc, LayerEncoding::kRaw, ""},
  };
  ASSERT_OK_AND_ASSIGN(Manifest m, BuildModelManifest(config, layers));
  EXPECT_EQ(m.artifact_type, "application/vnd.cncf.model.manifest.v1+json");
  EXPECT_EQ(m.config.media_type, "application/vnd.cncf.model.config.v1+json");
  EXPECT_EQ(m.config.digest, Digest::Of(config));
  EXPECT_EQ(m.config.size, config.size());
  ASSERT_EQ(m.layers.size(), 2u);
  EXPECT_EQ(m.layers[0].media_type, "application/vnd.cncf.model.weight.v1.raw");
  EXPECT_EQ(m.layers[1].media_type, "application/vnd.cncf.model.doc.v1.raw");
  EXPECT_EQ(m.layers[0].annotations,
            (std::map<std::string, std::string>{
                {"org.cncf.model.file.metadata+json",
                 R"({"gid":0,"mode":420,"mtime":"1970-01-01T00:00:00Z","name":"model.gguf",)"
                 R"("size":144811360,"typeflag":48,"uid":0})"},
                {"org.cncf.model.filepath", "model.gguf"},
                {"org.opencontainers.image.title", "model.gguf"}}));
  ASSERT_OK_AND_ASSIGN(Manifest again, BuildModelManifest(config, layers));
  EXPECT_EQ(SerializeManifest(again), SerializeManifest(m));
}

TEST(BuildModelManifestTest, RefusesUnsafePaths) {
  std::vector<ModelLayerInput> layers = {
      {"../evil.gguf", D('b'), 1, LayerKind::kWeight, LayerEncoding::kRaw, ""}};
  EXPECT_THAT(BuildModelManifest("{}", layers),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("../evil.gguf")));
}

TEST(BuildModelManifestTest, RefusesDuplicatePaths) {
  std::vector<ModelLayerInput> layers = {
      {"a.gguf", D('b'), 1, LayerKind::kWeight, LayerEncoding::kRaw, ""},
      {"a.gguf", D('c'), 1, LayerKind::kWeight, LayerEncoding::kRaw, ""}};
  EXPECT_THAT(BuildModelManifest("{}", layers),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duplicate path")));
}

TEST(ResolveModelLayersTest, ReadsCncfLegacyAndTitleOnlyPaths) {
  Manifest m;
  m.artifact_type = std::string(kLegacyModelArtifactType);
  Descriptor a{"application/vnd.cncf.model.weight.v1.raw",
               D('a'),
               10,
               {},
               {{"org.cncf.model.filepath", "./w/a.safetensors"}}};
  Descriptor b{"application/vnd.cnai.model.weight.config.v1.tar",
               D('b'),
               2048,
               {},
               {{"org.cnai.model.filepath", "cfg"}}};
  Descriptor c{
      "application/octet-stream", D('c'), 3, {}, {{"org.opencontainers.image.title", "notes.txt"}}};
  m.layers = {a, b, c};
  EXPECT_TRUE(IsModelManifest(m));
  ASSERT_OK_AND_ASSIGN(std::vector<ModelLayer> layers, ResolveModelLayers(m));
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(layers[0].path, "w/a.safetensors");
  EXPECT_EQ(layers[0].kind, LayerKind::kWeight);
  EXPECT_EQ(layers[1].path, "cfg");
  EXPECT_EQ(layers[1].kind, LayerKind::kWeightConfig);
  EXPECT_EQ(layers[1].encoding, LayerEncoding::kTar);
  EXPECT_EQ(layers[2].path, "notes.txt");
  EXPECT_EQ(layers[2].kind, LayerKind::kDoc);
  EXPECT_EQ(layers[2].encoding, LayerEncoding::kRaw);
}

// Docker model artifacts: files laid out as docker/model-runner's bundle lays them out.
TEST(ResolveModelLayersTest, NamesDockerV01LayersAsTheDockerToolsLayThemOut) {
  Manifest m;
  m.config.media_type = "application/vnd.docker.ai.model.config.v0.1+json";
  auto layer = [](std::string mt, char c) { return Descriptor{std::move(mt), D(c), 10}; };
  m.layers = {layer("application/vnd.docker.ai.gguf.v3", 'a'),
              layer("application/vnd.docker.ai.gguf.v3", 'b'),
              layer("application/vnd.docker.ai.license", 'c'),
              layer("application/vnd.docker.ai.mmproj", 'd'),
              layer("application/vnd.docker.ai.chat.template.jinja", 'e'),
              layer("application/vnd.docker.ai.license", 'f'),
              layer("application/vnd.docker.ai.dir.tar", '1')};
  EXPECT_TRUE(IsModelManifest(m));
  ASSERT_OK_AND_ASSIGN(std::vector<ModelLayer> layers, ResolveModelLayers(m));
  std::vector<std::string> paths;
  for (const ModelLayer& l : layers) paths.push_back(l.path);
  EXPECT_THAT(paths, ElementsAre("model-00001-of-00002.gguf", "model-00002-of-00002.gguf",
                                 "LICENSE", "model.mmproj", "template.jinja", "LICENSE-2", ""));
  EXPECT_EQ(layers[0].kind, LayerKind::kWeight);
  EXPECT_EQ(layers[2].kind, LayerKind::kDoc);
  EXPECT_EQ(layers[4].kind, LayerKind::kWeightConfig);
  EXPECT_EQ(layers[6].encoding, LayerEncoding::kTar);
}

TEST(ResolveModelLayersTest, NamesASingleDockerSafetensorsLayerModelSafetensors) {
  Manifest m;
  m.config.media_type = "application/vnd.docker.ai.model.config.v0.1+json";
  m.layers = {Descriptor{"application/vnd.docker.ai.safetensors", D('a'), 10}};
  ASSERT_OK_AND_ASSIGN(std::vector<ModelLayer> layers, ResolveModelLayers(m));
  EXPECT_EQ(layers[0].path, "model.safetensors");
}

TEST(ResolveModelLayersTest, KeepsTheFilepathAnnotationsOfDockerV02Layers) {
  Manifest m;
  m.config.media_type = "application/vnd.docker.ai.model.config.v0.2+json";
  m.layers = {Descriptor{"application/vnd.docker.ai.safetensors",
                         D('a'),
                         10,
                         {},
                         {{"org.cncf.model.filepath", "weights/model-00001-of-00001.safetensors"}}},
              Descriptor{"application/vnd.docker.ai.model.file",
                         D('b'),
                         10,
                         {},
                         {{"org.cncf.model.filepath", "tokenizer.json"}}}};
  ASSERT_OK_AND_ASSIGN(std::vector<ModelLayer> layers, ResolveModelLayers(m));
  EXPECT_EQ(layers[0].path, "weights/model-00001-of-00001.safetensors");
  EXPECT_EQ(layers[1].path, "tokenizer.json");
}

TEST(ResolveModelLayersTest, DockerNamesApplyOnlyToDockerModelArtifacts) {
  Manifest m;
  m.artifact_type = std::string(kModelArtifactType);
  m.layers = {Descriptor{"application/vnd.docker.ai.gguf.v3", D('a'), 10}};
  EXPECT_THAT(ResolveModelLayers(m),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("raw layer has no")));
}

TEST(ResolveModelLayersTest, RefusesAnAbsolutePathAnnotationNamingTheLayer) {
  Manifest m;
  m.layers = {Descriptor{"application/vnd.cncf.model.weight.v1.raw",
                         D('a'),
                         10,
                         {},
                         {{"org.cncf.model.filepath", "/etc/shadow"}}}};
  EXPECT_THAT(ResolveModelLayers(m), StatusIs(absl::StatusCode::kPermissionDenied,
                                              HasSubstr("manifest.layers[0] (sha256:aaaa")));
}

TEST(ResolveModelLayersTest, RequiresAPathForRawLayers) {
  Manifest m;
  m.layers = {Descriptor{"application/vnd.cncf.model.weight.v1.raw", D('a'), 10}};
  EXPECT_THAT(ResolveModelLayers(m),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("raw layer has no")));
}

TEST(ResolveModelLayersTest, RefusesTwoRawLayersAtOnePath) {
  Manifest m;
  m.layers = {Descriptor{"application/vnd.cncf.model.doc.v1.raw",
                         D('a'),
                         1,
                         {},
                         {{"org.cncf.model.filepath", "x"}}},
              Descriptor{"application/vnd.cncf.model.doc.v1.raw",
                         D('b'),
                         1,
                         {},
                         {{"org.cncf.model.filepath", "./x"}}}};
  EXPECT_THAT(ResolveModelLayers(m),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("used by an earlier layer")));
}

TEST(ResolveModelLayersTest, RefusesALayerDeclaringAnAbsurdSizeNamingItsDigestPathAndSize) {
  Manifest m;
  m.layers = {Descriptor{"application/vnd.cncf.model.weight.v1.raw",
                         D('a'),
                         9223372036854775807ull,
                         {},
                         {{"org.cncf.model.filepath", "model.gguf"}}}};
  EXPECT_THAT(ResolveModelLayers(m),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("manifest.layers[0] (sha256:aaaa" + std::string(60, 'a') +
                                 ") 'model.gguf': declared size 9223372036854775807 bytes is "
                                 "over the limit of 4398046511104 bytes (4 TiB) per layer")));
}

TEST(ResolveModelLayersTest, AcceptsALayerOfExactlyTheSizeLimit) {
  Manifest m;
  m.layers = {Descriptor{"application/vnd.cncf.model.weight.v1.raw",
                         D('a'),
                         kMaxModelLayerBytes,
                         {},
                         {{"org.cncf.model.filepath", "model.gguf"}}}};
  ASSERT_OK_AND_ASSIGN(std::vector<ModelLayer> layers, ResolveModelLayers(m));
  EXPECT_EQ(layers[0].descriptor.size, 4398046511104ull);
}

TEST(ResolveModelLayersTest, RefusesARawLayerAtTheModelInfoPathTheMountServes) {
  Manifest m;
  m.layers = {Descriptor{"application/vnd.cncf.model.doc.v1.raw",
                         D('a'),
                         2,
                         {},
                         {{"org.cncf.model.filepath", "./.modelinfo.json"}}}};
  EXPECT_THAT(ResolveModelLayers(m),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("path '.modelinfo.json' is reserved: modelfs serves its own "
                                 ".modelinfo.json at the root of a mounted model")));
}

TEST(CheckNotReservedModelPathTest, RefusesPathsUnderTheModelInfoNameButNotLookalikes) {
  EXPECT_THAT(CheckNotReservedModelPath(".modelinfo.json/x", "layer 1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layer 1: path '.modelinfo.json/x' is reserved")));
  EXPECT_OK(CheckNotReservedModelPath(".modelinfo.json.bak", "layer 1"));
  EXPECT_OK(CheckNotReservedModelPath("sub/.modelinfo.json", "layer 1"));
}

TEST(FileMetadataTest, RoundTrips) {
  FileMetadata fm{"config.json", 0600, 1000, 1000, 5, "2024-01-01T00:00:00Z", '0'};
  ASSERT_OK_AND_ASSIGN(FileMetadata back, ParseFileMetadata(SerializeFileMetadata(fm)));
  EXPECT_EQ(back, fm);
}

}  // namespace
}  // namespace modelfs
