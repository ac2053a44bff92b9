// `modelfs push` and `modelfs pull` against a real docker-registry: bit-exact round trips by
// tag and by digest, idempotent pushes, cross-repository mounts, and a tampered blob that pull
// must refuse without leaving anything behind.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/oci/digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::Each;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Lt;
using ::testing::Not;
using ::testing::SizeIs;

// Blob roles push reports besides the model's files.
bool IsFileRole(const std::string& role) {
  return role != "config" && role != "volume layer" && role != "volume config";
}

// One registry and one pushed model for the round-trip tests; each test pulls into its own
// directory or pushes to its own repository.
class PushPullTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto registry = RegistryFixture::Start();
    ASSERT_OK(registry.status());
    registry_ = registry->release();
    model_dir_ = new TempDir();
    auto files = WriteTestModel(model_dir_->path().string());
    ASSERT_OK(files.status());
    files_ = new std::vector<std::string>(*files);
    ASSERT_OK_AND_ASSIGN(ProcessResult push,
                         RunModelfs({"push", "--plain-http", Ref("demo/llama:v1"),
                                     model_dir_->path().string(), "--json"}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    first_push_ = new nlohmann::json(ParseJsonOutput(push.out));
  }
  static void TearDownTestSuite() {
    delete first_push_;
    delete files_;
    delete model_dir_;
    delete registry_;
  }
  void SetUp() override {
    ASSERT_NE(registry_, nullptr);
    ASSERT_NE(first_push_, nullptr);
  }

  static std::string Ref(const std::string& repo_and_tag) {
    return absl::StrCat(registry_->host_port(), "/", repo_and_tag);
  }
  static std::map<std::string, std::string> ModelFiles() {
    return DescribeFiles(model_dir_->path().string());
  }
  // Pulls `ref` into a fresh directory under `tmp`; returns that directory.
  static std::string PullOrFail(const std::string& ref, const TempDir& tmp) {
    std::string dest = tmp.Join("dest").string();
    absl::StatusOr<ProcessResult> pull = RunModelfs({"pull", "--plain-http", ref, dest, "--json"});
    EXPECT_OK(pull.status());
    if (pull.ok()) {
      EXPECT_EQ(pull->exit_code, 0) << pull->err;
    }
    return dest;
  }

  static RegistryFixture* registry_;
  static TempDir* model_dir_;
  static std::vector<std::string>* files_;
  static nlohmann::json* first_push_;
};

RegistryFixture* PushPullTest::registry_ = nullptr;
TempDir* PushPullTest::model_dir_ = nullptr;
std::vector<std::string>* PushPullTest::files_ = nullptr;
nlohmann::json* PushPullTest::first_push_ = nullptr;

TEST_F(PushPullTest, FirstPushUploadsEveryFileConfigAndVolumeBlob) {
  const nlohmann::json& j = *first_push_;
  // One layer per file, M's config, V's layer and V's config.
  EXPECT_EQ(j["uploaded"], files_->size() + 3);
  EXPECT_EQ(j["present"], 0);
  EXPECT_EQ(j["mounted"], 0);
  std::vector<std::string> roles;
  for (const auto& b : j["blobs"]) {
    if (IsFileRole(b["role"])) roles.push_back(b["role"]);
  }
  std::sort(roles.begin(), roles.end());
  EXPECT_EQ(roles, *files_);
  EXPECT_EQ(j["model"]["tag"], "v1");
  EXPECT_EQ(j["volume"]["tag"], "v1-volume");
}

TEST_F(PushPullTest, PushedLayerDigestsAreTheFilesSha256) {
  std::map<std::string, std::string> files = ModelFiles();
  for (const auto& b : (*first_push_)["blobs"]) {
    if (!IsFileRole(b["role"])) continue;
    EXPECT_EQ(b["digest"], files[b["role"].get<std::string>()]) << b["role"];
  }
}

TEST_F(PushPullTest, PullByTagRestoresEveryFileBitForBit) {
  TempDir tmp;
  std::string dest = PullOrFail(Ref("demo/llama:v1"), tmp);
  EXPECT_EQ(DescribeFiles(dest), ModelFiles());
}

TEST_F(PushPullTest, PullOfTheVolumeTagRestoresEveryFileBitForBit) {
  TempDir tmp;
  std::string dest = PullOrFail(Ref("demo/llama:v1-volume"), tmp);
  EXPECT_EQ(DescribeFiles(dest), ModelFiles());
}

TEST_F(PushPullTest, PullByPinnedModelDigestRestoresEveryFileBitForBit) {
  TempDir tmp;
  std::string m = (*first_push_)["model"]["digest"];
  std::string dest = PullOrFail(Ref("demo/llama@" + m), tmp);
  EXPECT_EQ(DescribeFiles(dest), ModelFiles());
}

TEST_F(PushPullTest, PullByPinnedVolumeDigestFollowsItToTheModel) {
  TempDir tmp;
  std::string v = (*first_push_)["volume"]["digest"];
  std::string dest = tmp.Join("dest").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult pull, RunModelfs({"pull", "--plain-http",
                                                       Ref("demo/llama@" + v), dest, "--json"}));
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  nlohmann::json j = ParseJsonOutput(pull.out);
  EXPECT_EQ(j["model"]["digest"], (*first_push_)["model"]["digest"]);
  EXPECT_EQ(j["volume"]["digest"], v);
  EXPECT_EQ(DescribeFiles(dest), ModelFiles());
}

TEST_F(PushPullTest, PullLeavesNoStagingOrPartFilesBehind) {
  TempDir tmp;
  std::string dest = PullOrFail(Ref("demo/llama:v1"), tmp);
  for (const auto& [path, what] : DescribeTree(dest)) {
    EXPECT_FALSE(absl::StrContains(path, ".part")) << path;
    EXPECT_FALSE(absl::StrContains(path, ".modelfs-pull")) << path;
  }
}

TEST_F(PushPullTest, SecondPushOfTheSameFilesUploadsNothingAndGivesTheSameDigests) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push, RunModelfs({"push", "--plain-http", Ref("demo/llama:v1"),
                                                       model_dir_->path().string(), "--json"}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  nlohmann::json j = ParseJsonOutput(push.out);
  EXPECT_EQ(j["uploaded"], 0);
  EXPECT_EQ(j["present"], files_->size() + 3);
  EXPECT_EQ(j["model"]["digest"], (*first_push_)["model"]["digest"]);
  EXPECT_EQ(j["volume"]["digest"], (*first_push_)["volume"]["digest"]);
}

TEST_F(PushPullTest, TextOutputEndsWithTheVolumeImagePinnedByDigestAloneOnTheLastLine) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push, RunModelfs({"push", "--plain-http", Ref("demo/llama:v1"),
                                                       model_dir_->path().string()}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  const std::string v = (*first_push_)["volume"]["reference"];
  EXPECT_EQ(v, Ref("demo/llama@") + std::string((*first_push_)["volume"]["digest"]));
  ASSERT_TRUE(absl::EndsWith(push.out, "\n")) << push.out;
  const std::string body = push.out.substr(0, push.out.size() - 1);
  EXPECT_EQ(body.substr(body.rfind('\n') + 1), v) << push.out;
  EXPECT_THAT(push.out, HasSubstr("\npin pods to the volume image (volumes[].image.reference):\n" +
                                  v + "\n"));
  // M is still printed, for pull, mount and signing, before the line to copy.
  EXPECT_THAT(push.out, HasSubstr("model artifact (modelfs pull/mount, signing): " +
                                  std::string((*first_push_)["model"]["reference"]) + "\n"));
}

TEST_F(PushPullTest, PushWithAVolumeTagPublishesTheSameVolumeImageUnderThatTag) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push, RunModelfs({"push", "--plain-http", Ref("demo/llama:v2"),
                                                       model_dir_->path().string(), "--volume-tag",
                                                       "v2-vol", "--json"}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  nlohmann::json j = ParseJsonOutput(push.out);
  EXPECT_EQ(j["volume"]["tag"], "v2-vol");
  // Same files, same repository: the same M and so the same V, whatever the tags.
  EXPECT_EQ(j["model"]["digest"], (*first_push_)["model"]["digest"]);
  EXPECT_EQ(j["volume"]["digest"], (*first_push_)["volume"]["digest"]);
  TempDir tmp;
  std::string dest = PullOrFail(Ref("demo/llama:v2-vol"), tmp);
  EXPECT_EQ(DescribeFiles(dest), ModelFiles());
}

TEST_F(PushPullTest, PushWithMountFromSendsNoWeightBytes) {
  ASSERT_OK_AND_ASSIGN(
      ProcessResult push,
      RunModelfs({"push", "--plain-http", Ref("other/llama-copy:v1"), model_dir_->path().string(),
                  "--mount-from", "demo/llama", "--json"}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  nlohmann::json j = ParseJsonOutput(push.out);
  std::vector<std::string> file_actions;
  for (const auto& b : j["blobs"]) {
    if (IsFileRole(b["role"])) file_actions.push_back(b["action"]);
  }
  EXPECT_THAT(file_actions, SizeIs(files_->size()));
  EXPECT_THAT(file_actions, Each(std::string("mounted")));
  EXPECT_EQ(j["mounted"], files_->size());
  // Only manifests, M's config and V's small blobs travel.
  EXPECT_THAT(j["bytes_uploaded"].get<uint64_t>(), Lt(64u << 10));
}

TEST_F(PushPullTest, ARepositoryFilledByMountsPullsBitForBit) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push,
                       RunModelfs({"push", "--plain-http", Ref("other/mounted:v1"),
                                   model_dir_->path().string(), "--mount-from", "demo/llama"}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  TempDir tmp;
  std::string dest = PullOrFail(Ref("other/mounted:v1-volume"), tmp);
  EXPECT_EQ(DescribeFiles(dest), ModelFiles());
}

TEST_F(PushPullTest, TarLayersRoundTripBitForBit) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push,
                       RunModelfs({"push", "--plain-http", Ref("demo/llama-tar:v1"),
                                   model_dir_->path().string(), "--tar", "--json"}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  nlohmann::json j = ParseJsonOutput(push.out);
  for (const auto& b : j["blobs"]) {
    if (IsFileRole(b["role"])) {
      EXPECT_TRUE(absl::EndsWith(b["mediaType"].get<std::string>(), ".v1.tar")) << b.dump();
    }
  }
  TempDir tmp;
  std::string dest = PullOrFail(Ref("demo/llama-tar:v1"), tmp);
  EXPECT_EQ(DescribeFiles(dest), ModelFiles());
}

// push's default is BLAKE3 at 1 MiB for a small model; `inspect` of V names both per layer.
TEST_F(PushPullTest, PushIndexesWithBlake3ByDefaultAndInspectSaysSo) {
  ASSERT_OK_AND_ASSIGN(ProcessResult inspect, RunModelfs({"inspect", "--plain-http",
                                                          Ref("demo/llama:v1-volume"), "--json"}));
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  nlohmann::json j = ParseJsonOutput(inspect.out);
  ASSERT_EQ(j["layers"].size(), files_->size());
  for (const auto& l : j["layers"]) {
    ASSERT_TRUE(l["chunkIndex"].is_object()) << l.dump();
    EXPECT_EQ(l["chunkIndex"]["algorithm"], "blake3") << l.dump();
    EXPECT_EQ(l["chunkIndex"]["chunkSize"], 1u << 20) << l.dump();
  }
}

TEST_F(PushPullTest, PushWithAChunkSizeAndSha256WritesThoseIndexesAndPullsBitForBit) {
  ASSERT_OK_AND_ASSIGN(
      ProcessResult push,
      RunModelfs({"push", "--plain-http", Ref("demo/llama-sha:v1"), model_dir_->path().string(),
                  "--chunk-size", "64KiB", "--chunk-digest", "sha256"}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  ASSERT_OK_AND_ASSIGN(
      ProcessResult inspect,
      RunModelfs({"inspect", "--plain-http", Ref("demo/llama-sha:v1-volume"), "--json"}));
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  for (const auto& l : ParseJsonOutput(inspect.out)["layers"]) {
    EXPECT_EQ(l["chunkIndex"]["algorithm"], "sha256") << l.dump();
    EXPECT_EQ(l["chunkIndex"]["chunkSize"], 64u << 10) << l.dump();
  }
  TempDir tmp;
  std::string dest = PullOrFail(Ref("demo/llama-sha:v1-volume"), tmp);
  EXPECT_EQ(DescribeFiles(dest), ModelFiles());
}

TEST_F(PushPullTest, AChunkSizeThatIsNotAPowerOfTwoIsBadInput) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push,
                       RunModelfs({"push", "--plain-http", Ref("demo/llama-bad:v1"),
                                   model_dir_->path().string(), "--chunk-size", "3MiB"}));
  EXPECT_EQ(push.exit_code, 2);
  EXPECT_THAT(push.err, HasSubstr("--chunk-size 3MiB: want a power of two"));
}

// A registry of its own: tampering with a blob's stored bytes would break the other tests.
TEST(TamperedBlobTest, PullByDigestRefusesATamperedWeightLayerAndLeavesNothingBehind) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RegistryFixture> registry, RegistryFixture::Start());
  TempDir tmp;
  std::string model = tmp.Join("model").string();
  ASSERT_OK(WriteTestModel(model, /*seed=*/11).status());
  std::string repo = registry->host_port() + "/demo/tampered";
  ASSERT_OK_AND_ASSIGN(ProcessResult push,
                       RunModelfs({"push", "--plain-http", repo + ":v1", model, "--json"}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  nlohmann::json j = ParseJsonOutput(push.out);

  std::string weights_digest;
  for (const auto& b : j["blobs"]) {
    if (absl::EndsWith(b["role"].get<std::string>(), ".safetensors")) {
      weights_digest = b["digest"];
      break;
    }
  }
  ASSERT_FALSE(weights_digest.empty()) << j.dump();
  ASSERT_OK_AND_ASSIGN(Digest d, Digest::Parse(weights_digest));
  std::string blob_path = registry->BlobDataPath(d);
  {
    std::fstream f(blob_path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << blob_path;
    f.seekg(1 << 20);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x01);
    f.seekp(1 << 20);
    f.write(&c, 1);
    ASSERT_TRUE(f.good());
  }

  std::string dest = tmp.Join("dest").string();
  std::string pinned = repo + "@" + j["model"]["digest"].get<std::string>();
  ASSERT_OK_AND_ASSIGN(ProcessResult pull, RunModelfs({"pull", "--plain-http", pinned, dest}));
  EXPECT_EQ(pull.exit_code, 1) << pull.err;
  EXPECT_THAT(pull.err, HasSubstr(weights_digest));
  // Nothing at all: no model file, no .part file, no staging directory.
  EXPECT_THAT(DescribeTree(dest), IsEmpty());
}

}  // namespace
}  // namespace modelfs::testing
