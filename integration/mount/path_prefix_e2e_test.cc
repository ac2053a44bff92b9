// `--path-prefix` on push and convert: a volume image V that shows the model under a directory,
// as KServe's `oci+native://` storageUri expects (it mounts the image volume at /mnt/models with
// `subPath: models`). M itself keeps its paths. Checked through `modelfs mount` (the loader the
// snapshotter uses too) and `modelfs pull`, byte for byte.
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class PathPrefixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start());
    src_ = tmp_.Join("src").string();
    ASSERT_OK(WriteTestModel(src_, /*seed=*/53).status());
    for (const auto& [path, digest] : DescribeFiles(src_)) under_models_["models/" + path] = digest;
    ref_ = absl::StrCat(registry_->host_port(), "/models/served:v1");
  }

  // Mounts `ref` and returns its files (without .modelinfo.json), checking it has one.
  // The files a mount of `ref` shows, but for .modelinfo.json, which must be at the root and,
  // for a V with a path prefix, inside the prefix too (a pod mounting subPath `prefix` sees it).
  std::map<std::string, std::string> MountedFiles(const std::string& ref, const std::string& name,
                                                  const std::string& prefix = "") {
    if (geteuid() != 0 || !fs::exists("/dev/fuse")) return {};
    BecomeSubreaper();
    const std::string dir = tmp_.Join("mnt-" + name).string();
    fs::create_directories(dir);
    MountOptions o;
    o.cache_dir = tmp_.Join("cache-" + name).string();
    auto m = ModelMount::Start(ref, dir, o);
    EXPECT_OK(m.status());
    if (!m.ok()) return {};
    std::map<std::string, std::string> got = DescribeFiles(dir);
    EXPECT_EQ(got.count(".modelinfo.json"), 1u);
    got.erase(".modelinfo.json");
    if (!prefix.empty()) {
      EXPECT_EQ(got.erase(prefix + "/.modelinfo.json"), 1u) << ref;
    }
    EXPECT_OK((*m)->Unmount());
    return got;
  }

  bool CanMount() const { return geteuid() == 0 && fs::exists("/dev/fuse"); }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
  std::string src_;
  std::string ref_;
  std::map<std::string, std::string> under_models_;  // "models/<path>" -> sha256
};

TEST_F(PathPrefixTest, PushWithAPrefixShowsTheModelUnderItInTheVolumeImageOnly) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push,
                       RunModelfs({"push", "--plain-http", "--path-prefix", "models", ref_, src_}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  if (!CanMount()) SKIP_OR_FAIL_IF_UNAVAILABLE("needs root and /dev/fuse");
  EXPECT_EQ(MountedFiles(ref_ + "-volume", "volume", "models"), under_models_);
  EXPECT_EQ(MountedFiles(ref_, "model"), DescribeFiles(src_));  // M keeps its own paths
}

TEST_F(PathPrefixTest, ConvertWithAPrefixWritesAVolumeImageForKServe) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push, RunModelfs({"push", "--plain-http", ref_, src_}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  ASSERT_OK_AND_ASSIGN(ProcessResult conv,
                       RunModelfs({"convert", "--plain-http", "--path-prefix", "models",
                                   "--volume-tag", "v1-kserve", ref_}));
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  const std::string kserve = absl::StrCat(registry_->host_port(), "/models/served:v1-kserve");
  // pull lays the model out as the mount shows it.
  const std::string dest = tmp_.Join("pulled").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult pull, RunModelfs({"pull", "--plain-http", kserve, dest}));
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  EXPECT_EQ(DescribeFiles(dest), under_models_);
  if (!CanMount()) SKIP_OR_FAIL_IF_UNAVAILABLE("needs root and /dev/fuse");
  EXPECT_EQ(MountedFiles(kserve, "kserve", "models"), under_models_);
  EXPECT_EQ(MountedFiles(ref_ + "-volume", "plain"), DescribeFiles(src_));
}

TEST_F(PathPrefixTest, APrefixThatEscapesIsABadInvocation) {
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       RunModelfs({"push", "--plain-http", "--path-prefix", "../up", ref_, src_}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("path prefix '../up'"));
}

}  // namespace
}  // namespace modelfs::testing
