// The graceful path on a node without modelfs: a real containerd 1.6 (testsupport/harness/
// containerd_fixture.h: CRI disabled, overlayfs snapshotter, its own root, state and socket) pulls
// the volume image V that `modelfs push` wrote. It unpacks only V's small layer, the mounted image
// shows the `.modelfs/` pointer files, and the registry's access log shows that no byte of the
// model's layers was fetched.
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/oci/volume_image.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/harness/containerd_fixture.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

// "GET /v2/<repo>/blobs/<digest>" lines with status 200 in the registry's access log after
// `offset`, as digests.
std::multiset<std::string> BlobGets(const std::string& log, size_t offset,
                                    const std::string& repo) {
  std::multiset<std::string> out;
  std::regex re(
      absl::StrCat("\"GET /v2/", repo, "/blobs/(sha256:[0-9a-f]{64}) HTTP/[0-9.]+\" 200 "));
  std::string tail = log.substr(std::min(offset, log.size()));
  for (std::sregex_iterator it(tail.begin(), tail.end(), re), end; it != end; ++it) {
    out.insert((*it)[1].str());
  }
  return out;
}

class ContainerdFallbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = Containerd::WhyUnavailable();
    SKIP_OR_FAIL_IF_UNAVAILABLE(why);
    RegistryFixtureOptions o;
    o.access_log = true;
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start(o));
    ASSERT_OK(WriteTestModel(tmp_.Join("model").string(), /*seed=*/31).status());
    ASSERT_OK_AND_ASSIGN(ProcessResult push, RunModelfs({"push", "--plain-http", Ref("v1"),
                                                         tmp_.Join("model").string(), "--json"}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    push_ = ParseJsonOutput(push.out);
    ContainerdOptions co;
    co.registry_host_port = registry_->host_port();
    absl::StatusOr<std::unique_ptr<Containerd>> c = Containerd::Start(co);
    ASSERT_OK(c.status());
    containerd_ = std::move(*c);
  }

  std::string Ref(const std::string& tag) const {
    return absl::StrCat(registry_->host_port(), "/", kRepo, ":", tag);
  }
  std::string BlobDigest(const std::string& role) const {
    for (const auto& b : push_["blobs"]) {
      if (b["role"] == role) return b["digest"];
    }
    return "";
  }

  static constexpr char kRepo[] = "fallback/llama";
  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
  nlohmann::json push_;
  std::unique_ptr<Containerd> containerd_;  // destroyed first: unmounts before dirs go
};

TEST_F(ContainerdFallbackTest, PullingTheVolumeImageFetchesOnlyItsSmallLayerAndShowsThePointer) {
  const size_t log_offset = ReadFileOrDie(registry_->log_path()).size();
  ASSERT_OK_AND_ASSIGN(ProcessResult pull,
                       containerd_->Ctr({"images", "pull", "--hosts-dir", containerd_->hosts_dir(),
                                         "--snapshotter", "overlayfs", Ref("v1-volume")}));
  ASSERT_EQ(pull.exit_code, 0) << pull.out << pull.err;

  // The registry served V's config and V's layer A, once each, and nothing else.
  std::multiset<std::string> gets =
      BlobGets(ReadFileOrDie(registry_->log_path()), log_offset, kRepo);
  EXPECT_EQ(gets,
            (std::multiset<std::string>{BlobDigest("volume layer"), BlobDigest("volume config")}));
  for (const auto& b : push_["blobs"]) {
    std::string role = b["role"];
    if (role == "volume layer" || role == "volume config") continue;
    EXPECT_EQ(gets.count(b["digest"]), 0u) << role << " was downloaded";
  }

  std::string mnt = containerd_->MountPoint();
  ASSERT_OK_AND_ASSIGN(ProcessResult mount,
                       containerd_->Ctr({"images", "mount", "--snapshotter", "overlayfs",
                                         "--rw=false", Ref("v1-volume"), mnt}));
  ASSERT_EQ(mount.exit_code, 0) << mount.out << mount.err;
  std::map<std::string, std::string> tree = DescribeTree(mnt);
  std::string readme = ReadFileOrDie(mnt + "/.modelfs/README.txt");
  std::string model_json = ReadFileOrDie(mnt + "/.modelfs/model.json");
  ASSERT_OK_AND_ASSIGN(ProcessResult unmount, containerd_->Ctr({"images", "unmount", mnt}));
  EXPECT_EQ(unmount.exit_code, 0) << unmount.out << unmount.err;
  EXPECT_THAT(MountsUnder(mnt), IsEmpty());

  EXPECT_TRUE(tree.count(".modelfs/README.txt"));
  EXPECT_TRUE(tree.count(".modelfs/model.json"));
  // Only the pointer: no model file reached the node.
  for (const auto& [path, what] : tree) {
    EXPECT_TRUE(absl::StartsWith(path, ".modelfs")) << path;
  }
  std::string m = push_["model"]["digest"];
  EXPECT_THAT(readme, HasSubstr(m));
  ASSERT_OK_AND_ASSIGN(VolumeModelInfo info, ParseVolumeModelJson(model_json));
  EXPECT_EQ(info.manifest.digest.str(), m);
  EXPECT_EQ(info.repository, absl::StrCat(registry_->host_port(), "/", kRepo));
}

}  // namespace
}  // namespace modelfs::testing
