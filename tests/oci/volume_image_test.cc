#include "core/oci/volume_image.h"

#include <string>

#include "core/oci/media_types.h"
#include "core/oci/modelpack.h"
#include "core/oci/tar.h"
#include "tests/testing/compress.h"
#include "tests/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t k64K = 64 << 10;

struct Fixture {
  std::string weights;
  std::string readme;
  std::string config_blob;
  Manifest model;
  std::string model_json;
  Descriptor model_descriptor;
  VolumeImageInput input;
};

Fixture MakeFixture() {
  Fixture f;
  f.weights.resize(3 * k64K + 123);
  for (size_t i = 0; i < f.weights.size(); ++i) f.weights[i] = static_cast<char>(i * 7);
  f.readme = "# tiny model\n";
  ModelPackConfig config;
  config.descriptor.name = "tiny";
  config.config.format = "gguf";
  config.modelfs.diff_ids = {Digest::Of(f.weights), Digest::Of(f.readme)};
  f.config_blob = SerializeModelPackConfig(config);
  std::vector<ModelLayerInput> layers = {
      {"tiny.gguf", Digest::Of(f.weights), f.weights.size(), LayerKind::kWeight,
       LayerEncoding::kRaw, ""},
      {"README.md", Digest::Of(f.readme), f.readme.size(), LayerKind::kDoc, LayerEncoding::kRaw,
       ""},
  };
  f.model = *BuildModelManifest(f.config_blob, layers);
  f.model_json = SerializeManifest(f.model);
  f.model_descriptor = DescribeBlob(kOciManifestMediaType, f.model_json);
  f.model_descriptor.artifact_type = std::string(kModelArtifactType);
  f.input.model_manifest = f.model_descriptor;
  f.input.model = f.model;
  f.input.repository = "registry.local:5000/models/tiny";
  f.input.chunk_indexes = {BuildChunkIndex(f.weights, k64K)};
  return f;
}

TEST(BuildVolumeImageTest, LayerHoldsPointerReadmeAndChunkIndexes) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries, IndexTarBytes(v.layer));
  std::vector<std::string> paths;
  for (const TarEntry& e : entries) paths.push_back(e.path);
  const std::string idx_path =
      ".modelfs/chunks/" + std::string(Digest::Of(f.weights).hex()) + ".idx";
  EXPECT_EQ(paths, (std::vector<std::string>{".modelfs", ".modelfs/README.txt",
                                             ".modelfs/model.json", ".modelfs/chunks", idx_path}));
  EXPECT_LT(v.layer.size(), 16u * 1024);
  const std::string readme = v.layer.substr(entries[1].data_offset, entries[1].size);
  EXPECT_THAT(readme, HasSubstr("only a pointer"));
  EXPECT_THAT(readme, HasSubstr("modelfs snapshotter is not installed"));
  EXPECT_THAT(readme,
              HasSubstr("registry.local:5000/models/tiny@" + f.model_descriptor.digest.str()));
}

TEST(BuildVolumeImageTest, PointerReadmeGivesAdviceByContainerdVersion) {
  const std::string readme = VolumeReadme(MakeFixture().model_descriptor, "r/m");
  // 2.1+: the export, and no disable_snapshot_annotations (it would leave the transfer service).
  EXPECT_THAT(readme, HasSubstr("containerd 2.1 or later (what Kubernetes image volumes need)"));
  EXPECT_THAT(readme, HasSubstr("enable_remote_snapshot_annotations = \"true\""));
  EXPECT_THAT(readme, HasSubstr("do NOT set\n     disable_snapshot_annotations there."));
  // 1.6/1.7/2.0: the CRI plugin's setting.
  EXPECT_THAT(readme, HasSubstr("containerd 1.6, 1.7 and 2.0: in the CRI plugin set snapshotter "
                                "= \"modelfs\"\n     and disable_snapshot_annotations = false."));
}

TEST(BuildVolumeImageTest, ModelJsonNamesModelLayersAndIndexDigests) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  const std::string idx_bytes = SerializeChunkIndex(f.input.chunk_indexes[0]);
  const std::string w = Digest::Of(f.weights).str();
  const std::string expected =
      R"({"layers":[{"chunkIndex":{"chunkSize":65536,"digest":")" + Digest::Of(idx_bytes).str() +
      R"(","path":".modelfs/chunks/)" + std::string(Digest::Of(f.weights).hex()) +
      R"(.idx"},"digest":")" + w + R"(","mediaType":"application/vnd.cncf.model.weight.v1.raw",)" +
      R"("path":"tiny.gguf","size":196731},{"digest":")" + Digest::Of(f.readme).str() +
      R"(","mediaType":"application/vnd.cncf.model.doc.v1.raw","path":"README.md","size":13}],)" +
      R"("manifest":{"artifactType":"application/vnd.cncf.model.manifest.v1+json","digest":")" +
      f.model_descriptor.digest.str() +
      R"(","mediaType":"application/vnd.oci.image.manifest.v1+json",)" + R"("size":)" +
      std::to_string(f.model_json.size()) +
      R"(},"repository":"registry.local:5000/models/tiny","schemaVersion":1})";
  EXPECT_EQ(SerializeVolumeModelJson(v.model_info), expected);
}

TEST(BuildVolumeImageTest, ConfigIsAnImageConfigWhoseDiffIdIsTheLayer) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  EXPECT_EQ(v.config, R"({"architecture":"amd64","os":"linux","rootfs":{"diff_ids":[")" +
                          Digest::Of(v.layer).str() + R"("],"type":"layers"}})");
  EXPECT_EQ(v.config_descriptor.media_type, kOciConfigMediaType);
  EXPECT_EQ(v.config_descriptor.digest, Digest::Of(v.config));
}

TEST(BuildVolumeImageTest, ManifestPointsAtTheModelAsSubjectWithSnapshotLabels) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  ASSERT_OK_AND_ASSIGN(Manifest m, ParseManifest(v.manifest_json));
  EXPECT_EQ(m, v.manifest);
  EXPECT_EQ(m.media_type, kOciManifestMediaType);
  EXPECT_EQ(m.artifact_type, kVolumeImageArtifactType);
  ASSERT_TRUE(m.subject.has_value());
  EXPECT_EQ(m.subject->digest, f.model_descriptor.digest);
  EXPECT_EQ(m.subject->size, f.model_json.size());
  ASSERT_EQ(m.layers.size(), 1u);
  EXPECT_EQ(m.layers[0].media_type, kOciLayerTarMediaType);
  EXPECT_EQ(m.layers[0].digest, Digest::Of(v.layer));
  EXPECT_EQ(
      m.layers[0].annotations,
      (std::map<std::string, std::string>{
          {"containerd.io/snapshot/modelfs.model", f.model_descriptor.digest.str()},
          {"containerd.io/snapshot/modelfs.model.mediatype", std::string(kOciManifestMediaType)},
          {"containerd.io/snapshot/modelfs.model.size", std::to_string(f.model_json.size())},
          {"containerd.io/snapshot/modelfs.profile", "v1"},
          {"containerd.io/snapshot/modelfs.repository", "registry.local:5000/models/tiny"}}));
  EXPECT_TRUE(IsVolumeImageManifest(m));
  EXPECT_FALSE(IsVolumeImageManifest(f.model));
  EXPECT_EQ(v.manifest_descriptor.digest, Digest::Of(v.manifest_json));
}

TEST(BuildVolumeImageTest, SameInputGivesTheSameDigest) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage a, BuildVolumeImage(f.input));
  ASSERT_OK_AND_ASSIGN(VolumeImage b, BuildVolumeImage(MakeFixture().input));
  EXPECT_EQ(a.manifest_descriptor.digest, b.manifest_descriptor.digest);
  EXPECT_EQ(a.layer, b.layer);
}

TEST(BuildVolumeImageTest, CreatedTimeIsTheManifestsCreatedAnnotation) {
  Fixture f = MakeFixture();
  f.input.created = "2025-02-10T08:00:00Z";
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  EXPECT_EQ(v.manifest.annotations.at("org.opencontainers.image.created"), "2025-02-10T08:00:00Z");
}

TEST(BuildVolumeImageTest, NoCreatedTimeLeavesTheAnnotationOut) {
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(MakeFixture().input));
  EXPECT_EQ(v.manifest.annotations.count("org.opencontainers.image.created"), 0u);
}

TEST(BuildVolumeImageTest, RefusesAChunkIndexForNoLayerOfTheModel) {
  Fixture f = MakeFixture();
  f.input.chunk_indexes.push_back(BuildChunkIndex("unrelated", k64K));
  EXPECT_THAT(BuildVolumeImage(f.input),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names no layer")));
}

TEST(ParseVolumeLayerTest, RoundTripsModelJsonAndIndexes) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents c, ParseVolumeLayer(v.layer));
  EXPECT_EQ(c.model, v.model_info);
  ASSERT_EQ(c.chunk_indexes.size(), 1u);
  EXPECT_EQ(c.chunk_indexes.at(Digest::Of(f.weights)), f.input.chunk_indexes[0]);
  EXPECT_THAT(CheckVolumeMatchesModel(c.model, f.model_descriptor, f.model), IsOk());
}

TEST(BuildVolumeImageTest, APathPrefixIsRecordedAndRoundTrips) {
  Fixture f = MakeFixture();
  f.input.path_prefix = "models";
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  EXPECT_EQ(v.model_info.path_prefix, "models");
  EXPECT_THAT(SerializeVolumeModelJson(v.model_info), HasSubstr("\"pathPrefix\":\"models\""));
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents c, ParseVolumeLayer(v.layer));
  EXPECT_EQ(c.model.path_prefix, "models");
  // Another V: the same M under a prefix is a different image.
  ASSERT_OK_AND_ASSIGN(VolumeImage plain, BuildVolumeImage(MakeFixture().input));
  EXPECT_NE(plain.manifest_descriptor.digest, v.manifest_descriptor.digest);
}

TEST(BuildVolumeImageTest, WithoutAPathPrefixModelJsonHasNoSuchKey) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  EXPECT_THAT(SerializeVolumeModelJson(v.model_info), ::testing::Not(HasSubstr("pathPrefix")));
}

TEST(BuildVolumeImageTest, RefusesAPathPrefixThatEscapesOrShadowsModelinfo) {
  Fixture f = MakeFixture();
  f.input.path_prefix = "../models";
  EXPECT_THAT(BuildVolumeImage(f.input),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("path prefix '../models'")));
  f.input.path_prefix = ".modelinfo.json";
  EXPECT_FALSE(BuildVolumeImage(f.input).ok());
}

TEST(ParseVolumeModelJsonTest, RefusesAnAbsolutePathPrefix) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  VolumeModelInfo info = v.model_info;
  info.path_prefix = "/etc";
  EXPECT_THAT(ParseVolumeModelJson(SerializeVolumeModelJson(info)),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("pathPrefix")));
}

TEST(ParseVolumeLayerTest, DetectsATamperedChunkIndex) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  ChunkIndex evil = f.input.chunk_indexes[0];
  evil.chunks[1][0] ^= 1;
  TarWriter w;
  ASSERT_OK(w.AddFile(".modelfs/model.json", SerializeVolumeModelJson(v.model_info)));
  ASSERT_OK(w.AddFile(v.model_info.layers[0].chunk_index->path, SerializeChunkIndex(evil)));
  EXPECT_THAT(ParseVolumeLayer(w.Finish()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("model.json says")));
}

TEST(ParseVolumeLayerTest, RequiresModelJson) {
  TarWriter w;
  ASSERT_OK(w.AddFile(".modelfs/README.txt", "hi"));
  EXPECT_THAT(ParseVolumeLayer(w.Finish()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no .modelfs/model.json")));
}

TEST(ParseVolumeLayerTest, RequiresEveryNamedIndexFile) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  TarWriter w;
  ASSERT_OK(w.AddFile(".modelfs/model.json", SerializeVolumeModelJson(v.model_info)));
  EXPECT_THAT(ParseVolumeLayer(w.Finish()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is missing")));
}

TEST(ParseVolumeModelJsonTest, RefusesALayerDeclaringAnAbsurdSizeNamingItAndTheSize) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  VolumeModelInfo info = v.model_info;
  info.layers[1].size = 9223372036854775807ull;
  EXPECT_THAT(ParseVolumeModelJson(SerializeVolumeModelJson(info)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.json.layers[1] (" + Digest::Of(f.readme).str() +
                                 "): size 9223372036854775807 bytes is over the limit of "
                                 "4398046511104 bytes (4 TiB)")));
}

TEST(CheckVolumeMatchesModelTest, ReportsALayerThatDiffers) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  Manifest other = f.model;
  other.layers[1].size += 1;
  EXPECT_THAT(CheckVolumeMatchesModel(v.model_info, f.model_descriptor, other),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("model.json layer 1")));
  Descriptor wrong = f.model_descriptor;
  wrong.digest = Digest::Of("another manifest");
  EXPECT_THAT(CheckVolumeMatchesModel(v.model_info, wrong, f.model),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("model.json names")));
}

TEST(VolumeLabelsTest, RoundTripThroughPrepareLabels) {
  Fixture f = MakeFixture();
  std::map<std::string, std::string> labels = MakeVolumeLabels(f.model_descriptor, "r/m");
  labels["containerd.io/snapshot.ref"] = "sha256:whatever";
  ASSERT_OK_AND_ASSIGN(std::optional<VolumeLabels> parsed, ParseVolumeLabels(labels));
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->model.digest, f.model_descriptor.digest);
  EXPECT_EQ(parsed->model.size, f.model_json.size());
  EXPECT_EQ(parsed->model.media_type, kOciManifestMediaType);
  EXPECT_EQ(parsed->repository, "r/m");
  EXPECT_EQ(parsed->profile, "v1");
}

TEST(VolumeLabelsTest, OrdinaryLayersHaveNone) {
  ASSERT_OK_AND_ASSIGN(std::optional<VolumeLabels> parsed,
                       ParseVolumeLabels({{"containerd.io/snapshot.ref", "x"}}));
  EXPECT_FALSE(parsed.has_value());
}

TEST(VolumeLabelsTest, RefusesMalformedValues) {
  EXPECT_THAT(ParseVolumeLabels({{"containerd.io/snapshot/modelfs.model", "sha256:nope"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("modelfs.model")));
  EXPECT_THAT(ParseVolumeLabels({{"containerd.io/snapshot/modelfs.model", Digest::Of("").str()},
                                 {"containerd.io/snapshot/modelfs.model.size", "-5"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a size")));
  EXPECT_THAT(ParseVolumeLabels({{"containerd.io/snapshot/modelfs.model", Digest::Of("").str()},
                                 {"containerd.io/snapshot/modelfs.profile", "v9"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("v9")));
}

// --- Binding a remote snapshot to V (docs/volume-image.md) -----------------------------------

TEST(ChainIdOfTest, FollowsTheImageSpecDefinition) {
  const Digest a = Digest::Of("layer a");
  const Digest b = Digest::Of("layer b");
  const Digest c = Digest::Of("layer c");
  EXPECT_EQ(ChainIdOf({a}), a);
  const Digest ab = Digest::Of(a.str() + " " + b.str());
  EXPECT_EQ(ChainIdOf({a, b}), ab);
  EXPECT_EQ(ChainIdOf({a, b, c}), Digest::Of(ab.str() + " " + c.str()));
}

TEST(ParseImageConfigDiffIdsTest, ReadsRootfsDiffIds) {
  const Digest a = Digest::Of("a");
  ASSERT_OK_AND_ASSIGN(
      std::vector<Digest> ids,
      ParseImageConfigDiffIds(R"({"rootfs":{"type":"layers","diff_ids":[")" + a.str() + R"("]}})"));
  EXPECT_EQ(ids, std::vector<Digest>{a});
}

TEST(ParseImageConfigDiffIdsTest, RefusesConfigsWithoutValidDiffIds) {
  EXPECT_THAT(ParseImageConfigDiffIds("not json"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseImageConfigDiffIds(R"({"rootfs":{}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("diff_ids")));
  EXPECT_THAT(ParseImageConfigDiffIds(R"({"rootfs":{"diff_ids":["sha256:xyz"]}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("diff_ids[0]")));
}

struct BindingFixture {
  VolumeImage v;
  std::vector<Digest> diff_ids;
  std::string chain;  // A's chain ID (A is V's only layer)
};

BindingFixture MakeBinding() {
  Fixture f = MakeFixture();
  BindingFixture b;
  b.v = *BuildVolumeImage(f.input);
  b.diff_ids = *ParseImageConfigDiffIds(b.v.config);
  b.chain = b.v.layer_descriptor.digest.str();
  return b;
}

TEST(CheckVolumeSnapshotBindingTest, HoldsForTheChainIdOfTheVolumeLayer) {
  BindingFixture b = MakeBinding();
  EXPECT_OK(CheckVolumeSnapshotBinding(b.v.manifest, b.diff_ids, "", b.chain));
}

// The poisoning case: an image whose config names a common base layer's diff ID while its
// layer is a modelfs volume layer. The target containerd computes is the base layer's chain ID.
TEST(CheckVolumeSnapshotBindingTest, RefusesAConfigThatNamesAnotherLayersDiffId) {
  BindingFixture b = MakeBinding();
  const Digest base = Digest::Of("a common base layer");
  EXPECT_THAT(CheckVolumeSnapshotBinding(b.v.manifest, {base}, "", base.str()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("diff_ids[0]")));
}

TEST(CheckVolumeSnapshotBindingTest, RefusesATargetThatIsNotTheVolumeLayersChainId) {
  BindingFixture b = MakeBinding();
  const std::string other = Digest::Of("a common base layer").str();
  EXPECT_THAT(CheckVolumeSnapshotBinding(b.v.manifest, b.diff_ids, "", other),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(other)));
}

TEST(CheckVolumeSnapshotBindingTest, RefusesAParentThatIsNotTheChainBelowTheLayer) {
  BindingFixture b = MakeBinding();
  const Digest parent = Digest::Of("some parent");
  const std::string target = ChainIdOf({parent, b.v.layer_descriptor.digest}).str();
  EXPECT_THAT(CheckVolumeSnapshotBinding(b.v.manifest, b.diff_ids, parent.str(), target),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("parent")));
}

TEST(CheckVolumeSnapshotBindingTest, RefusesACompressedVolumeLayer) {
  BindingFixture b = MakeBinding();
  b.v.manifest.layers[0].media_type = std::string(kOciLayerTarGzipMediaType);
  EXPECT_THAT(CheckVolumeSnapshotBinding(b.v.manifest, b.diff_ids, "", b.chain),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("media type")));
}

TEST(CheckVolumeSnapshotBindingTest, RefusesAConfigWithADifferentNumberOfDiffIds) {
  BindingFixture b = MakeBinding();
  std::vector<Digest> ids = b.diff_ids;
  ids.push_back(Digest::Of("extra"));
  EXPECT_THAT(CheckVolumeSnapshotBinding(b.v.manifest, ids, "", b.chain),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("2 diff_ids for 1")));
}

TEST(CheckVolumeSnapshotBindingTest, BindsAVolumeLayerAboveAnotherLayerToItsFullChain) {
  BindingFixture b = MakeBinding();
  Descriptor base;
  base.media_type = std::string(kOciLayerTarMediaType);
  base.digest = Digest::Of("base layer");
  base.size = 10;
  b.v.manifest.layers.insert(b.v.manifest.layers.begin(), base);
  const std::vector<Digest> ids = {base.digest, b.v.layer_descriptor.digest};
  EXPECT_OK(CheckVolumeSnapshotBinding(b.v.manifest, ids, base.digest.str(), ChainIdOf(ids).str()));
  // The parent as containerd's metadata store names it in the backend.
  EXPECT_OK(CheckVolumeSnapshotBinding(b.v.manifest, ids, "k8s.io/7/" + base.digest.str(),
                                       ChainIdOf(ids).str()));
  EXPECT_THAT(CheckVolumeSnapshotBinding(b.v.manifest, ids, "", b.chain),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(VolumeLayerIndexTest, RefusesAManifestWithoutOrWithTwoAnnotatedLayers) {
  BindingFixture b = MakeBinding();
  Manifest two = b.v.manifest;
  two.layers.push_back(two.layers[0]);
  EXPECT_THAT(VolumeLayerIndex(two), StatusIs(absl::StatusCode::kInvalidArgument));
  Manifest none = b.v.manifest;
  none.layers[0].annotations.clear();
  EXPECT_THAT(VolumeLayerIndex(none), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(BuildVolumeImageTest, ABlake3IndexIsNamedInModelJsonAndReadBack) {
  Fixture f = MakeFixture();
  f.input.chunk_indexes = {BuildChunkIndex(f.weights, k64K, ChunkDigestAlgorithm::kBlake3)};
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  ASSERT_TRUE(v.model_info.layers[0].chunk_index.has_value());
  EXPECT_EQ(v.model_info.layers[0].chunk_index->algorithm, ChunkDigestAlgorithm::kBlake3);
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents back, ParseVolumeLayer(v.layer));
  EXPECT_EQ(back.model, v.model_info);
  EXPECT_EQ(back.chunk_indexes.at(Digest::Of(f.weights)), f.input.chunk_indexes[0]);
  const std::string json = SerializeVolumeModelJson(v.model_info);
  EXPECT_THAT(json, HasSubstr(R"("algorithm":"blake3")"));
}

TEST(BuildVolumeImageTest, ASha256IndexWritesNoAlgorithmField) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  EXPECT_THAT(SerializeVolumeModelJson(v.model_info), ::testing::Not(HasSubstr("algorithm")));
}

TEST(ParseVolumeLayerTest, AnIndexWhoseAlgorithmDisagreesWithModelJsonIsRefused) {
  Fixture f = MakeFixture();
  f.input.chunk_indexes = {BuildChunkIndex(f.weights, k64K, ChunkDigestAlgorithm::kBlake3)};
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  VolumeModelInfo info = v.model_info;
  info.layers[0].chunk_index->algorithm = ChunkDigestAlgorithm::kSha256;
  TarWriter tar;
  ASSERT_OK(tar.AddFile(kVolumeModelJsonPath, SerializeVolumeModelJson(info)));
  ASSERT_OK(
      tar.AddFile(info.layers[0].chunk_index->path, SerializeChunkIndex(f.input.chunk_indexes[0])));
  EXPECT_THAT(ParseVolumeLayer(tar.Finish()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("blake3) but model.json")));
}

TEST(ChunkSizeForLayersTest, ASmallModelKeepsOneMiBChunks) {
  EXPECT_EQ(*ChunkSizeForLayers({256ull << 20, 4096}, ChunkDigestAlgorithm::kBlake3), 1u << 20);
}

TEST(ChunkSizeForLayersTest, AnExplicitSmallerChunkIsTakenWhenItFits) {
  EXPECT_EQ(*ChunkSizeForLayers({8ull << 20}, ChunkDigestAlgorithm::kBlake3, 64 << 10), 64u << 10);
}

TEST(ChunkSizeForLayersTest, SeveralGiBAt64KiBDoNotFitAndAGreaterSizeIsNamed) {
  // 8 GiB at 64 KiB: 131,072 hashes, 4 MiB of index alone.
  EXPECT_EQ(*ChunkSizeForLayers({8ull << 30}, ChunkDigestAlgorithm::kBlake3, 64 << 10), 128u << 10);
}

TEST(ChunkSizeForLayersTest, ModelsBeyondEightTiBAreRefusedNamingTheirSize) {
  const std::vector<uint64_t> sizes(3, 3ull << 40);  // 9 TiB
  EXPECT_THAT(ChunkSizeForLayers(sizes, ChunkDigestAlgorithm::kBlake3),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("9895604649984 bytes")));
}

// A 1 TiB model, sizes only: 205 shards of 5 GB and the rest, as large checkpoints are split.
// Its indexes (zero hashes: only their sizes matter here) fit the 4 MiB volume layer at 16 MiB
// chunks, and the volume image it gives parses back with every index.
TEST(BuildVolumeImageTest, AOneTiBModelGetsAVolumeImageAtSixteenMiBChunks) {
  const uint64_t total = 1ull << 40;
  const uint64_t shard = 5'000'000'000ull;
  std::vector<uint64_t> sizes;
  for (uint64_t left = total; left > 0; left -= std::min(left, shard)) {
    sizes.push_back(std::min(left, shard));
  }
  ASSERT_OK_AND_ASSIGN(const uint64_t cs, ChunkSizeForLayers(sizes, ChunkDigestAlgorithm::kBlake3));
  EXPECT_EQ(cs, 16u << 20);

  std::vector<ModelLayerInput> layers;
  std::vector<ChunkIndex> indexes;
  ModelPackConfig config;
  config.descriptor.name = "huge";
  config.config.format = "safetensors";
  for (size_t i = 0; i < sizes.size(); ++i) {
    ChunkIndex idx;
    // A distinct digest per shard (the bytes are never read).
    idx.blob_digest = Digest::Of("shard " + std::to_string(i));
    idx.blob_size = sizes[i];
    idx.chunk_size = cs;
    idx.algorithm = ChunkDigestAlgorithm::kBlake3;
    idx.chunks.resize((sizes[i] + cs - 1) / cs);
    layers.push_back({"model-" + std::to_string(i) + ".safetensors", idx.blob_digest, sizes[i],
                      LayerKind::kWeight, LayerEncoding::kRaw, ""});
    config.modelfs.diff_ids.push_back(idx.blob_digest);
    indexes.push_back(std::move(idx));
  }
  VolumeImageInput in;
  ASSERT_OK_AND_ASSIGN(in.model, BuildModelManifest(SerializeModelPackConfig(config), layers));
  const std::string model_json = SerializeManifest(in.model);
  in.model_manifest = DescribeBlob(kOciManifestMediaType, model_json);
  in.model_manifest.artifact_type = std::string(kModelArtifactType);
  in.repository = "registry.local:5000/models/huge";
  in.chunk_indexes = indexes;
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(in));
  EXPECT_LE(v.layer.size(), kMaxVolumeLayerBytes);
  EXPECT_LE(v.layer.size(), VolumeLayerBytesFor(sizes, cs, ChunkDigestAlgorithm::kBlake3));
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents back, ParseVolumeLayer(v.layer));
  EXPECT_EQ(back.chunk_indexes.size(), sizes.size());
  uint64_t covered = 0;
  for (const auto& [digest, idx] : back.chunk_indexes) covered += idx.blob_size;
  EXPECT_EQ(covered, total);

  // At 8 MiB chunks the same indexes (4 MiB of hashes alone) would not fit.
  for (ChunkIndex& idx : in.chunk_indexes) {
    idx.chunk_size = 8u << 20;
    idx.chunks.resize((idx.blob_size + idx.chunk_size - 1) / idx.chunk_size);
  }
  EXPECT_THAT(BuildVolumeImage(in),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("over the 4 MiB limit")));
}

// A model with one .tar+gzip layer, its seek index and the chunk index of its tar.
struct CompressedFixture {
  std::string tar, gz;
  SeekIndex seek;
  ChunkIndex chunks;
  VolumeImageInput input;
};

CompressedFixture MakeCompressedFixture() {
  CompressedFixture f;
  f.tar.resize(600000);
  uint32_t x = 28;
  for (size_t i = 0; i < f.tar.size(); ++i) {
    x = x * 1664525 + 1013904223;  // bf16-like: a random byte beside a narrow-range one
    f.tar[i] = static_cast<char>(i % 2 ? 0x3c + (x >> 24) % 3 : x >> 24);
  }
  f.gz = testing::Gzip(f.tar);
  f.seek = *BuildSeekIndex(SeekEncoding::kGzip, f.gz, nullptr, 100000);
  f.chunks = BuildChunkIndex(f.tar, k64K, ChunkDigestAlgorithm::kBlake3);
  f.chunks.content = ChunkIndex::Content::kUncompressed;
  ModelPackConfig config;
  config.modelfs.diff_ids = {Digest::Of(f.tar)};
  const std::string config_blob = SerializeModelPackConfig(config);
  std::vector<ModelLayerInput> layers = {
      {"model", Digest::Of(f.gz), f.gz.size(), LayerKind::kWeight, LayerEncoding::kTarGzip, ""}};
  Manifest m = *BuildModelManifest(config_blob, layers);
  f.input.model_manifest = DescribeBlob(kOciManifestMediaType, SerializeManifest(m));
  f.input.model = m;
  f.input.repository = "registry.local:5000/models/gz";
  f.input.chunk_indexes = {f.chunks};
  f.input.seek_indexes = {f.seek};
  return f;
}

TEST(BuildVolumeImageTest, ACompressedLayerGetsASeekIndexAndTheChunkIndexOfItsTar) {
  CompressedFixture f = MakeCompressedFixture();
  ASSERT_GE(f.seek.points.size(), 3u);
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  const VolumeLayerRecord& rec = v.model_info.layers.at(0);
  ASSERT_TRUE(rec.seek_index.has_value());
  EXPECT_EQ(rec.seek_index->path, ".modelfs/seek/" + std::string(Digest::Of(f.gz).hex()) + ".idx");
  EXPECT_EQ(rec.seek_index->encoding, SeekEncoding::kGzip);
  EXPECT_EQ(rec.seek_index->diff_id, Digest::Of(f.tar));
  EXPECT_EQ(rec.seek_index->uncompressed_size, f.tar.size());
  EXPECT_EQ(rec.seek_index->points, f.seek.points.size());
  ASSERT_TRUE(rec.chunk_index.has_value());
  EXPECT_EQ(rec.chunk_index->content, ChunkIndex::Content::kUncompressed);
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents back, ParseVolumeLayer(v.layer));
  EXPECT_EQ(back.model, v.model_info);
  EXPECT_EQ(back.seek_indexes.at(Digest::Of(f.gz)), f.seek);
  EXPECT_EQ(back.chunk_indexes.at(Digest::Of(f.gz)), f.chunks);
}

TEST(BuildVolumeImageTest, RefusesASeekIndexWithoutTheChunkIndexOfItsTar) {
  CompressedFixture f = MakeCompressedFixture();
  f.input.chunk_indexes.clear();
  EXPECT_THAT(BuildVolumeImage(f.input).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no chunk index")));
}

TEST(ParseVolumeLayerTest, RefusesASeekIndexThatDisagreesWithModelJson) {
  CompressedFixture f = MakeCompressedFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  // Rebuild A with model.json claiming other points but the same file.
  VolumeModelInfo info = v.model_info;
  info.layers[0].seek_index->points += 1;
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents good, ParseVolumeLayer(v.layer));
  TarWriter tar;
  ASSERT_OK(tar.AddFile(kVolumeModelJsonPath, SerializeVolumeModelJson(info)));
  ASSERT_OK(tar.AddFile(info.layers[0].chunk_index->path,
                        SerializeChunkIndex(good.chunk_indexes.begin()->second)));
  ASSERT_OK(tar.AddFile(info.layers[0].seek_index->path, SerializeSeekIndex(f.seek)));
  EXPECT_THAT(ParseVolumeLayer(tar.Finish()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("points")));
}

TEST(ParseVolumeModelJsonTest, RefusesAnUncompressedChunkIndexWithoutASeekIndex) {
  CompressedFixture f = MakeCompressedFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  VolumeModelInfo info = v.model_info;
  info.layers[0].seek_index.reset();
  EXPECT_THAT(ParseVolumeModelJson(SerializeVolumeModelJson(info)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a seekIndex")));
}

}  // namespace
}  // namespace modelfs
