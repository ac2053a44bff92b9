// `modelfs convert SRC --to DST` for a model in a repository you can only read: SRC is on
// registry 1 behind credentials that may only pull (htpasswd auth, and a proxy in front that
// refuses every write, since Distribution has no per-user access control), DST is on
// registry 2 with other credentials. Both come from one docker config.json, per host.
//
// Checked: convert writes V into DST and uploads none of M's blobs there; the same convert
// into SRC itself is refused; `modelfs mount DST` reads every byte of M from registry 1, and
// `modelfs pull DST` downloads them from there too.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/oci/digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kReader[] = "reader";
constexpr char kReaderPassword[] = "reader-password-1";
constexpr char kWriter[] = "writer";
constexpr char kWriterPassword[] = "writer-password-2";

// Lines of a registry access log that upload something (POST, PUT, PATCH).
std::vector<std::string> Uploads(const std::string& log_path) {
  std::vector<std::string> out;
  std::ifstream in(log_path);
  std::string line;
  while (std::getline(in, line)) {
    for (const char* verb : {"\"POST /v2/", "\"PUT /v2/", "\"PATCH /v2/"}) {
      if (line.find(verb) != std::string::npos) out.push_back(line);
    }
  }
  return out;
}

class ConvertToTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegistryFixtureOptions o1;
    o1.auth = RegistryFixtureOptions::Auth::kHtpasswd;
    o1.username = kReader;
    o1.password = kReaderPassword;
    o1.access_log = true;
    ASSERT_OK_AND_ASSIGN(source_, RegistryFixture::Start(o1));
    FaultProxyOptions po;
    po.read_only = true;
    ASSERT_OK_AND_ASSIGN(read_only_, FaultProxy::Start(source_->host_port(), po));

    RegistryFixtureOptions o2;
    o2.auth = RegistryFixtureOptions::Auth::kHtpasswd;
    o2.username = kWriter;
    o2.password = kWriterPassword;
    o2.access_log = true;
    ASSERT_OK_AND_ASSIGN(target_, RegistryFixture::Start(o2));

    // The publisher pushed M to registry 1 directly; everyone else sees it through the
    // read-only front, with credentials that may only pull.
    const std::string src = tmp_.Join("src").string();
    ASSERT_OK(WriteTestModel(src, /*seed=*/41).status());
    want_ = DescribeFiles(src);
    const std::string publisher_config = tmp_.Join("publisher.json").string();
    std::ofstream(publisher_config)
        << DockerConfigJson(source_->host_port(), kReader, kReaderPassword);
    ASSERT_OK_AND_ASSIGN(
        ProcessResult push,
        RunModelfs({"push", "--plain-http", "--docker-config", publisher_config, "--json",
                    absl::StrCat(source_->host_port(), "/models/llama:v1"), src}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    nlohmann::json pushed = ParseJsonOutput(push.out);
    for (const auto& b : pushed["blobs"]) {
      const std::string role = b["role"].get<std::string>();
      if (role != "volume layer" && role != "volume config") {
        model_blobs_.insert(b["digest"].get<std::string>());
      }
    }
    model_blobs_.insert(pushed["model"]["digest"].get<std::string>());
    ASSERT_GE(model_blobs_.size(), want_.size() + 2);  // every file, the config, the manifest

    // One config.json, a credential per host: read-only for registry 1, push for registry 2.
    nlohmann::json config = {
        {"auths",
         {{read_only_->host_port(),
           {{"auth", absl::Base64Escape(absl::StrCat(kReader, ":", kReaderPassword))}}},
          {target_->host_port(),
           {{"auth", absl::Base64Escape(absl::StrCat(kWriter, ":", kWriterPassword))}}}}}};
    docker_config_ = tmp_.Join("config.json").string();
    std::ofstream(docker_config_) << config.dump(2);
    src_ref_ = absl::StrCat(read_only_->host_port(), "/models/llama:v1");
    dst_ref_ = absl::StrCat(target_->host_port(), "/team/llama:v1-volume");
  }

  absl::StatusOr<ProcessResult> Modelfs(std::vector<std::string> args) {
    args.insert(args.begin() + 1, {"--plain-http", "--docker-config", docker_config_});
    return RunModelfs(args);
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> source_;
  std::unique_ptr<FaultProxy> read_only_;
  std::unique_ptr<RegistryFixture> target_;
  std::map<std::string, std::string> want_;
  std::set<std::string> model_blobs_;  // M's manifest, config and layers
  std::string docker_config_;
  std::string src_ref_;
  std::string dst_ref_;
};

TEST_F(ConvertToTest, ConvertingInPlaceIsRefusedWithReadOnlyCredentials) {
  ASSERT_OK_AND_ASSIGN(ProcessResult r, Modelfs({"convert", src_ref_}));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("HTTP 403"));
  EXPECT_THAT(r.err, HasSubstr(read_only_->host_port()));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr(kReaderPassword)));
}

TEST_F(ConvertToTest, ConvertWritesTheVolumeImageIntoTheTargetAndNoWeights) {
  const size_t uploads_before = Uploads(target_->log_path()).size();
  ASSERT_OK_AND_ASSIGN(ProcessResult r, Modelfs({"convert", "--json", src_ref_, "--to", dst_ref_}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json out = ParseJsonOutput(r.out);
  EXPECT_EQ(out["repository"], absl::StrCat(target_->host_port(), "/team/llama"));
  EXPECT_EQ(out["model"]["repository"], absl::StrCat(read_only_->host_port(), "/models/llama"));
  EXPECT_EQ(out["volume"]["tag"], "v1-volume");
  EXPECT_EQ(out["uploaded"], 2);  // V's layer and config: nothing of M
  ASSERT_OK_AND_ASSIGN(int refused, read_only_->Stat("refused_writes"));
  EXPECT_EQ(refused, 0);  // convert --to never tries to write to SRC

  for (const std::string& d : model_blobs_) {
    ASSERT_OK_AND_ASSIGN(Digest digest, Digest::Parse(d));
    EXPECT_FALSE(fs::exists(target_->BlobDataPath(digest))) << d << " was copied to registry 2";
  }
  for (const std::string& line : Uploads(target_->log_path())) {
    for (const std::string& d : model_blobs_) {
      EXPECT_EQ(line.find(d), std::string::npos) << "registry 2 got " << line;
    }
  }
  EXPECT_GT(Uploads(target_->log_path()).size(), uploads_before);
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr(kWriterPassword)));
}

TEST_F(ConvertToTest, MountOfTheConvertedVolumeReadsEveryByteFromTheSourceRegistry) {
  if (geteuid() != 0 || !fs::exists("/dev/fuse")) {
    SKIP_OR_FAIL_IF_UNAVAILABLE("needs root and /dev/fuse");
  }
  BecomeSubreaper();
  ASSERT_OK_AND_ASSIGN(ProcessResult c, Modelfs({"convert", src_ref_, "--to", dst_ref_}));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const std::string dir = tmp_.Join("mnt").string();
  fs::create_directories(dir);
  MountOptions o;
  o.cache_dir = tmp_.Join("cache").string();
  o.docker_config = docker_config_;
  o.log_file = tmp_.Join("mount.log").string();
  const size_t source_log_before = ReadAll(source_->log_path()).size();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelMount> m, ModelMount::Start(dst_ref_, dir, o));
  std::map<std::string, std::string> got = DescribeFiles(dir);
  got.erase(".modelinfo.json");
  EXPECT_EQ(got, want_);
  for (const auto& [path, digest] : want_) {
    EXPECT_EQ(Sha256Of(ReadFileOrDie(dir + "/" + path)), digest) << path;
  }
  EXPECT_OK(m->Unmount());
  if (HasFailure()) std::cerr << ReadAll(o.log_file);
  // M came from registry 1: its access log has the mount's reads of every blob of M.
  const std::string log = ReadAll(source_->log_path()).substr(source_log_before);
  for (const std::string& d : model_blobs_) {
    EXPECT_NE(log.find(d), std::string::npos) << d << " was not read from registry 1";
  }
}

TEST_F(ConvertToTest, PullOfTheConvertedVolumeDownloadsTheWeightsFromTheSourceRegistry) {
  ASSERT_OK_AND_ASSIGN(ProcessResult c, Modelfs({"convert", src_ref_, "--to", dst_ref_}));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const std::string dest = tmp_.Join("pulled").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult p, Modelfs({"pull", dst_ref_, dest}));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(DescribeFiles(dest), want_);
}

// The CLI follows V to M's registry where the user points it, and says so on stderr, naming
// the repository (the snapshotter would refuse it unless model_hosts allows it).
TEST_F(ConvertToTest, PullSaysWhenTheVolumeImageSendsItToAnotherRegistry) {
  ASSERT_OK_AND_ASSIGN(ProcessResult c, Modelfs({"convert", src_ref_, "--to", dst_ref_}));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  ASSERT_OK_AND_ASSIGN(ProcessResult p, Modelfs({"pull", dst_ref_, tmp_.Join("pulled").string()}));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_THAT(p.err, HasSubstr(absl::StrCat("modelfs: note: volume image ", dst_ref_,
                                            " names its model in repository ")));
  EXPECT_THAT(p.err,
              HasSubstr(absl::StrCat(" on registry ", read_only_->host_port(),
                                     ", not in its own repository ", target_->host_port(), "/")));
}

TEST_F(ConvertToTest, ATagInToAndADifferentVolumeTagIsABadInvocation) {
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       Modelfs({"convert", src_ref_, "--to", dst_ref_, "--volume-tag", "other"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--volume-tag"));
}

}  // namespace
}  // namespace modelfs::testing
