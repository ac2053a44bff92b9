// Unit tests for MetadataStore: containerd snapshots/storage behaviours on SQLite.
#include "snapshotter/store/metadata_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testsupport/fakes/fake_clock.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::snapshotter {
namespace {

using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

class MetadataStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = MetadataStore::Open(dir_.Join("metadata.db"), &clock_);
    ASSERT_OK(store);
    store_ = std::move(store).value();
  }

  // Creates active `key` on `parent` and commits it as `name`.
  void MakeCommitted(const std::string& key, const std::string& name, const std::string& parent) {
    ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kActive, key, parent, {}));
    ASSERT_OK(store_->CommitActive(key, name, Usage{4096, 2}, {}));
  }

  std::vector<std::string> WalkNames(const std::vector<std::string>& filters) {
    std::vector<std::string> names;
    EXPECT_OK(store_->Walk(filters, [&](const SnapshotInfo& info) {
      names.push_back(info.name);
      return absl::OkStatus();
    }));
    return names;
  }

  modelfs::testing::FakeClock clock_;
  modelfs::testing::TempDir dir_;
  std::unique_ptr<MetadataStore> store_;
};

TEST_F(MetadataStoreTest, CreatedActiveSnapshotReportsKindParentAndLabels) {
  MakeCommitted("a-key", "base", "");
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kActive, "child", "base", {{"x", "1"}}));
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, store_->GetInfo("child"));
  EXPECT_EQ(info.name, "child");
  EXPECT_EQ(info.parent, "base");
  EXPECT_EQ(info.kind, SnapshotKind::kActive);
  EXPECT_THAT(info.labels, ElementsAre(Pair("x", "1")));
  EXPECT_EQ(info.created, info.updated);
}

TEST_F(MetadataStoreTest, CreatingAnExistingKeyIsAlreadyExists) {
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kActive, "k", "", {}));
  EXPECT_THAT(store_->CreateSnapshot(SnapshotKind::kView, "k", "", {}),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("'k'")));
}

TEST_F(MetadataStoreTest, CreatingOnAMissingParentIsNotFound) {
  EXPECT_THAT(store_->CreateSnapshot(SnapshotKind::kActive, "k", "nope", {}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("parent 'nope'")));
}

TEST_F(MetadataStoreTest, CreatingOnAnActiveParentIsInvalidArgument) {
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kActive, "p", "", {}));
  EXPECT_THAT(store_->CreateSnapshot(SnapshotKind::kActive, "k", "p", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a committed")));
}

TEST_F(MetadataStoreTest, CreatingWithAnEmptyKeyIsInvalidArgument) {
  EXPECT_THAT(store_->CreateSnapshot(SnapshotKind::kActive, "", "", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
}

TEST_F(MetadataStoreTest, ParentIdsListTheChainNearestFirst) {
  MakeCommitted("k1", "l1", "");
  MakeCommitted("k2", "l2", "l1");
  MakeCommitted("k3", "l3", "l2");
  ASSERT_OK_AND_ASSIGN(SnapshotRecord l1, store_->GetSnapshot("l1"));
  ASSERT_OK_AND_ASSIGN(SnapshotRecord l2, store_->GetSnapshot("l2"));
  ASSERT_OK_AND_ASSIGN(SnapshotRecord l3, store_->GetSnapshot("l3"));
  ASSERT_OK_AND_ASSIGN(SnapshotRecord top,
                       store_->CreateSnapshot(SnapshotKind::kActive, "top", "l3", {}));
  EXPECT_THAT(top.parent_ids, ElementsAre(l3.id, l2.id, l1.id));
  EXPECT_THAT(l1.parent_ids, IsEmpty());
}

TEST_F(MetadataStoreTest, CommitKeepsTheIdRecordsUsageAndReplacesLabels) {
  ASSERT_OK_AND_ASSIGN(SnapshotRecord active,
                       store_->CreateSnapshot(SnapshotKind::kActive, "k", "", {{"old", "1"}}));
  ASSERT_OK_AND_ASSIGN(int64_t id, store_->CommitActive("k", "c", Usage{8192, 3}, {{"new", "2"}}));
  EXPECT_EQ(id, active.id);
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, store_->GetInfo("c"));
  EXPECT_EQ(info.kind, SnapshotKind::kCommitted);
  EXPECT_THAT(info.labels, ElementsAre(Pair("new", "2")));
  ASSERT_OK_AND_ASSIGN(Usage usage, store_->GetUsage("c"));
  EXPECT_EQ(usage.size, 8192);
  EXPECT_EQ(usage.inodes, 3);
  EXPECT_THAT(store_->GetInfo("k"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("'k'")));
}

TEST_F(MetadataStoreTest, CommittingAViewIsFailedPrecondition) {
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kView, "v", "", {}));
  EXPECT_THAT(store_->CommitActive("v", "c", {}, {}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not active")));
}

TEST_F(MetadataStoreTest, CommittingToATakenNameIsAlreadyExists) {
  MakeCommitted("k1", "c", "");
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kActive, "k2", "", {}));
  EXPECT_THAT(store_->CommitActive("k2", "c", {}, {}),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("'c'")));
}

TEST_F(MetadataStoreTest, CommittingAMissingKeyIsNotFound) {
  EXPECT_THAT(store_->CommitActive("missing", "c", {}, {}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'missing'")));
}

TEST_F(MetadataStoreTest, RemovingASnapshotWithAChildIsFailedPrecondition) {
  MakeCommitted("k1", "base", "");
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kView, "v", "base", {}));
  EXPECT_THAT(store_->Remove("base"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("'v' is its child")));
  ASSERT_OK(store_->Remove("v"));
  ASSERT_OK_AND_ASSIGN(SnapshotRecord removed, store_->Remove("base"));
  EXPECT_EQ(removed.kind, SnapshotKind::kCommitted);
  EXPECT_THAT(store_->Remove("base"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("'base'")));
}

TEST_F(MetadataStoreTest, IdsAreNotReusedAfterRemove) {
  ASSERT_OK_AND_ASSIGN(SnapshotRecord first,
                       store_->CreateSnapshot(SnapshotKind::kActive, "a", "", {}));
  ASSERT_OK(store_->Remove("a"));
  ASSERT_OK_AND_ASSIGN(SnapshotRecord second,
                       store_->CreateSnapshot(SnapshotKind::kActive, "a", "", {}));
  EXPECT_GT(second.id, first.id);
}

TEST_F(MetadataStoreTest, UpdateWithLabelPathSetsOneLabelAndKeepsTheOthers) {
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kActive, "k", "", {{"a", "1"}, {"b", "2"}}));
  clock_.Advance(absl::Seconds(5));
  SnapshotInfo change;
  change.name = "k";
  change.labels = {{"b", "20"}, {"c", "ignored"}};
  ASSERT_OK_AND_ASSIGN(SnapshotInfo updated, store_->UpdateInfo(change, {"labels.b"}));
  EXPECT_THAT(updated.labels, ElementsAre(Pair("a", "1"), Pair("b", "20")));
  EXPECT_EQ(updated.created, clock_.Now() - absl::Seconds(5));
  EXPECT_EQ(updated.updated, clock_.Now());
}

TEST_F(MetadataStoreTest, UpdateWithLabelPathAbsentFromInfoDeletesTheLabel) {
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kActive, "k", "", {{"a", "1"}, {"b", "2"}}));
  SnapshotInfo change;
  change.name = "k";
  ASSERT_OK_AND_ASSIGN(SnapshotInfo updated, store_->UpdateInfo(change, {"labels.a"}));
  EXPECT_THAT(updated.labels, ElementsAre(Pair("b", "2")));
}

TEST_F(MetadataStoreTest, UpdateWithoutPathsReplacesAllLabels) {
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kActive, "k", "", {{"a", "1"}}));
  SnapshotInfo change;
  change.name = "k";
  change.labels = {{"z", "9"}};
  ASSERT_OK_AND_ASSIGN(SnapshotInfo updated, store_->UpdateInfo(change, {}));
  EXPECT_THAT(updated.labels, ElementsAre(Pair("z", "9")));
  ASSERT_OK_AND_ASSIGN(SnapshotInfo stored, store_->GetInfo("k"));
  EXPECT_THAT(stored.labels, ElementsAre(Pair("z", "9")));
}

TEST_F(MetadataStoreTest, UpdateOfAnImmutableFieldIsInvalidArgument) {
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kActive, "k", "", {}));
  SnapshotInfo change;
  change.name = "k";
  EXPECT_THAT(store_->UpdateInfo(change, {"parent"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'parent'")));
}

TEST_F(MetadataStoreTest, WalkWithFiltersReturnsSnapshotsMatchingAnyFilter) {
  MakeCommitted("k1", "base", "");
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kActive, "a", "base", {{"team", "ml"}}));
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kView, "v", "base", {{"team", "web"}}));
  EXPECT_THAT(WalkNames({}), ElementsAre("a", "base", "v"));
  EXPECT_THAT(WalkNames({"kind==committed"}), ElementsAre("base"));
  EXPECT_THAT(WalkNames({"labels.team==ml", "kind==view"}), ElementsAre("a", "v"));
  EXPECT_THAT(WalkNames({"parent==base,labels.\"team\"!=ml"}), ElementsAre("v"));
  EXPECT_THAT(WalkNames({"labels.team"}), ElementsAre("a", "v"));
}

TEST_F(MetadataStoreTest, AnEmptyParentFilterSelectsBaseSnapshots) {
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kActive, "base", "", {}).status());
  ASSERT_OK(store_->CommitActive("base", "base-c", {}, {}).status());
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kActive, "child", "base-c", {}).status());
  std::vector<std::string> names;
  ASSERT_OK(store_->Walk({"parent==\"\""}, [&](const SnapshotInfo& i) {
    names.push_back(i.name);
    return absl::OkStatus();
  }));
  EXPECT_EQ(names, std::vector<std::string>{"base-c"});
}

TEST_F(MetadataStoreTest, WalkWithAnUnknownFilterFieldIsInvalidArgument) {
  EXPECT_THAT(store_->Walk({"colour==red"}, [](const SnapshotInfo&) { return absl::OkStatus(); }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'colour'")));
}

TEST_F(MetadataStoreTest, SnapshotsSurviveReopeningTheDatabase) {
  MakeCommitted("k1", "base", "");
  ASSERT_OK(store_->CreateSnapshot(SnapshotKind::kActive, "a", "base", {{"x", "y"}}));
  store_.reset();
  ASSERT_OK_AND_ASSIGN(store_, MetadataStore::Open(dir_.Join("metadata.db"), &clock_));
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, store_->GetInfo("a"));
  EXPECT_EQ(info.parent, "base");
  EXPECT_THAT(info.labels, ElementsAre(Pair("x", "y")));
}

TEST_F(MetadataStoreTest, ALabelLongerThan4096BytesIsInvalidArgument) {
  Labels big = {{"k", std::string(4096, 'v')}};
  EXPECT_THAT(store_->CreateSnapshot(SnapshotKind::kActive, "a", "", big),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("label 'k'")));
  ASSERT_OK(
      store_->CreateSnapshot(SnapshotKind::kActive, "a", "", {{"k", std::string(4095, 'v')}}));
  SnapshotInfo change;
  change.name = "a";
  change.labels = big;
  EXPECT_THAT(store_->UpdateInfo(change, {"labels.k"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("4096")));
  EXPECT_THAT(store_->CommitActive("a", "c", {}, big),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'c'")));
}

TEST_F(MetadataStoreTest, AFailingBeforeCommitHookRollsTheSnapshotBack) {
  int64_t seen_id = 0;
  auto fail = [&](const SnapshotRecord& rec) {
    seen_id = rec.id;
    return absl::InternalError("rename failed");
  };
  EXPECT_THAT(store_->CreateSnapshot(SnapshotKind::kActive, "k", "", {}, fail),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("rename failed")));
  EXPECT_EQ(seen_id, 1);
  EXPECT_THAT(store_->GetInfo("k"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("'k'")));
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> ids, store_->Ids());
  EXPECT_THAT(ids, IsEmpty());
}

}  // namespace
}  // namespace modelfs::snapshotter
