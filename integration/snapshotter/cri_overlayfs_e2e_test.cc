// The harness itself against containerd's own overlayfs snapshotter (no modelfs daemon): CRI
// PullImage through the runtime.v1 client, then Prepare/View/Stat/List/Remove through
// containerd's Snapshots API in namespace k8s.io, mounted with mount(2). What the modelfs tests
// build on, proven where the behaviour is containerd's.
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/snapshotter/snapshotter_daemon.h"
#include "testsupport/cri/cri_client.h"
#include "testsupport/harness/containerd_fixture.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs::testing {
namespace {

using ::testing::IsEmpty;

// Prepared snapshots are GC roots, as a container's would be (see kGcRootLabel).
std::map<std::string, std::string> GcRoot() { return {{kGcRootLabel, "modelfs-e2e"}}; }

class CriOverlayfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = Containerd::WhyUnavailable();
    SKIP_OR_FAIL_IF_UNAVAILABLE(why);
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start());
    ContainerdOptions co;
    co.registry_host_port = registry_->host_port();
    co.cri = true;
    co.cri_snapshotter = "overlayfs";
    ASSERT_OK_AND_ASSIGN(containerd_, Containerd::Start(co));
    ASSERT_OK_AND_ASSIGN(cri_, CriImageClient::Connect(containerd_->grpc_target()));
    ASSERT_OK_AND_ASSIGN(snapshots_, SnapshotsClient::Connect(containerd_->grpc_target(),
                                                              "overlayfs", containerd_->ns()));
    ASSERT_OK_AND_ASSIGN(
        image_, PushOrdinaryImage(registry_->host_port(), "e2e/plain", "v1",
                                  {{{"a/one.txt", "one\n"}, {"b/two.bin", std::string(70000, 'x')}},
                                   {{"a/one.txt", "one, replaced\n"}}}));
  }

  std::unique_ptr<RegistryFixture> registry_;
  std::unique_ptr<Containerd> containerd_;
  std::unique_ptr<CriImageClient> cri_;
  std::unique_ptr<SnapshotsClient> snapshots_;
  PushedImage image_;
};

TEST_F(CriOverlayfsTest, PullImageReturnsTheConfigDigestAndImageStatusFindsIt) {
  ASSERT_OK_AND_ASSIGN(std::string ref, cri_->PullImage(image_.reference));
  EXPECT_EQ(ref, image_.config_digest);
  ASSERT_OK_AND_ASSIGN(std::optional<CriImage> status, cri_->ImageStatus(image_.reference));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->id, image_.config_digest);
  EXPECT_EQ(status->repo_tags, std::vector<std::string>{image_.reference});
}

TEST_F(CriOverlayfsTest, RemovedImageIsAbsentFromImageStatus) {
  ASSERT_OK(cri_->PullImage(image_.reference).status());
  ASSERT_OK(cri_->RemoveImage(image_.reference));
  ASSERT_OK_AND_ASSIGN(std::optional<CriImage> status, cri_->ImageStatus(image_.reference));
  EXPECT_FALSE(status.has_value());
}

TEST_F(CriOverlayfsTest, PulledLayersAreCommittedUnderTheirChainIds) {
  ASSERT_OK(cri_->PullImage(image_.reference).status());
  ASSERT_OK_AND_ASSIGN(SnapshotInfo top, snapshots_->Stat(image_.chain_id));
  EXPECT_EQ(top.kind, SnapshotInfo::Kind::kCommitted);
  EXPECT_EQ(top.parent, image_.diff_ids[0]);
  ASSERT_OK_AND_ASSIGN(std::vector<SnapshotInfo> all, snapshots_->List());
  std::vector<std::string> names;
  for (const auto& i : all) names.push_back(i.name);
  EXPECT_THAT(names, ::testing::UnorderedElementsAre(image_.diff_ids[0], image_.chain_id));
}

TEST_F(CriOverlayfsTest, PreparedSnapshotMountsTheImageFilesAndTakesWrites) {
  ASSERT_OK(cri_->PullImage(image_.reference).status());
  ASSERT_OK_AND_ASSIGN(std::vector<SnapshotMount> mounts,
                       snapshots_->Prepare("rw-1", image_.chain_id, GcRoot()));
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_EQ(mounts[0].type, "overlay");
  std::string mnt = containerd_->MountPoint("rw-1");
  ASSERT_OK(MountAll(mounts, mnt));
  EXPECT_EQ(ReadFileOrDie(mnt + "/a/one.txt"), "one, replaced\n");
  EXPECT_EQ(ReadFileOrDie(mnt + "/b/two.bin"), std::string(70000, 'x'));
  int fd = open((mnt + "/new.txt").c_str(), O_WRONLY | O_CREAT, 0644);
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
  ASSERT_OK(UnmountAll(mnt));
  EXPECT_THAT(MountsUnder(mnt), IsEmpty());
  ASSERT_OK_AND_ASSIGN(SnapshotInfo active, snapshots_->Stat("rw-1"));
  EXPECT_EQ(active.kind, SnapshotInfo::Kind::kActive);
  ASSERT_OK(snapshots_->Remove("rw-1"));
  EXPECT_EQ(snapshots_->Stat("rw-1").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CriOverlayfsTest, ViewIsReadOnly) {
  ASSERT_OK(cri_->PullImage(image_.reference).status());
  ASSERT_OK_AND_ASSIGN(std::vector<SnapshotMount> mounts,
                       snapshots_->View("ro-1", image_.chain_id, GcRoot()));
  std::string mnt = containerd_->MountPoint("ro-1");
  ASSERT_OK(MountAll(mounts, mnt));
  EXPECT_EQ(ReadFileOrDie(mnt + "/a/one.txt"), "one, replaced\n");
  int fd = open((mnt + "/new.txt").c_str(), O_WRONLY | O_CREAT, 0644);
  const int err = errno;
  if (fd >= 0) close(fd);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(err, EROFS);
  ASSERT_OK(UnmountAll(mnt));
}

}  // namespace
}  // namespace modelfs::testing
