// Docker model artifacts (`docker model package`, Docker Hub's ai/ catalogue) as sources: an
// artifact built here by hand with Docker's exact media types (config v0.1: one GGUF, a
// license, a chat template and a directory tar) is pulled, mounted lazily and converted to a
// volume image, and every path shows the files where Docker's tools lay them out, bit for bit.
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/oci/digest.h"
#include "core/oci/tar.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

constexpr char kRepo[] = "ai/tiny";

class DockerModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || !std::filesystem::exists("/dev/fuse")) {
      if (const char* ci = getenv("CI"); ci != nullptr && std::string(ci) == "true") {
        FAIL() << "needs root and /dev/fuse (CI=true: a missing component fails)";
      }
      GTEST_SKIP() << "needs root and /dev/fuse";
    }
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start());
    const std::string src = tmp_.Join("src").string();
    ASSERT_OK(WriteTestModel(src, /*seed=*/61).status());
    // What Docker's bundle shows, by path.
    want_["model.gguf"] = ReadFileOrDie(src + "/tiny.gguf");
    want_["LICENSE"] = "Apache License 2.0, for the test\n";
    want_["template.jinja"] = "{% for m in messages %}{{ m.content }}{% endfor %}\n";
    want_["tokenizer.json"] = ReadFileOrDie(src + "/tokenizer.json");
    want_["config.json"] = ReadFileOrDie(src + "/config.json");

    ASSERT_OK_AND_ASSIGN(auto client, ConnectPlainHttp(registry_->host_port()));
    TarWriter dir_tar;
    ASSERT_OK(dir_tar.AddFile("tokenizer.json", want_["tokenizer.json"]));
    ASSERT_OK(dir_tar.AddFile("config.json", want_["config.json"]));
    const std::vector<std::pair<std::string, std::string>> layers = {
        {"application/vnd.docker.ai.gguf.v3", want_["model.gguf"]},
        {"application/vnd.docker.ai.license", want_["LICENSE"]},
        {"application/vnd.docker.ai.chat.template.jinja", want_["template.jinja"]},
        {"application/vnd.docker.ai.dir.tar", dir_tar.Finish()},
    };
    nlohmann::json descs = nlohmann::json::array();
    nlohmann::json files = nlohmann::json::array();
    for (const auto& [media_type, bytes] : layers) {
      ASSERT_OK_AND_ASSIGN(Digest d, UploadBlob(*client, kRepo, bytes));
      descs.push_back({{"mediaType", media_type}, {"digest", d.str()}, {"size", bytes.size()}});
      files.push_back({{"diffID", d.str()}, {"type", media_type}});
    }
    const std::string config =
        nlohmann::json({{"config", {{"format", "gguf"}, {"size", "1.2MB"}}}, {"files", files}})
            .dump();
    ASSERT_OK_AND_ASSIGN(Digest cd, UploadBlob(*client, kRepo, config));
    nlohmann::json manifest = {{"schemaVersion", 2},
                               {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                               {"config",
                                {{"mediaType", "application/vnd.docker.ai.model.config.v0.1+json"},
                                 {"digest", cd.str()},
                                 {"size", config.size()}}},
                               {"layers", descs}};
    ASSERT_OK(client
                  ->PutManifest(kRepo, "v1", manifest.dump(),
                                "application/vnd.oci.image.manifest.v1+json")
                  .status());
  }

  std::string Ref(const std::string& tag) const {
    return absl::StrCat(registry_->host_port(), "/", kRepo, ":", tag);
  }

  // Every regular file under `dir` but .modelinfo.json equals want_, byte for byte.
  void ExpectDockerLayout(const std::string& dir) {
    std::map<std::string, std::string> got = DescribeFiles(dir);
    got.erase(".modelinfo.json");
    std::map<std::string, std::string> want;
    for (const auto& [path, bytes] : want_) want[path] = Digest::Of(bytes).str();
    EXPECT_EQ(got, want);
    EXPECT_EQ(ReadFileOrDie(dir + "/model.gguf"), want_["model.gguf"]);
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
  std::map<std::string, std::string> want_;
};

TEST_F(DockerModelTest, PullWritesTheFilesWhereDockersToolsLayThemOut) {
  const std::string dest = tmp_.Join("dest").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"pull", "--plain-http", Ref("v1"), dest}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectDockerLayout(dest);
}

TEST_F(DockerModelTest, MountServesTheArtifactVerifiedWithItsModelinfo) {
  MountOptions o;
  o.cache_dir = tmp_.Join("cache").string();
  const std::string dir = tmp_.Join("mnt").string();
  std::filesystem::create_directories(dir);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelMount> m, ModelMount::Start(Ref("v1"), dir, o));
  ExpectDockerLayout(dir);
  nlohmann::json info = nlohmann::json::parse(ReadFileOrDie(dir + "/.modelinfo.json"), nullptr,
                                              /*allow_exceptions=*/false);
  ASSERT_TRUE(info.is_object());
  EXPECT_NE(info.dump().find("model.gguf"), std::string::npos) << info.dump();
  EXPECT_OK(m->Unmount());
}

TEST_F(DockerModelTest, ConvertWritesAVolumeImageThatMountsTheSameFiles) {
  ASSERT_OK_AND_ASSIGN(ProcessResult c, RunModelfs({"convert", "--plain-http", Ref("v1")}));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  MountOptions o;
  o.cache_dir = tmp_.Join("cache").string();
  const std::string dir = tmp_.Join("mnt-volume").string();
  std::filesystem::create_directories(dir);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelMount> m, ModelMount::Start(Ref("v1-volume"), dir, o));
  ExpectDockerLayout(dir);
  EXPECT_OK(m->Unmount());
}

}  // namespace
}  // namespace modelfs::testing
