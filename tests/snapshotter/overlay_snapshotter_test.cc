// Unit tests for OverlaySnapshotter: directory layout, mount shapes, Cleanup and Usage, on a
// temporary root (no mounting; snapshots_service_e2e_test mounts for real).
#include "snapshotter/store/overlay_snapshotter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::snapshotter {
namespace {

namespace fs = std::filesystem;
using ::modelfs::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class OverlaySnapshotterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto sn = OverlaySnapshotter::Open(dir_.path());
    ASSERT_OK(sn);
    sn_ = std::move(sn).value();
  }

  int64_t IdOf(const std::string& upper_or_bind_source) {
    // <root>/snapshots/<id>/fs
    return std::stoll(fs::path(upper_or_bind_source).parent_path().filename().string());
  }

  // Prepares `key` on `parent`, writes `file` with `bytes` into it, commits it as `name`.
  int64_t MakeLayer(const std::string& name, const std::string& parent, const std::string& file,
                    const std::string& bytes) {
    auto mounts = sn_->Prepare(name + "-active", parent, {});
    EXPECT_OK(mounts);
    if (!mounts.ok()) return -1;
    std::string upper;
    for (const std::string& o : mounts->front().options) {
      if (o.rfind("upperdir=", 0) == 0) upper = o.substr(9);
    }
    if (upper.empty()) upper = mounts->front().source;
    std::ofstream(fs::path(upper) / file) << bytes;
    EXPECT_OK(sn_->Commit(name, name + "-active", {}));
    return IdOf(upper);
  }

  std::string Snap(int64_t id) { return (dir_.path() / "snapshots" / std::to_string(id)).string(); }

  modelfs::testing::TempDir dir_;
  std::unique_ptr<OverlaySnapshotter> sn_;
};

TEST_F(OverlaySnapshotterTest, ActiveBaseSnapshotIsARwBindOfItsFsDirectory) {
  ASSERT_OK_AND_ASSIGN(auto mounts, sn_->Prepare("k", "", {}));
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_EQ(mounts[0].type, "bind");
  EXPECT_EQ(mounts[0].source, Snap(1) + "/fs");
  EXPECT_THAT(mounts[0].options, ElementsAre("rw", "rbind"));
  EXPECT_TRUE(fs::is_directory(Snap(1) + "/fs"));
  EXPECT_TRUE(fs::is_directory(Snap(1) + "/work"));
}

TEST_F(OverlaySnapshotterTest, ViewWithoutParentIsARoBindAndHasNoWorkDirectory) {
  ASSERT_OK_AND_ASSIGN(auto mounts, sn_->View("v", "", {}));
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_EQ(mounts[0], (Mount{"bind", Snap(1) + "/fs", "", {"ro", "rbind"}}));
  EXPECT_FALSE(fs::exists(Snap(1) + "/work"));
}

TEST_F(OverlaySnapshotterTest, ViewOfOneCommittedLayerIsARoBindOfThatLayer) {
  int64_t base = MakeLayer("base", "", "a", "A");
  ASSERT_OK_AND_ASSIGN(auto mounts, sn_->View("v", "base", {}));
  EXPECT_THAT(mounts, ElementsAre(Mount{"bind", Snap(base) + "/fs", "", {"ro", "rbind"}}));
}

TEST_F(OverlaySnapshotterTest, ActiveOnAChainIsOverlayWithLowerdirsNewestFirst) {
  int64_t l1 = MakeLayer("l1", "", "a", "A");
  int64_t l2 = MakeLayer("l2", "l1", "b", "B");
  ASSERT_OK_AND_ASSIGN(auto mounts, sn_->Prepare("top", "l2", {}));
  ASSERT_OK_AND_ASSIGN(auto again, sn_->Mounts("top"));
  EXPECT_EQ(mounts, again);
  ASSERT_EQ(mounts.size(), 1u);
  int64_t top = l2 + 1;
  EXPECT_EQ(mounts[0].type, "overlay");
  EXPECT_EQ(mounts[0].source, "overlay");
  EXPECT_THAT(mounts[0].options,
              ElementsAre("workdir=" + Snap(top) + "/work", "upperdir=" + Snap(top) + "/fs",
                          "lowerdir=" + Snap(l2) + "/fs:" + Snap(l1) + "/fs"));
}

TEST_F(OverlaySnapshotterTest, ViewOfAChainIsOverlayWithOnlyLowerdirs) {
  int64_t l1 = MakeLayer("l1", "", "a", "A");
  int64_t l2 = MakeLayer("l2", "l1", "b", "B");
  ASSERT_OK_AND_ASSIGN(auto mounts, sn_->View("v", "l2", {}));
  EXPECT_THAT(mounts,
              ElementsAre(Mount{
                  "overlay", "overlay", "", {"lowerdir=" + Snap(l2) + "/fs:" + Snap(l1) + "/fs"}}));
}

TEST_F(OverlaySnapshotterTest, MountsOfACommittedSnapshotIsFailedPrecondition) {
  MakeLayer("base", "", "a", "A");
  EXPECT_THAT(sn_->Mounts("base"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("'base'")));
}

TEST_F(OverlaySnapshotterTest, FailedPrepareLeavesNoDirectoryBehind) {
  EXPECT_THAT(sn_->Prepare("k", "missing", {}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'missing'")));
  EXPECT_TRUE(fs::is_empty(dir_.path() / "snapshots"));
}

TEST_F(OverlaySnapshotterTest, RemoveIsLogicalAndCleanupReclaimsTheDirectory) {
  ASSERT_OK(sn_->Prepare("keep", "", {}));
  ASSERT_OK(sn_->Prepare("gone", "", {}));
  fs::create_directory(dir_.path() / "snapshots" / "new-stale");
  ASSERT_OK(sn_->Remove("gone"));
  EXPECT_TRUE(fs::exists(Snap(2)));
  ASSERT_OK(sn_->Cleanup());
  EXPECT_FALSE(fs::exists(Snap(2)));
  EXPECT_FALSE(fs::exists(dir_.path() / "snapshots" / "new-stale"));
  EXPECT_TRUE(fs::exists(Snap(1) + "/fs"));
}

TEST_F(OverlaySnapshotterTest, UsageOfActiveIsMeasuredAndOfCommittedIsRecorded) {
  ASSERT_OK_AND_ASSIGN(auto mounts, sn_->Prepare("k", "", {}));
  std::string fsdir = mounts[0].source;
  std::ofstream(fs::path(fsdir) / "f") << std::string(10000, 'x');
  fs::create_directory(fs::path(fsdir) / "d");
  fs::create_hard_link(fs::path(fsdir) / "f", fs::path(fsdir) / "d" / "link");
  ASSERT_OK_AND_ASSIGN(Usage active, sn_->GetUsage("k"));
  ASSERT_OK_AND_ASSIGN(Usage direct, DiskUsage(fsdir));
  EXPECT_EQ(active.inodes, 3);  // fs root, d, and f counted once despite the hard link
  EXPECT_GE(active.size, 10000);
  EXPECT_EQ(active.size, direct.size);
  ASSERT_OK(sn_->Commit("c", "k", {}));
  std::ofstream(fs::path(fsdir) / "after-commit") << "y";
  ASSERT_OK_AND_ASSIGN(Usage committed, sn_->GetUsage("c"));
  EXPECT_EQ(committed.inodes, 3);
  EXPECT_EQ(committed.size, active.size);
}

TEST_F(OverlaySnapshotterTest, SnapshotsSurviveReopeningTheRoot) {
  int64_t base = MakeLayer("base", "", "a", "A");
  ASSERT_OK(sn_->Prepare("top", "base", {}));
  sn_.reset();
  ASSERT_OK_AND_ASSIGN(sn_, OverlaySnapshotter::Open(dir_.path()));
  ASSERT_OK_AND_ASSIGN(auto mounts, sn_->Mounts("top"));
  EXPECT_EQ(mounts[0].options.back(), "lowerdir=" + Snap(base) + "/fs");
}

TEST_F(OverlaySnapshotterTest, StatInsideWalkSeesTheWalkedSnapshot) {
  MakeLayer("base", "", "a", "A");
  ASSERT_OK(sn_->Prepare("k", "base", {}));
  std::vector<std::string> parents;
  ASSERT_OK(sn_->Walk({}, [&](const SnapshotInfo& info) -> absl::Status {
    absl::StatusOr<SnapshotInfo> stat = sn_->Stat(info.name);
    if (!stat.ok()) return stat.status();
    parents.push_back(stat->parent);
    return absl::OkStatus();
  }));
  EXPECT_THAT(parents, ElementsAre("", "base"));
}

TEST_F(OverlaySnapshotterTest, ARemovedKeyCanBePreparedAgainInANewDirectory) {
  ASSERT_OK_AND_ASSIGN(auto first, sn_->Prepare("k", "", {}));
  ASSERT_OK(sn_->Remove("k"));
  ASSERT_OK_AND_ASSIGN(auto second, sn_->Prepare("k", "", {}));
  EXPECT_EQ(first[0].source, Snap(1) + "/fs");
  EXPECT_EQ(second[0].source, Snap(2) + "/fs");
}

TEST_F(OverlaySnapshotterTest, IndexOffComesFirstInOverlayOptionsWhenEnabled) {
  int64_t l1 = MakeLayer("l1", "", "a", "A");
  sn_.reset();
  ASSERT_OK_AND_ASSIGN(sn_,
                       OverlaySnapshotter::Open(dir_.path(), OverlayOptions{.index_off = true}));
  ASSERT_OK_AND_ASSIGN(auto mounts, sn_->Prepare("top", "l1", {}));
  int64_t top = l1 + 1;
  EXPECT_THAT(mounts, ElementsAre(Mount{
                          "overlay",
                          "overlay",
                          "",
                          {"index=off", "workdir=" + Snap(top) + "/work",
                           "upperdir=" + Snap(top) + "/fs", "lowerdir=" + Snap(l1) + "/fs"}}));
  ASSERT_OK_AND_ASSIGN(auto base, sn_->Prepare("base", "", {}));
  EXPECT_THAT(base[0].options, ElementsAre("rw", "rbind"));
}

// A lazily served image's top layer whose model directory is the image's whole merged tree:
// mounts on it stop there, so the lower layers cannot bring back what its whiteouts delete.
TEST_F(OverlaySnapshotterTest, ALowerThatIsTheWholeTreeLeavesTheLayersBelowItOut) {
  MakeLayer("l1", "", "a", "A");
  int64_t l2 = MakeLayer("l2", "l1", "b", "B");
  sn_->set_lower_resolver([l2](int64_t id) -> std::optional<OverlaySnapshotter::LowerDir> {
    if (id != l2) return std::nullopt;
    return OverlaySnapshotter::LowerDir{"/mnt/image-tree", /*whole_tree=*/true};
  });
  ASSERT_OK_AND_ASSIGN(auto view, sn_->View("v", "l2", {}));
  EXPECT_THAT(view, ElementsAre(Mount{"bind", "/mnt/image-tree", "", {"ro", "rbind"}}));
  ASSERT_OK_AND_ASSIGN(auto active, sn_->Prepare("c", "l2", {}));
  const int64_t c = l2 + 2;
  EXPECT_THAT(active,
              ElementsAre(Mount{"overlay",
                                "overlay",
                                "",
                                {"workdir=" + Snap(c) + "/work", "upperdir=" + Snap(c) + "/fs",
                                 "lowerdir=/mnt/image-tree"}}));
  // A layer built on it (an image FROM the lazy one) keeps its own directory above the tree.
  int64_t l3 = MakeLayer("l3", "l2", "c", "C");
  ASSERT_OK_AND_ASSIGN(auto above, sn_->View("v3", "l3", {}));
  EXPECT_THAT(above,
              ElementsAre(Mount{
                  "overlay", "overlay", "", {"lowerdir=" + Snap(l3) + "/fs:/mnt/image-tree"}}));
}

TEST_F(OverlaySnapshotterTest, AResolvedLowerThatIsNotTheWholeTreeKeepsTheLayersBelowIt) {
  int64_t l1 = MakeLayer("l1", "", "a", "A");
  int64_t l2 = MakeLayer("l2", "l1", "b", "B");
  sn_->set_lower_resolver([l2](int64_t id) -> std::optional<OverlaySnapshotter::LowerDir> {
    if (id != l2) return std::nullopt;
    return OverlaySnapshotter::LowerDir{"/mnt/model"};
  });
  ASSERT_OK_AND_ASSIGN(auto view, sn_->View("v", "l2", {}));
  EXPECT_THAT(view, ElementsAre(Mount{
                        "overlay", "overlay", "", {"lowerdir=/mnt/model:" + Snap(l1) + "/fs"}}));
}

TEST_F(OverlaySnapshotterTest, APrepareThatCannotRenameLeavesNoRecordAndNoDirectory) {
  // A plain file where snapshot 1's directory would go makes rename(2) fail.
  std::ofstream(dir_.path() / "snapshots" / "1") << "blocker";
  EXPECT_THAT(sn_->Prepare("k", "", {}),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("rename into")));
  EXPECT_THAT(sn_->Stat("k"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("'k'")));
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir_.path() / "snapshots")) {
    entries.push_back(e.path().filename().string());
  }
  EXPECT_THAT(entries, ElementsAre("1"));
}

}  // namespace
}  // namespace modelfs::snapshotter
