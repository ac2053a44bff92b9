// `modelfs convert` on a ModelPack artifact that some other tool pushed without a volume image
// (built here with the registry client and BuildModelManifest, raw and .tar layers): it writes
// V, V pulls bit for bit, and V's chunk indexes are exactly the indexes of M's layers.
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/oci/chunk_index.h"
#include "core/oci/manifest.h"
#include "core/oci/media_types.h"
#include "core/oci/modelpack.h"
#include "core/oci/tar.h"
#include "core/oci/volume_image.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Lt;
using ::testing::SizeIs;

constexpr char kRepo[] = "modctl/llama";

// Files that go into one .tar layer together (as modctl packs a directory of small files).
bool InTarLayer(const std::string& rel) { return rel == "README.md" || rel == "tokenizer.json"; }

class ConvertTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto registry = RegistryFixture::Start();
    ASSERT_OK(registry.status());
    registry_ = registry->release();
    model_dir_ = new TempDir();
    ASSERT_OK_AND_ASSIGN(std::vector<std::string> files,
                         WriteTestModel(model_dir_->path().string(), /*seed=*/23));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<RegistryClient> client,
                         ConnectPlainHttp(registry_->host_port()));
    layers_ = new std::vector<std::string>();

    std::vector<ModelLayerInput> inputs;
    TarWriter tar;
    auto add = [&](const std::string& path, LayerKind kind, LayerEncoding enc, std::string bytes) {
      ModelLayerInput in;
      in.path = path;
      in.size = bytes.size();
      in.kind = kind;
      in.encoding = enc;
      absl::StatusOr<Digest> d = UploadBlob(*client, kRepo, bytes);
      ASSERT_OK(d.status());
      in.digest = *d;
      inputs.push_back(in);
      layers_->push_back(std::move(bytes));
    };
    for (const auto& rel : files) {
      std::string bytes = ReadFileOrDie(model_dir_->Join(rel).string());
      if (InTarLayer(rel)) {
        ASSERT_OK(tar.AddFile(rel, bytes));
      } else {
        add(rel, ClassifyFile(rel), LayerEncoding::kRaw, std::move(bytes));
      }
    }
    add("extras.tar", LayerKind::kWeightConfig, LayerEncoding::kTar, tar.Finish());

    ModelPackConfig config;
    config.descriptor.name = "llama";
    config.config.format = "safetensors";
    for (const auto& in : inputs) config.modelfs.diff_ids.push_back(in.digest);
    std::string config_json = SerializeModelPackConfig(config);
    ASSERT_OK(UploadBlob(*client, kRepo, config_json).status());
    ASSERT_OK_AND_ASSIGN(Manifest m, BuildModelManifest(config_json, inputs));
    std::string manifest_json = SerializeManifest(m);
    ASSERT_OK_AND_ASSIGN(Digest md, client->PutManifest(kRepo, "v1", manifest_json,
                                                        std::string(kOciManifestMediaType)));
    model_digest_ = new std::string(md.str());
  }
  static void TearDownTestSuite() {
    delete model_digest_;
    delete layers_;
    delete model_dir_;
    delete registry_;
  }
  void SetUp() override { ASSERT_NE(model_digest_, nullptr); }

  static std::string Ref(const std::string& tag) {
    return absl::StrCat(registry_->host_port(), "/", kRepo, ":", tag);
  }
  // Converts once per test suite (the first test that needs V does it).
  static const nlohmann::json& Converted() {
    if (convert_ == nullptr) {
      absl::StatusOr<ProcessResult> r =
          RunModelfs({"convert", "--plain-http", Ref("v1"), "--json"});
      EXPECT_OK(r.status());
      if (r.ok()) {
        EXPECT_EQ(r->exit_code, 0) << r->err;
      }
      convert_ = new nlohmann::json(r.ok() ? ParseJsonOutput(r->out) : nlohmann::json());
    }
    return *convert_;
  }

  static RegistryFixture* registry_;
  static TempDir* model_dir_;
  static std::vector<std::string>* layers_;  // bytes of M's layers, in order
  static std::string* model_digest_;
  static nlohmann::json* convert_;
};

RegistryFixture* ConvertTest::registry_ = nullptr;
TempDir* ConvertTest::model_dir_ = nullptr;
std::vector<std::string>* ConvertTest::layers_ = nullptr;
std::string* ConvertTest::model_digest_ = nullptr;
nlohmann::json* ConvertTest::convert_ = nullptr;

TEST_F(ConvertTest, ConvertWritesAVolumeImageForTheModelWithoutUploadingWeights) {
  const nlohmann::json& j = Converted();
  EXPECT_EQ(j["model"]["digest"], *model_digest_);
  EXPECT_EQ(j["volume"]["tag"], "v1-volume");
  EXPECT_EQ(j["present"], layers_->size());
  // V's layer and config only (and manifests): never a weight byte.
  EXPECT_EQ(j["uploaded"], 2);
  EXPECT_THAT(j["bytes_uploaded"].get<uint64_t>(), Lt(64u << 10));
}

TEST_F(ConvertTest, PullOfTheConvertedVolumeTagRestoresEveryFileBitForBit) {
  ASSERT_FALSE(Converted().is_null());
  TempDir tmp;
  std::string dest = tmp.Join("dest").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult pull,
                       RunModelfs({"pull", "--plain-http", Ref("v1-volume"), dest, "--json"}));
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  EXPECT_EQ(ParseJsonOutput(pull.out)["model"]["digest"], *model_digest_);
  EXPECT_EQ(DescribeFiles(dest), DescribeFiles(model_dir_->path().string()));
}

TEST_F(ConvertTest, VolumeChunkIndexesAreTheIndexesOfTheModelLayers) {
  ASSERT_FALSE(Converted().is_null());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RegistryClient> client,
                       ConnectPlainHttp(registry_->host_port()));
  ASSERT_OK_AND_ASSIGN(ManifestResult vm, client->GetManifest(kRepo, "v1-volume"));
  EXPECT_EQ(vm.digest.str(), Converted()["volume"]["digest"]);
  ASSERT_OK_AND_ASSIGN(Manifest v, ParseManifest(vm.bytes));
  ASSERT_THAT(v.layers, SizeIs(1));
  ASSERT_TRUE(v.subject.has_value());
  EXPECT_EQ(v.subject->digest.str(), *model_digest_);
  ASSERT_OK_AND_ASSIGN(std::string a, FetchBlob(*client, kRepo, v.layers[0].digest.str()));
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents contents, ParseVolumeLayer(a));
  EXPECT_EQ(contents.model.manifest.digest.str(), *model_digest_);
  ASSERT_THAT(contents.model.layers, SizeIs(layers_->size()));
  ASSERT_THAT(contents.chunk_indexes, SizeIs(layers_->size()));
  for (size_t i = 0; i < layers_->size(); ++i) {
    // convert's default: 1 MiB chunks for a small model, BLAKE3.
    ChunkIndexBuilder b(ChunkIndex::kDefaultChunkSize, ChunkDigestAlgorithm::kBlake3);
    b.Update((*layers_)[i]);
    ChunkIndex want = b.Finish();
    const VolumeLayerRecord& rec = contents.model.layers[i];
    EXPECT_EQ(rec.digest, want.blob_digest) << i;
    EXPECT_EQ(rec.size, (*layers_)[i].size()) << i;
    auto it = contents.chunk_indexes.find(want.blob_digest);
    ASSERT_NE(it, contents.chunk_indexes.end()) << rec.path;
    EXPECT_EQ(it->second, want) << rec.path;
  }
}

TEST_F(ConvertTest, VolumeCarriesATensorIndexOfEachRawWeightFileThatDiffAgreesWith) {
  ASSERT_FALSE(Converted().is_null());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RegistryClient> client,
                       ConnectPlainHttp(registry_->host_port()));
  ASSERT_OK_AND_ASSIGN(ManifestResult vm, client->GetManifest(kRepo, "v1-volume"));
  ASSERT_OK_AND_ASSIGN(Manifest v, ParseManifest(vm.bytes));
  ASSERT_OK_AND_ASSIGN(std::string a, FetchBlob(*client, kRepo, v.layers[0].digest.str()));
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents contents, ParseVolumeLayer(a));
  size_t weights = 0;
  for (const VolumeLayerRecord& rec : contents.model.layers) {
    const bool weight = rec.path.ends_with(".safetensors") || rec.path.ends_with(".gguf");
    weights += weight;
    EXPECT_EQ(rec.tensor_index.has_value(), weight) << rec.path;
  }
  EXPECT_GT(weights, 0u);
  EXPECT_EQ(contents.tensor_indexes.size(), weights);
  EXPECT_EQ(contents.model.revision, 2);
  // V (from its indexes) against M itself (headers read, layers hashed): every tensor identical.
  ASSERT_OK_AND_ASSIGN(ProcessResult d,
                       RunModelfs({"diff", "--plain-http", Ref("v1-volume"), Ref("v1"), "--json"}));
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const nlohmann::json j = ParseJsonOutput(d.out);
  EXPECT_EQ(j["summary"]["same"], true) << d.out;
  EXPECT_GT(j["summary"]["identical"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["a"]["source"], "index");
}

TEST_F(ConvertTest, ConvertWithAVolumeTagWritesTheSameVolumeImageUnderThatTag) {
  ASSERT_FALSE(Converted().is_null());
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"convert", "--plain-http", Ref("v1"),
                                                    "--volume-tag", "pinned-volume", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJsonOutput(r.out);
  EXPECT_EQ(j["volume"]["tag"], "pinned-volume");
  EXPECT_EQ(j["volume"]["digest"], Converted()["volume"]["digest"]);
  EXPECT_EQ(j["uploaded"], 0);  // V's blobs are already there
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RegistryClient> client,
                       ConnectPlainHttp(registry_->host_port()));
  ASSERT_OK_AND_ASSIGN(ManifestHead head, client->HeadManifest(kRepo, "pinned-volume"));
  EXPECT_EQ(head.digest.str(), Converted()["volume"]["digest"]);
}

TEST_F(ConvertTest, ConvertOfAVolumeImageIsRefusedAsBadInput) {
  ASSERT_FALSE(Converted().is_null());
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"convert", "--plain-http", Ref("v1-volume")}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("already a volume image"));
}

}  // namespace
}  // namespace modelfs::testing
