#include "core/oci/volume_image.h"

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "core/oci/media_types.h"
#include "core/oci/modelpack.h"
#include "core/oci/tar.h"
#include "testsupport/testing/compress.h"
#include "testsupport/testing/status_matchers.h"

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

TEST(ChunkSizeForLayersTest, SeveralGiBAt64KiBAreTakenAsAsked) {
  // 9 GiB at 64 KiB: 147,456 hashes, 4.5 MiB of index: over A's 4 MiB, so in an index layer.
  EXPECT_EQ(*ChunkSizeForLayers({9ull << 30}, ChunkDigestAlgorithm::kBlake3, 64 << 10), 64u << 10);
}

TEST(ChunkSizeForLayersTest, AnIndexOverWhatOneIndexLayerHoldsNamesAGreaterSize) {
  // 128 GiB in one layer at 64 KiB: 2 Mi hashes, 64 MiB and a header: over one index layer.
  EXPECT_EQ(*ChunkSizeForLayers({128ull << 30}, ChunkDigestAlgorithm::kBlake3, 64 << 10),
            128u << 10);
}

TEST(ChunkSizeForLayersTest, ByItselfOneMiBUpToOnePointFiveTiBThenGreater) {
  EXPECT_EQ(
      *ChunkSizeForLayers(std::vector<uint64_t>(4, 350ull << 30), ChunkDigestAlgorithm::kBlake3),
      1u << 20);
  // 9 TiB: 8 MiB chunks keep the indexes within 48 MiB.
  EXPECT_EQ(
      *ChunkSizeForLayers(std::vector<uint64_t>(3, 3ull << 40), ChunkDigestAlgorithm::kBlake3),
      8u << 20);
}

TEST(ChunkSizeForLayersTest, ModelsBeyondWhatIndexesHoldAreRefusedNamingTheirSize) {
  const std::vector<uint64_t> sizes(128, 1ull << 40);  // 128 TiB
  EXPECT_THAT(ChunkSizeForLayers(sizes, ChunkDigestAlgorithm::kBlake3),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("140737488355328 bytes")));
  // Asked for, 64 MiB chunks hold them (64 MiB of index, within 256 MiB).
  EXPECT_EQ(*ChunkSizeForLayers(sizes, ChunkDigestAlgorithm::kBlake3, 64u << 20), 64u << 20);
}

// A model of `sizes` (one raw weight layer each) with zero-hash indexes at `chunk_size`: only
// their sizes matter.
VolumeImageInput SizesOnlyModel(const std::vector<uint64_t>& sizes, uint64_t chunk_size) {
  std::vector<ModelLayerInput> layers;
  VolumeImageInput in;
  ModelPackConfig config;
  config.descriptor.name = "huge";
  config.config.format = "safetensors";
  for (size_t i = 0; i < sizes.size(); ++i) {
    ChunkIndex idx;
    // A distinct digest per shard (the bytes are never read).
    idx.blob_digest = Digest::Of("shard " + std::to_string(i));
    idx.blob_size = sizes[i];
    idx.chunk_size = chunk_size;
    idx.algorithm = ChunkDigestAlgorithm::kBlake3;
    idx.chunks.resize((sizes[i] + chunk_size - 1) / chunk_size);
    layers.push_back({"model-" + std::to_string(i) + ".safetensors", idx.blob_digest, sizes[i],
                      LayerKind::kWeight, LayerEncoding::kRaw, ""});
    config.modelfs.diff_ids.push_back(idx.blob_digest);
    in.chunk_indexes.push_back(std::move(idx));
  }
  in.model = *BuildModelManifest(SerializeModelPackConfig(config), layers);
  const std::string model_json = SerializeManifest(in.model);
  in.model_manifest = DescribeBlob(kOciManifestMediaType, model_json);
  in.model_manifest.artifact_type = std::string(kModelArtifactType);
  in.repository = "registry.local:5000/models/huge";
  return in;
}

// What containerd would unpack from V's layers, bottom to top: path -> bytes.
std::map<std::string, std::string> Unpacked(const VolumeImage& v) {
  std::map<std::string, std::string> files;
  auto add = [&](const std::string& tar) {
    const std::vector<TarEntry> entries = *IndexTarBytes(tar);
    for (const TarEntry& e : entries) {
      if (e.type == TarEntryType::kFile) files[e.path] = tar.substr(e.data_offset, e.size);
    }
  };
  for (const VolumeBlob& l : v.index_layers) add(l.bytes);
  add(v.layer);
  return files;
}

TEST(BuildVolumeImageTest, AModelThatFitsAHasNoIndexLayers) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  EXPECT_TRUE(v.index_layers.empty());
  EXPECT_EQ(v.manifest.layers.size(), 1u);
}

// 9 GiB at 64 KiB chunks in three layers: 4.5 MiB of indexes spill out of A into one index
// layer below it; A keeps model.json, the README and its annotations.
TEST(BuildVolumeImageTest, IndexesOverFourMiBSpillIntoAnIndexLayerBelowA) {
  VolumeImageInput in = SizesOnlyModel({3ull << 30, 3ull << 30, 3ull << 30}, k64K);
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(in));
  ASSERT_EQ(v.index_layers.size(), 1u);
  EXPECT_LE(v.layer.size(), 64u << 10);
  ASSERT_EQ(v.manifest.layers.size(), 2u);
  EXPECT_EQ(v.manifest.layers[0], v.index_layers[0].descriptor);
  EXPECT_EQ(v.manifest.layers[1], v.layer_descriptor);
  EXPECT_EQ(v.index_layers[0].descriptor.media_type, kOciLayerTarMediaType);
  EXPECT_EQ(*v.index_layers[0].descriptor.Annotation(kLabelRole), "index");
  EXPECT_EQ(v.index_layers[0].descriptor.Annotation(kLabelModel), nullptr);
  EXPECT_NE(v.layer_descriptor.Annotation(kLabelModel), nullptr);
  EXPECT_EQ(v.layer_descriptor.Annotation(kLabelRole), nullptr);
  EXPECT_EQ(*VolumeLayerIndex(v.manifest), 1u);
  EXPECT_EQ(*VolumeIndexLayerIndexes(v.manifest), std::vector<size_t>{0});
  EXPECT_EQ(*ParseImageConfigDiffIds(v.config),
            (std::vector<Digest>{v.index_layers[0].descriptor.digest, v.layer_descriptor.digest}));

  // The unpacked tree is what one layer would have held: model.json names every index file by
  // path, and each is there, below .modelfs/chunks/.
  std::map<std::string, std::string> files = Unpacked(v);
  ASSERT_OK_AND_ASSIGN(VolumeModelInfo info, ParseVolumeModelJson(files[".modelfs/model.json"]));
  for (const VolumeLayerRecord& l : info.layers) {
    ASSERT_TRUE(l.chunk_index.has_value());
    EXPECT_TRUE(files.contains(l.chunk_index->path)) << l.chunk_index->path;
  }
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> a_entries, IndexTarBytes(v.layer));
  for (const TarEntry& e : a_entries) EXPECT_FALSE(absl::StrContains(e.path, "chunks")) << e.path;

  // Read back over A and the index layer; A alone lacks them.
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents back,
                       ParseVolumeLayers(v.layer, {v.index_layers[0].bytes}));
  EXPECT_EQ(back.chunk_indexes.size(), 3u);
  for (const ChunkIndex& idx : in.chunk_indexes)
    EXPECT_EQ(back.chunk_indexes[idx.blob_digest], idx);
  EXPECT_THAT(ParseVolumeLayer(v.layer),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is missing")));

  // Deterministic: the same M gives the same V.
  ASSERT_OK_AND_ASSIGN(VolumeImage again, BuildVolumeImage(in));
  EXPECT_EQ(again.manifest_json, v.manifest_json);
  EXPECT_EQ(again.index_layers[0].bytes, v.index_layers[0].bytes);
}

TEST(ParseVolumeLayersTest, ATamperedIndexLayerFileIsDataLoss) {
  VolumeImageInput in = SizesOnlyModel({9ull << 30}, k64K);
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(in));
  ASSERT_EQ(v.index_layers.size(), 1u);
  std::map<std::string, std::string> files = Unpacked(v);
  const std::string path =
      ".modelfs/chunks/" + std::string(in.chunk_indexes[0].blob_digest.hex()) + ".idx";
  std::string idx = files.at(path);
  idx.back() ^= 1;
  TarWriter w;
  ASSERT_OK(w.AddFile(path, idx));
  EXPECT_THAT(ParseVolumeLayers(v.layer, {w.Finish()}),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)));
}

TEST(BuildVolumeImageTest, IndexLayersHoldAtMostSixtyFourMiBOfFilesEach) {
  // 3 layers of 48 GiB at 64 KiB: 24 MiB of index each; two fit one index layer, not three.
  VolumeImageInput in = SizesOnlyModel(std::vector<uint64_t>(3, 48ull << 30), k64K);
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(in));
  ASSERT_EQ(v.index_layers.size(), 2u);
  for (const VolumeBlob& l : v.index_layers) EXPECT_LE(l.bytes.size(), kMaxIndexLayerBytes + 8192);
  std::vector<std::string> tars;
  for (const VolumeBlob& l : v.index_layers) tars.push_back(l.bytes);
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents back, ParseVolumeLayers(v.layer, tars));
  EXPECT_EQ(back.chunk_indexes.size(), 3u);
}

// A 1 TiB model, sizes only: 205 shards of 5 GB and the rest, as large checkpoints are split.
// It keeps 1 MiB chunks; its 32 MiB of indexes go into one index layer below A.
TEST(BuildVolumeImageTest, AOneTiBModelGetsAVolumeImageAtOneMiBChunks) {
  const uint64_t total = 1ull << 40;
  const uint64_t shard = 5'000'000'000ull;
  std::vector<uint64_t> sizes;
  for (uint64_t left = total; left > 0; left -= std::min(left, shard)) {
    sizes.push_back(std::min(left, shard));
  }
  ASSERT_OK_AND_ASSIGN(const uint64_t cs, ChunkSizeForLayers(sizes, ChunkDigestAlgorithm::kBlake3));
  EXPECT_EQ(cs, 1u << 20);
  VolumeImageInput in = SizesOnlyModel(sizes, cs);
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(in));
  EXPECT_LE(v.layer.size(), kMaxVolumeLayerBytes);
  EXPECT_EQ(v.index_layers.size(), 1u);
  std::vector<std::string> tars;
  for (const VolumeBlob& l : v.index_layers) tars.push_back(l.bytes);
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents back, ParseVolumeLayers(v.layer, tars));
  EXPECT_EQ(back.chunk_indexes.size(), sizes.size());
  uint64_t covered = 0;
  for (const auto& [digest, idx] : back.chunk_indexes) covered += idx.blob_size;
  EXPECT_EQ(covered, total);
}

TEST(CheckVolumeLowerBindingTest, FindsTheIndexLayerByItsChainId) {
  VolumeImageInput in = SizesOnlyModel({9ull << 30}, k64K);
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(in));
  ASSERT_OK_AND_ASSIGN(std::vector<Digest> ids, ParseImageConfigDiffIds(v.config));
  const Digest index = v.index_layers[0].descriptor.digest;
  EXPECT_EQ(*CheckVolumeLowerBinding(v.manifest, ids, "", index.str()), 0u);
  // A's chain is not a lower layer's; nor is a parent that is not the chain below.
  EXPECT_THAT(CheckVolumeLowerBinding(v.manifest, ids, index.str(), ChainIdOf(ids).str()),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(CheckVolumeLowerBinding(v.manifest, ids, "k8s.io/1/x", index.str()),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  // A layer without the role annotation is not answered.
  Manifest plain = v.manifest;
  plain.layers[0].annotations.clear();
  EXPECT_THAT(CheckVolumeLowerBinding(plain, ids, "", index.str()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("modelfs.role")));
  // A binds above its index layer.
  EXPECT_OK(CheckVolumeSnapshotBinding(v.manifest, ids, index.str(), ChainIdOf(ids).str()));
}

// M with two .tar layers (one member each), for the image-compatible profile.
Fixture MakeTarFixture() {
  Fixture f = MakeFixture();
  TarWriter w1, w2;
  EXPECT_OK(w1.AddFile("tiny.gguf", f.weights));
  EXPECT_OK(w2.AddFile("README.md", f.readme));
  const std::string t1 = w1.Finish(), t2 = w2.Finish();
  std::vector<ModelLayerInput> layers = {
      {"tiny.gguf", Digest::Of(t1), t1.size(), LayerKind::kWeight, LayerEncoding::kTar, ""},
      {"README.md", Digest::Of(t2), t2.size(), LayerKind::kDoc, LayerEncoding::kTar, ""},
  };
  f.model = *BuildModelManifest(f.config_blob, layers);
  f.model_json = SerializeManifest(f.model);
  f.model_descriptor = DescribeBlob(kOciManifestMediaType, f.model_json);
  f.model_descriptor.artifact_type = std::string(kModelArtifactType);
  f.input.model_manifest = f.model_descriptor;
  f.input.model = f.model;
  f.input.chunk_indexes = {BuildChunkIndex(t1, k64K), BuildChunkIndex(t2, k64K)};
  f.input.image_compatible = true;
  return f;
}

TEST(BuildVolumeImageTest, ImageCompatibleLayersAreTheModelsTarsThenA) {
  Fixture f = MakeTarFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  ASSERT_EQ(v.manifest.layers.size(), 3u);
  for (size_t i = 0; i < 2; ++i) {
    const Descriptor& l = v.manifest.layers[i];
    EXPECT_EQ(l.digest, f.model.layers[i].digest);
    EXPECT_EQ(l.size, f.model.layers[i].size);
    EXPECT_EQ(l.media_type, kOciLayerTarMediaType);
    EXPECT_EQ(*l.Annotation(kLabelRole), "model");
  }
  EXPECT_EQ(v.manifest.layers[2], v.layer_descriptor);
  EXPECT_EQ(*VolumeLayerIndex(v.manifest), 2u);
  EXPECT_TRUE(IsImageCompatibleVolume(v.manifest));
  EXPECT_EQ(v.manifest.annotations.at(std::string(kAnnotationVolumeProfile)), "image-compatible");
  ASSERT_OK_AND_ASSIGN(std::vector<Digest> ids, ParseImageConfigDiffIds(v.config));
  EXPECT_EQ(ids, (std::vector<Digest>{f.model.layers[0].digest, f.model.layers[1].digest,
                                      v.layer_descriptor.digest}));
  // Each lower layer binds to its chain ID, and A above them.
  EXPECT_EQ(*CheckVolumeLowerBinding(v.manifest, ids, "", ids[0].str()), 0u);
  EXPECT_EQ(
      *CheckVolumeLowerBinding(v.manifest, ids, ids[0].str(), ChainIdOf({ids[0], ids[1]}).str()),
      1u);
  EXPECT_OK(CheckVolumeSnapshotBinding(v.manifest, ids, ChainIdOf({ids[0], ids[1]}).str(),
                                       ChainIdOf(ids).str()));
  // The README says the model is in the image, and A still reads back.
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents c, ParseVolumeLayer(v.layer));
  EXPECT_EQ(c.chunk_indexes.size(), 2u);
  const std::map<std::string, std::string> files = Unpacked(v);
  EXPECT_THAT(files.at(".modelfs/README.txt"), HasSubstr("as ordinary image layers"));
  EXPECT_FALSE(IsImageCompatibleVolume(BuildVolumeImage(MakeFixture().input)->manifest));
}

TEST(BuildVolumeImageTest, ImageCompatibleRecordsNoPathPrefixTheTarsCarryIt) {
  Fixture f = MakeTarFixture();
  f.input.path_prefix = "models";
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  EXPECT_EQ(v.model_info.path_prefix, "");
}

TEST(BuildVolumeImageTest, ImageCompatibleRefusesARawLayerItWouldCopy) {
  Fixture f = MakeFixture();
  f.input.image_compatible = true;
  EXPECT_THAT(BuildVolumeImage(f.input),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("would copy its bytes")));
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
  f.seek = *BuildSeekIndex(LayerEncoding::kTarGzip, f.gz, nullptr, 100000);
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
  EXPECT_EQ(rec.seek_index->encoding, LayerEncoding::kTarGzip);
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

TEST(BuildVolumeImageTest, SmallInlineSeekIndexesGetNoWindows) {
  CompressedFixture f = MakeCompressedFixture();
  f.input.seek_windows = {f.seek};
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  EXPECT_TRUE(v.index_layers.empty());
  EXPECT_FALSE(v.model_info.layers[0].seek_index->windows.has_value());
  EXPECT_EQ(v.model_info.revision, 1);
}

// 20 MiB of gzip with a point every 32 KiB or so (at block ends): about 7 MB of windows, and
// the inline index thinned to 4.5 MiB still more than A holds.
TEST(BuildVolumeImageTest, WindowsGoToAWindowsLayerAndTheInlineIndexToASeekFallbackLayer) {
  CompressedFixture f;
  f.tar.resize(20 << 20);
  uint32_t x = 44;
  for (size_t i = 0; i < f.tar.size(); ++i) {
    x = x * 1664525 + 1013904223;
    f.tar[i] = static_cast<char>(i % 2 ? 0x3c + (x >> 24) % 3 : x >> 24);
  }
  f.gz = testing::Gzip(f.tar);
  f.seek = *BuildSeekIndex(LayerEncoding::kTarGzip, f.gz, nullptr, 32 << 10);
  f.chunks = BuildChunkIndex(f.tar, k64K, ChunkDigestAlgorithm::kBlake3);
  f.chunks.content = ChunkIndex::Content::kUncompressed;
  ModelPackConfig config;
  config.modelfs.diff_ids = {Digest::Of(f.tar)};
  std::vector<ModelLayerInput> layers = {
      {"model", Digest::Of(f.gz), f.gz.size(), LayerKind::kWeight, LayerEncoding::kTarGzip, ""}};
  Manifest m = *BuildModelManifest(SerializeModelPackConfig(config), layers);
  f.input.model_manifest = DescribeBlob(kOciManifestMediaType, SerializeManifest(m));
  f.input.model = m;
  f.input.repository = "registry.local:5000/models/gz";
  f.input.chunk_indexes = {f.chunks};
  const SeekIndex thinned = ThinSeekIndex(f.seek, 9 << 19);
  ASSERT_LT(thinned.points.size(), f.seek.points.size());
  f.input.seek_indexes = {thinned};
  f.input.seek_windows = {f.seek};
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));

  // The table and the chunk index fit in A; the windows and the inline index do not.
  ASSERT_EQ(v.index_layers.size(), 2u)
      << f.seek.points.size() << " points, " << SerializeSeekIndex(thinned).size() << " inline";
  const VolumeBlob& win = v.index_layers[0];
  const VolumeBlob& fallback = v.index_layers[1];
  EXPECT_EQ(*win.descriptor.Annotation(kLabelRole), "windows");
  EXPECT_EQ(*fallback.descriptor.Annotation(kLabelRole), "index");
  EXPECT_EQ(*fallback.descriptor.Annotation(kAnnotationSeekFallback), "true");
  // Readers without windows support fetch the index layer, never the windows layer.
  EXPECT_EQ(*VolumeIndexLayerIndexes(v.manifest), (std::vector<size_t>{1}));
  EXPECT_EQ(v.model_info.revision, kVolumeRevisionSeekWindows);

  const VolumeLayerRecord& rec = v.model_info.layers.at(0);
  ASSERT_TRUE(rec.seek_index.has_value());
  EXPECT_EQ(rec.seek_index->points, thinned.points.size());
  ASSERT_TRUE(rec.seek_index->windows.has_value());
  const VolumeSeekWindowsRef& w = *rec.seek_index->windows;
  const std::string hex(Digest::Of(f.gz).hex());
  EXPECT_EQ(w.path, ".modelfs/seek/" + hex + ".win");
  EXPECT_EQ(w.table_path, ".modelfs/seek/" + hex + ".wt");
  EXPECT_EQ(w.points, f.seek.points.size());
  EXPECT_EQ(w.layer, win.descriptor.digest);
  const std::string file = SerializeSeekWindows(f.seek);
  EXPECT_EQ(win.bytes.substr(w.offset, file.size()), file);
  EXPECT_EQ(w.table_size, SeekWindowsTable::kHeaderSize + SeekWindowsTable::kEntrySize * w.points);
  EXPECT_EQ(w.digest, Digest::Of(file.substr(0, w.table_size)));

  // A reader using the windows reads A alone: the table, no inline index.
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents lean, ParseVolumeLayer(v.layer));
  EXPECT_TRUE(lean.seek_indexes.empty());
  ASSERT_EQ(lean.seek_windows.count(Digest::Of(f.gz)), 1u);
  const SeekWindowsTable& t = lean.seek_windows.at(Digest::Of(f.gz));
  EXPECT_EQ(t.index.points.size(), f.seek.points.size());
  for (size_t i = 1; i < t.windows.size(); ++i) {
    EXPECT_OK(CheckSeekWindow(
        t, i, win.bytes.substr(w.offset + t.windows[i].offset, t.windows[i].length), "layer"));
  }
  // An old reader's view: the index layer too, the thinned inline index.
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents old, ParseVolumeLayers(v.layer, {fallback.bytes}));
  EXPECT_EQ(old.seek_indexes.at(Digest::Of(f.gz)), thinned);
  EXPECT_EQ(ParseVolumeModelJson(SerializeVolumeModelJson(v.model_info))->layers[0].seek_index,
            rec.seek_index);
}

TEST(BuildVolumeImageTest, RefusesWindowsThatDoNotFitTheSeekIndex) {
  CompressedFixture f = MakeCompressedFixture();
  SeekIndex other = f.seek;
  other.uncompressed_size += 1;
  f.input.seek_windows = {other};
  EXPECT_THAT(BuildVolumeImage(f.input).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("seek windows for")));
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

// Header records for the compressed fixture's tar (its bytes are not a tar: BuildVolumeImage
// and ParseVolumeLayer check what the records describe, not what they say).
TarHeaders HeadersFor(const CompressedFixture& f) {
  TarHeaders h;
  h.tar_digest = Digest::Of(f.tar);
  h.tar_size = f.tar.size();
  h.entries = 1;
  h.extents = {{0, f.tar.substr(0, 512)}, {4096, f.tar.substr(4096, 1024)}};
  return h;
}

TEST(BuildVolumeImageTest, ACompressedTarLayerCarriesItsTarHeaders) {
  CompressedFixture f = MakeCompressedFixture();
  f.input.tar_headers = {HeadersFor(f)};
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  const VolumeLayerRecord& rec = v.model_info.layers.at(0);
  ASSERT_TRUE(rec.tar_headers.has_value());
  EXPECT_EQ(rec.tar_headers->path, ".modelfs/tar/" + std::string(Digest::Of(f.gz).hex()) + ".hdr");
  EXPECT_EQ(rec.tar_headers->entries, 1u);
  EXPECT_EQ(rec.tar_headers->digest, Digest::Of(SerializeTarHeaders(HeadersFor(f))));
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents back, ParseVolumeLayer(v.layer));
  EXPECT_EQ(back.model, v.model_info);
  EXPECT_EQ(back.tar_headers.at(Digest::Of(f.gz)), HeadersFor(f));
  // Without them, model.json is what it was before they existed.
  ASSERT_OK_AND_ASSIGN(VolumeImage without, BuildVolumeImage(MakeCompressedFixture().input));
  EXPECT_FALSE(without.model_info.layers.at(0).tar_headers.has_value());
  EXPECT_FALSE(absl::StrContains(without.layer, "tarHeaders"));
}

TEST(BuildVolumeImageTest, RefusesTarHeadersOfNoTarOfTheModel) {
  CompressedFixture f = MakeCompressedFixture();
  TarHeaders other = HeadersFor(f);
  other.tar_digest = Digest::Of("another tar");
  f.input.tar_headers = {other};
  EXPECT_THAT(BuildVolumeImage(f.input).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name no tar layer")));
  f = MakeCompressedFixture();
  TarHeaders shorter = HeadersFor(f);
  shorter.tar_size -= 512;
  f.input.tar_headers = {shorter};
  EXPECT_THAT(BuildVolumeImage(f.input).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("do not fit the layer")));
}

TEST(ParseVolumeLayerTest, RefusesTarHeadersThatDisagreeWithModelJson) {
  CompressedFixture f = MakeCompressedFixture();
  f.input.tar_headers = {HeadersFor(f)};
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents good, ParseVolumeLayer(v.layer));
  const VolumeModelInfo& info = v.model_info;
  auto a_with = [&](const VolumeModelInfo& model, const std::string& headers) {
    TarWriter tar;
    EXPECT_OK(tar.AddFile(kVolumeModelJsonPath, SerializeVolumeModelJson(model)));
    EXPECT_OK(tar.AddFile(model.layers[0].chunk_index->path,
                          SerializeChunkIndex(good.chunk_indexes.begin()->second)));
    EXPECT_OK(tar.AddFile(model.layers[0].seek_index->path, SerializeSeekIndex(f.seek)));
    EXPECT_OK(tar.AddFile(model.layers[0].tar_headers->path, headers));
    return tar.Finish();
  };
  // Other bytes than model.json's digest names.
  TarHeaders changed = HeadersFor(f);
  changed.extents[0].bytes[0] ^= 1;
  EXPECT_THAT(ParseVolumeLayer(a_with(info, SerializeTarHeaders(changed))).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(info.layers[0].tar_headers->path)));
  // The digest matches, but the records describe another count of entries.
  VolumeModelInfo more = info;
  more.layers[0].tar_headers->entries = 2;
  EXPECT_THAT(ParseVolumeLayer(a_with(more, SerializeTarHeaders(HeadersFor(f)))).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("entries")));
  // Missing.
  TarWriter none;
  ASSERT_OK(none.AddFile(kVolumeModelJsonPath, SerializeVolumeModelJson(info)));
  ASSERT_OK(none.AddFile(info.layers[0].chunk_index->path,
                         SerializeChunkIndex(good.chunk_indexes.begin()->second)));
  ASSERT_OK(none.AddFile(info.layers[0].seek_index->path, SerializeSeekIndex(f.seek)));
  EXPECT_THAT(ParseVolumeLayer(none.Finish()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tar header file " + info.layers[0].tar_headers->path)));
}

TEST(ParseVolumeModelJsonTest, RefusesTarHeadersOnALayerThatIsNoTar) {
  Fixture f = MakeFixture();  // raw layers
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  VolumeModelInfo info = v.model_info;
  info.layers[0].tar_headers = VolumeTarHeadersRef{".modelfs/tar/x.hdr", Digest::Of("x"), 1};
  EXPECT_THAT(ParseVolumeModelJson(SerializeVolumeModelJson(info)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tarHeaders")));
  info.layers[0].tar_headers->path = "../escape.hdr";
  EXPECT_THAT(ParseVolumeModelJson(SerializeVolumeModelJson(info)).status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

}  // namespace
}  // namespace modelfs

namespace modelfs {
namespace {

// A tensor index for the fixture's weight layer (its bytes as two "tensors").
TensorIndex FixtureTensors(const Fixture& f) {
  TensorIndex t;
  t.format = TensorFileFormat::kGguf;
  t.layer_digest = Digest::Of(f.weights);
  t.layer_size = t.file_size = f.weights.size();
  t.tensors.push_back({"blk.0.attn_q.weight", "Q8_0", {32, 4}, 64, 136, {}});
  t.tensors.push_back({"output_norm.weight", "F32", {32}, 256, 128, {}});
  return *BuildTensorIndex(t, f.weights);
}

TEST(VolumeTensorIndexTest, IsReferencedFromModelJsonAsRevisionTwoAndReadBack) {
  Fixture f = MakeFixture();
  f.input.tensor_indexes = {FixtureTensors(f)};
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  const std::string json = SerializeVolumeModelJson(v.model_info);
  EXPECT_THAT(json, HasSubstr("\"revision\":2"));
  EXPECT_THAT(json, HasSubstr("\"schemaVersion\":1"));
  EXPECT_THAT(json, HasSubstr("\"tensorIndex\":{\"digest\":\"sha256:"));
  EXPECT_THAT(json, HasSubstr("\"mediaType\":\"application/vnd.modelfs.tensor-index.v1\","
                              "\"path\":\".modelfs/tensors/" +
                              std::string(Digest::Of(f.weights).hex()) + ".tidx\",\"tensors\":2}"));
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents c, ParseVolumeLayer(v.layer));
  EXPECT_EQ(c.model.revision, 2);
  ASSERT_EQ(c.tensor_indexes.size(), 1u);
  EXPECT_EQ(c.tensor_indexes.at(Digest::Of(f.weights)), FixtureTensors(f));
}

TEST(VolumeTensorIndexTest, AVolumeWithoutOneKeepsItsBytesAndRevisionOne) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  const std::string json = SerializeVolumeModelJson(v.model_info);
  EXPECT_THAT(json, ::testing::Not(HasSubstr("revision")));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("tensorIndex")));
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents c, ParseVolumeLayer(v.layer));
  EXPECT_EQ(c.model.revision, 1);
  EXPECT_TRUE(c.tensor_indexes.empty());
}

TEST(VolumeTensorIndexTest, ATamperedIndexIsDataLossNamingIt) {
  Fixture f = MakeFixture();
  f.input.tensor_indexes = {FixtureTensors(f)};
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  TensorIndex evil = FixtureTensors(f);
  evil.tensors[1].hash[0] ^= 1;
  TarWriter w;
  ASSERT_OK(w.AddFile(".modelfs/model.json", SerializeVolumeModelJson(v.model_info)));
  ASSERT_OK(w.AddFile(v.model_info.layers[0].chunk_index->path,
                      SerializeChunkIndex(f.input.chunk_indexes[0])));
  ASSERT_OK(w.AddFile(v.model_info.layers[0].tensor_index->path, SerializeTensorIndex(evil)));
  EXPECT_THAT(ParseVolumeLayer(w.Finish()),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("tensor index " + v.model_info.layers[0].tensor_index->path)));
}

TEST(VolumeTensorIndexTest, AnIndexForNoLayerOfTheModelIsRefused) {
  Fixture f = MakeFixture();
  TensorIndex t = FixtureTensors(f);
  t.layer_digest = Digest::Of("other");
  f.input.tensor_indexes = {t};
  EXPECT_THAT(BuildVolumeImage(f.input),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names no layer")));
}

// The tar layer of MakeTarFixture holding tiny.gguf, indexed as a tar member (what
// TarTensorIndexer gives), and the README's tar followed with no weight file in it.
std::vector<TarTensorIndexes> FixtureTarTensors(const Fixture& f) {
  TarTensorIndexes weights, readme;
  weights.tar_digest = f.model.layers[0].digest;
  weights.tar_size = f.model.layers[0].size;
  TensorIndex t = FixtureTensors(f);
  t.layer_digest = weights.tar_digest;
  t.layer_size = weights.tar_size;
  t.file_offset = 512;
  weights.files.push_back({"tiny.gguf", t});
  readme.tar_digest = f.model.layers[1].digest;
  readme.tar_size = f.model.layers[1].size;
  return {weights, readme};
}

TEST(VolumeTensorIndexTest, ATarLayersWeightFilesAreListedByMemberAndReadBack) {
  Fixture f = MakeTarFixture();
  f.input.image_compatible = false;
  f.input.tar_tensor_indexes = FixtureTarTensors(f);
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  const std::string json = SerializeVolumeModelJson(v.model_info);
  EXPECT_THAT(json, HasSubstr("\"revision\":2"));
  EXPECT_THAT(json, HasSubstr("\"tensorIndexes\":[{\"digest\":\"sha256:"));
  EXPECT_THAT(json, HasSubstr("\"file\":\"tiny.gguf\""));
  EXPECT_THAT(json, HasSubstr("\"path\":\".modelfs/tensors/" +
                              std::string(f.model.layers[0].digest.hex()) + "-0.tidx\""));
  EXPECT_THAT(json, HasSubstr("\"tensorIndexes\":[]"));  // the README's tar: none
  EXPECT_THAT(json, ::testing::Not(HasSubstr("\"tensorIndex\":")));
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents c, ParseVolumeLayer(v.layer));
  ASSERT_EQ(c.tar_tensor_indexes.size(), 2u);
  const std::vector<TarTensorIndex>& got = c.tar_tensor_indexes.at(f.model.layers[0].digest);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], FixtureTarTensors(f)[0].files[0]);
  EXPECT_TRUE(c.tar_tensor_indexes.at(f.model.layers[1].digest).empty());
  ASSERT_OK_AND_ASSIGN(VolumeModelInfo back, ParseVolumeModelJson(json));
  EXPECT_EQ(back, v.model_info);
}

TEST(VolumeTensorIndexTest, ATarIndexOfAnotherSizeThanTheTarIsRefused) {
  Fixture f = MakeTarFixture();
  f.input.image_compatible = false;
  std::vector<TarTensorIndexes> t = FixtureTarTensors(f);
  t[0].tar_size += 1;
  f.input.tar_tensor_indexes = t;
  EXPECT_THAT(BuildVolumeImage(f.input),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("do not fit the layer")));
}

TEST(VolumeTensorIndexTest, TarIndexesOnARawLayerOrAnUnsafeFileAreRefused) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  VolumeModelInfo info = v.model_info;
  info.layers[0].tar_tensor_indexes = std::vector<VolumeTensorIndexRef>{
      {".modelfs/tensors/x-0.tidx", Digest::Of("x"), 1, "tiny.gguf"}};
  EXPECT_THAT(ParseVolumeModelJson(SerializeVolumeModelJson(info)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensorIndexes")));
  Fixture t = MakeTarFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage tv, BuildVolumeImage(t.input));
  info = tv.model_info;
  info.layers[0].tar_tensor_indexes = std::vector<VolumeTensorIndexRef>{
      {".modelfs/tensors/x-0.tidx", Digest::Of("x"), 1, "../tiny.gguf"}};
  EXPECT_THAT(ParseVolumeModelJson(SerializeVolumeModelJson(info)).status(),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("file")));
}

TEST(VolumeTensorIndexTest, AReaderTakesAnyRevisionButRefusesAnotherSchemaVersion) {
  Fixture f = MakeFixture();
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(f.input));
  VolumeModelInfo info = v.model_info;
  info.revision = 3;  // a later additive revision: unknown fields are ignored
  ASSERT_OK_AND_ASSIGN(VolumeModelInfo back, ParseVolumeModelJson(SerializeVolumeModelJson(info)));
  EXPECT_EQ(back.revision, 3);
  info.schema_version = 2;
  EXPECT_THAT(ParseVolumeModelJson(SerializeVolumeModelJson(info)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("schemaVersion")));
}

}  // namespace
}  // namespace modelfs

namespace modelfs {
namespace {

// What `modelfs diff` reads of a V is its manifest, config and A (with M's manifest and config):
// for an 8 GiB model in four safetensors shards of a Llama 3 8B's 291 tensors, A with its chunk
// and tensor indexes is 312,320 bytes (305 KiB), so a diff of two such models reads under 1 MiB.
TEST(VolumeTensorIndexTest, AnEightGiBModelsVolumeLayerKeepsADiffUnderOneMiB) {
  constexpr uint64_t kShard = 2ull << 30;
  std::vector<ModelLayerInput> layers;
  std::vector<ChunkIndex> chunks;
  std::vector<TensorIndex> tensors;
  for (int s = 0; s < 4; ++s) {
    const Digest d = Digest::Of("shard" + std::to_string(s));
    layers.push_back({"model-0000" + std::to_string(s + 1) + "-of-00004.safetensors", d, kShard,
                      LayerKind::kWeight, LayerEncoding::kRaw, ""});
    ChunkIndex c;
    c.blob_digest = d;
    c.blob_size = kShard;
    c.algorithm = ChunkDigestAlgorithm::kBlake3;
    c.chunks.resize(kShard / ChunkIndex::kDefaultChunkSize);
    chunks.push_back(std::move(c));
    TensorIndex t;
    t.layer_digest = d;
    t.layer_size = t.file_size = kShard;
    for (int i = 0; i < 73; ++i) {
      t.tensors.push_back({"model.layers." + std::to_string(s * 8 + i / 9) + ".self_attn.q_proj" +
                               std::to_string(i) + ".weight",
                           "BF16",
                           {4096, 4096},
                           static_cast<uint64_t>(i) << 25,
                           1ull << 25,
                           {}});
    }
    tensors.push_back(std::move(t));
  }
  ModelPackConfig config;
  const std::string config_blob = SerializeModelPackConfig(config);
  VolumeImageInput in;
  in.model = *BuildModelManifest(config_blob, layers);
  in.model_manifest = DescribeBlob(kOciManifestMediaType, SerializeManifest(in.model));
  in.repository = "registry.local:5000/models/llama3-8b";
  in.chunk_indexes = std::move(chunks);
  in.tensor_indexes = std::move(tensors);
  ASSERT_OK_AND_ASSIGN(VolumeImage v, BuildVolumeImage(in));
  EXPECT_TRUE(v.index_layers.empty());
  EXPECT_LT(v.layer.size(), 320u << 10);
  EXPECT_LT(2 * (v.layer.size() + v.manifest_json.size() + v.config.size() +
                 in.model_manifest.size + config_blob.size()),
            1u << 20);
}

}  // namespace
}  // namespace modelfs
