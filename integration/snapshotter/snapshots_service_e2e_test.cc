// containerd snapshotter testsuite behaviours (snapshots/testsuite), run against the
// Snapshots gRPC service over a real channel on a unix socket. The mount tests mount the
// returned overlays for real when running as root.
#include "snapshotter/model/model_snapshotter.h"
#include "snapshotter/service/snapshots_service.h"
#include "snapshotter/store/overlay_snapshotter.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_join.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::snapshotter {
namespace {

namespace fs = std::filesystem;
namespace v1 = containerd::services::snapshots::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Mounts containerd mounts at a target and unmounts them when destroyed.
class ScopedMount {
 public:
  ScopedMount(const std::vector<containerd::types::Mount>& mounts, const fs::path& target)
      : target_(target) {
    fs::create_directories(target);
    if (mounts.size() != 1) {
      error_ = "expected one mount";
      return;
    }
    const containerd::types::Mount& m = mounts[0];
    std::vector<std::string> opts(m.options().begin(), m.options().end());
    bool ro = std::find(opts.begin(), opts.end(), "ro") != opts.end();
    int rc;
    if (m.type() == "bind") {
      rc = ::mount(m.source().c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr);
      if (rc == 0 && ro) {
        mounted_ = true;
        rc = ::mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr);
      }
    } else {
      std::string data = absl::StrJoin(opts, ",");
      rc = ::mount(m.source().c_str(), target.c_str(), m.type().c_str(), 0, data.c_str());
    }
    if (rc != 0) {
      error_ = std::string("mount ") + m.type() + ": " + std::strerror(errno);
    } else {
      mounted_ = true;
    }
  }
  ~ScopedMount() {
    if (mounted_) ::umount2(target_.c_str(), MNT_DETACH);
  }
  const std::string& error() const { return error_; }

 private:
  fs::path target_;
  bool mounted_ = false;
  std::string error_;
};

// Every behaviour runs against both the overlay snapshotter and the daemon's ModelSnapshotter
// (which must treat ordinary layers exactly the same way).
class SnapshotsServiceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SKIP_OR_FAIL_IF_UNAVAILABLE(GetParam() == "modelfs" &&
                                        (::geteuid() != 0 || !fs::exists("/dev/fuse"))
                                    ? "the modelfs snapshotter needs root and /dev/fuse"
                                    : "");
    StartServer(/*list_batch=*/100);
  }

  void StartServer(int list_batch) {
    if (GetParam() == "modelfs") {
      ModelSnapshotterOptions o;
      o.root = dir_.Join("root");
      auto sn = ModelSnapshotter::Open(o);
      ASSERT_OK(sn);
      snapshotter_ = std::move(sn).value();
    } else {
      auto sn = OverlaySnapshotter::Open(dir_.Join("root"), DetectOverlayOptions());
      ASSERT_OK(sn);
      snapshotter_ = std::move(sn).value();
    }
    service_ = std::make_unique<SnapshotsService>(snapshotter_.get(), list_batch);
    service_->set_call_log([this](const std::string& line) {
      std::lock_guard<std::mutex> lock(log_mu_);
      log_.push_back(line);
    });
    std::string address = "unix:" + dir_.Join("snapshotter.sock").string();
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address, grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr) << "cannot listen on " << address;
    stub_ =
        v1::Snapshots::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  grpc::Status Prepare(const std::string& key, const std::string& parent,
                       std::vector<containerd::types::Mount>* mounts = nullptr,
                       std::map<std::string, std::string> labels = {}) {
    grpc::ClientContext ctx;
    v1::PrepareSnapshotRequest req;
    req.set_snapshotter("modelfs");
    req.set_key(key);
    req.set_parent(parent);
    req.mutable_labels()->insert(labels.begin(), labels.end());
    v1::PrepareSnapshotResponse resp;
    grpc::Status st = stub_->Prepare(&ctx, req, &resp);
    if (mounts) mounts->assign(resp.mounts().begin(), resp.mounts().end());
    return st;
  }

  grpc::Status View(const std::string& key, const std::string& parent,
                    std::vector<containerd::types::Mount>* mounts = nullptr) {
    grpc::ClientContext ctx;
    v1::ViewSnapshotRequest req;
    req.set_key(key);
    req.set_parent(parent);
    v1::ViewSnapshotResponse resp;
    grpc::Status st = stub_->View(&ctx, req, &resp);
    if (mounts) mounts->assign(resp.mounts().begin(), resp.mounts().end());
    return st;
  }

  grpc::Status Commit(const std::string& name, const std::string& key,
                      std::map<std::string, std::string> labels = {}) {
    grpc::ClientContext ctx;
    v1::CommitSnapshotRequest req;
    req.set_name(name);
    req.set_key(key);
    req.mutable_labels()->insert(labels.begin(), labels.end());
    google::protobuf::Empty resp;
    return stub_->Commit(&ctx, req, &resp);
  }

  grpc::Status Remove(const std::string& key) {
    grpc::ClientContext ctx;
    v1::RemoveSnapshotRequest req;
    req.set_key(key);
    google::protobuf::Empty resp;
    return stub_->Remove(&ctx, req, &resp);
  }

  grpc::Status Stat(const std::string& key, v1::Info* info) {
    grpc::ClientContext ctx;
    v1::StatSnapshotRequest req;
    req.set_key(key);
    v1::StatSnapshotResponse resp;
    grpc::Status st = stub_->Stat(&ctx, req, &resp);
    *info = resp.info();
    return st;
  }

  // Returns the names listed and the number of stream messages they came in.
  std::pair<std::vector<std::string>, int> List(const std::vector<std::string>& filters) {
    grpc::ClientContext ctx;
    v1::ListSnapshotsRequest req;
    for (const std::string& f : filters) req.add_filters(f);
    auto reader = stub_->List(&ctx, req);
    v1::ListSnapshotsResponse resp;
    std::vector<std::string> names;
    int messages = 0;
    while (reader->Read(&resp)) {
      messages++;
      for (const v1::Info& info : resp.info()) names.push_back(info.name());
    }
    grpc::Status st = reader->Finish();
    EXPECT_TRUE(st.ok()) << st.error_message();
    return {names, messages};
  }

  // Prepares `name`-active on parent, lets `fill` write into its mounted (or bind source)
  // directory, and commits it as `name`.
  void CommitLayer(const std::string& name, const std::string& parent,
                   const std::function<void(const fs::path&)>& fill) {
    std::vector<containerd::types::Mount> mounts;
    ASSERT_TRUE(Prepare(name + "-active", parent, &mounts).ok());
    fs::path target = dir_.Join("mnt-" + name);
    {
      ScopedMount m(mounts, target);
      ASSERT_EQ(m.error(), "");
      fill(target);
    }
    ASSERT_TRUE(Commit(name, name + "-active").ok());
  }

  bool CanMount() { return ::geteuid() == 0; }

  std::vector<std::string> Log() {
    std::lock_guard<std::mutex> lock(log_mu_);
    return log_;
  }

  modelfs::testing::TempDir dir_;
  std::mutex log_mu_;
  std::vector<std::string> log_;  // the service's call log (--log-level debug)
  std::unique_ptr<Snapshotter> snapshotter_;
  std::unique_ptr<SnapshotsService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Snapshots::Stub> stub_;
};

TEST_P(SnapshotsServiceTest, PrepareReturnsARwBindMountForABaseSnapshot) {
  std::vector<containerd::types::Mount> mounts;
  ASSERT_TRUE(Prepare("base", "", &mounts).ok());
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_EQ(mounts[0].type(), "bind");
  EXPECT_EQ(mounts[0].source(), dir_.Join("root").string() + "/snapshots/1/fs");
  EXPECT_THAT(mounts[0].options(), ElementsAre("rw", "rbind"));
}

TEST_P(SnapshotsServiceTest, StatOfAnActiveSnapshotReportsItsParentKindAndLabels) {
  ASSERT_TRUE(Prepare("k1", "").ok());
  ASSERT_TRUE(Commit("base", "k1").ok());
  ASSERT_TRUE(Prepare("child", "base", nullptr, {{"containerd.io/gc.root", "x"}}).ok());
  v1::Info info;
  ASSERT_TRUE(Stat("child", &info).ok());
  EXPECT_EQ(info.name(), "child");
  EXPECT_EQ(info.parent(), "base");
  EXPECT_EQ(info.kind(), v1::ACTIVE);
  EXPECT_THAT(info.labels(), UnorderedElementsAre(Pair("containerd.io/gc.root", "x")));
  EXPECT_GT(info.created_at().seconds(), 1700000000);
}

TEST_P(SnapshotsServiceTest, StatOfACommittedSnapshotReportsCommittedWithCommitLabels) {
  ASSERT_TRUE(Prepare("k1", "", nullptr, {{"prepare", "1"}}).ok());
  ASSERT_TRUE(Commit("base", "k1", {{"commit", "2"}}).ok());
  v1::Info info;
  ASSERT_TRUE(Stat("base", &info).ok());
  EXPECT_EQ(info.kind(), v1::COMMITTED);
  EXPECT_EQ(info.parent(), "");
  EXPECT_THAT(info.labels(), UnorderedElementsAre(Pair("commit", "2")));
  EXPECT_EQ(Stat("k1", &info).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_P(SnapshotsServiceTest, PrepareOfAKeyUsedByAViewIsAlreadyExists) {
  ASSERT_TRUE(View("k", "").ok());
  grpc::Status st = Prepare("k", "");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(st.error_message(), HasSubstr("'k'"));
}

TEST_P(SnapshotsServiceTest, PrepareOnAMissingParentIsNotFound) {
  EXPECT_EQ(Prepare("k", "nope").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_P(SnapshotsServiceTest, PrepareOnAnActiveParentIsInvalidArgumentAsInContainerd) {
  ASSERT_TRUE(Prepare("p", "").ok());
  EXPECT_EQ(Prepare("k", "p").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_P(SnapshotsServiceTest, CommitOfAViewIsFailedPrecondition) {
  ASSERT_TRUE(View("v", "").ok());
  EXPECT_EQ(Commit("c", "v").error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_P(SnapshotsServiceTest, CommitOfAMissingKeyIsNotFound) {
  EXPECT_EQ(Commit("c", "missing").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_P(SnapshotsServiceTest, CommitToAnExistingNameIsAlreadyExists) {
  ASSERT_TRUE(Prepare("k1", "").ok());
  ASSERT_TRUE(Commit("c", "k1").ok());
  ASSERT_TRUE(Prepare("k2", "").ok());
  EXPECT_EQ(Commit("c", "k2").error_code(), grpc::StatusCode::ALREADY_EXISTS);
}

TEST_P(SnapshotsServiceTest, RemoveOfAParentIsFailedPreconditionUntilItsChildIsRemoved) {
  ASSERT_TRUE(Prepare("k1", "").ok());
  ASSERT_TRUE(Commit("base", "k1").ok());
  ASSERT_TRUE(Prepare("child", "base").ok());
  EXPECT_EQ(Remove("base").error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(Remove("child").ok());
  EXPECT_TRUE(Remove("base").ok());
  EXPECT_EQ(Remove("base").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_P(SnapshotsServiceTest, MountsOfAViewOnTwoLayersIsAnOverlayOfBothLowerdirs) {
  ASSERT_TRUE(Prepare("k1", "").ok());
  ASSERT_TRUE(Commit("l1", "k1").ok());
  ASSERT_TRUE(Prepare("k2", "l1").ok());
  ASSERT_TRUE(Commit("l2", "k2").ok());
  ASSERT_TRUE(View("v", "l2").ok());
  grpc::ClientContext ctx;
  v1::MountsRequest req;
  req.set_key("v");
  v1::MountsResponse resp;
  ASSERT_TRUE(stub_->Mounts(&ctx, req, &resp).ok());
  std::string snaps = dir_.Join("root").string() + "/snapshots/";
  ASSERT_EQ(resp.mounts_size(), 1);
  EXPECT_EQ(resp.mounts(0).type(), "overlay");
  std::vector<std::string> expected;
  if (DetectOverlayOptions().index_off) expected.push_back("index=off");
  expected.push_back("lowerdir=" + snaps + "2/fs:" + snaps + "1/fs");
  EXPECT_THAT(resp.mounts(0).options(), ::testing::ElementsAreArray(expected));
}

TEST_P(SnapshotsServiceTest, UpdateWithALabelMaskChangesOnlyThatLabel) {
  ASSERT_TRUE(Prepare("k", "", nullptr, {{"a", "1"}, {"b", "2"}}).ok());
  grpc::ClientContext ctx;
  v1::UpdateSnapshotRequest req;
  req.mutable_info()->set_name("k");
  (*req.mutable_info()->mutable_labels())["a"] = "10";
  (*req.mutable_info()->mutable_labels())["b"] = "ignored";
  req.mutable_update_mask()->add_paths("labels.a");
  v1::UpdateSnapshotResponse resp;
  ASSERT_TRUE(stub_->Update(&ctx, req, &resp).ok());
  EXPECT_THAT(resp.info().labels(), UnorderedElementsAre(Pair("a", "10"), Pair("b", "2")));
  v1::Info info;
  ASSERT_TRUE(Stat("k", &info).ok());
  EXPECT_THAT(info.labels(), UnorderedElementsAre(Pair("a", "10"), Pair("b", "2")));
}

TEST_P(SnapshotsServiceTest, UpdateOfAMissingSnapshotIsNotFound) {
  grpc::ClientContext ctx;
  v1::UpdateSnapshotRequest req;
  req.mutable_info()->set_name("missing");
  v1::UpdateSnapshotResponse resp;
  EXPECT_EQ(stub_->Update(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_P(SnapshotsServiceTest, ListStreamsEverySnapshotInBatches) {
  server_->Shutdown();
  server_.reset();
  snapshotter_.reset();
  StartServer(/*list_batch=*/2);
  for (const char* key : {"a", "b", "c", "d", "e"}) ASSERT_TRUE(Prepare(key, "").ok());
  auto [names, messages] = List({});
  EXPECT_THAT(names, ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_EQ(messages, 3);
}

TEST_P(SnapshotsServiceTest, ListWithFiltersReturnsOnlyMatchingSnapshots) {
  ASSERT_TRUE(Prepare("k1", "").ok());
  ASSERT_TRUE(Commit("base", "k1").ok());
  ASSERT_TRUE(Prepare("a", "base", nullptr, {{"team", "ml"}}).ok());
  ASSERT_TRUE(View("v", "base").ok());
  EXPECT_THAT(List({"kind==view", "labels.team==ml"}).first, ElementsAre("a", "v"));
  EXPECT_THAT(List({"kind==committed"}).first, ElementsAre("base"));
}

TEST_P(SnapshotsServiceTest, ListWithABadFilterIsInvalidArgument) {
  grpc::ClientContext ctx;
  v1::ListSnapshotsRequest req;
  req.add_filters("bogus==1");
  auto reader = stub_->List(&ctx, req);
  v1::ListSnapshotsResponse resp;
  while (reader->Read(&resp)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_P(SnapshotsServiceTest, UsageCountsTheFilesOfAnActiveSnapshot) {
  std::vector<containerd::types::Mount> mounts;
  ASSERT_TRUE(Prepare("k", "", &mounts).ok());
  std::ofstream(fs::path(mounts[0].source()) / "f") << std::string(8192, 'x');
  grpc::ClientContext ctx;
  v1::UsageRequest req;
  req.set_key("k");
  v1::UsageResponse resp;
  ASSERT_TRUE(stub_->Usage(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.inodes(), 2);
  EXPECT_GE(resp.size(), 8192);
}

TEST_P(SnapshotsServiceTest, EveryCallIsLoggedOnOneLineWithItsLabelsAndCallerStringsEscaped) {
  ASSERT_TRUE(Prepare("k\nUpdate key=\"forged\" ok", "", nullptr, {{"team", "ml\x1b[31m"}}).ok());
  v1::Info info;
  EXPECT_EQ(Stat("missing", &info).error_code(), grpc::StatusCode::NOT_FOUND);
  List({"kind==active"});
  {
    grpc::ClientContext ctx;
    v1::UsageRequest req;
    req.set_key("k\nUpdate key=\"forged\" ok");
    v1::UsageResponse resp;
    ASSERT_TRUE(stub_->Usage(&ctx, req, &resp).ok());
  }
  {
    grpc::ClientContext ctx;
    v1::CleanupRequest req;
    google::protobuf::Empty resp;
    ASSERT_TRUE(stub_->Cleanup(&ctx, req, &resp).ok());
  }
  EXPECT_THAT(
      Log(),
      ElementsAre(R"(Prepare key="k\nUpdate key=\"forged\" ok" labels={"team"="ml\x1b[31m"} ok)",
                  R"(Stat key="missing" -> code 5: "snapshot 'missing' does not exist")",
                  R"(List filters="kind==active" 1 snapshots ok)",
                  R"(Usage key="k\nUpdate key=\"forged\" ok" ok)", "Cleanup ok"));
}

TEST_P(SnapshotsServiceTest, CleanupRemovesTheDirectoryOfARemovedSnapshot) {
  std::vector<containerd::types::Mount> mounts;
  ASSERT_TRUE(Prepare("k", "", &mounts).ok());
  fs::path snap_dir = fs::path(mounts[0].source()).parent_path();
  ASSERT_TRUE(Remove("k").ok());
  EXPECT_TRUE(fs::exists(snap_dir));
  grpc::ClientContext ctx;
  v1::CleanupRequest req;
  google::protobuf::Empty resp;
  ASSERT_TRUE(stub_->Cleanup(&ctx, req, &resp).ok());
  EXPECT_FALSE(fs::exists(snap_dir));
}

TEST_P(SnapshotsServiceTest, ViewOfACommittedChainShowsTheMergedFilesWhenMounted) {
  SKIP_OR_FAIL_IF_UNAVAILABLE(CanMount() ? "" : "mounting needs root");
  CommitLayer("l1", "", [](const fs::path& root) {
    std::ofstream(root / "a.txt") << "A";
    std::ofstream(root / "c.txt") << "C";
  });
  CommitLayer("l2", "l1", [](const fs::path& root) {
    EXPECT_EQ(ReadFile(root / "c.txt"), "C");  // the lower layer shows through
    std::ofstream(root / "a.txt", std::ios::trunc) << "A2";
    std::ofstream(root / "b.txt") << "B";
    fs::remove(root / "c.txt");
  });
  std::vector<containerd::types::Mount> mounts;
  ASSERT_TRUE(View("view", "l2", &mounts).ok());
  fs::path target = dir_.Join("mnt-view");
  ScopedMount m(mounts, target);
  ASSERT_EQ(m.error(), "");
  EXPECT_EQ(ReadFile(target / "a.txt"), "A2");
  EXPECT_EQ(ReadFile(target / "b.txt"), "B");
  EXPECT_FALSE(fs::exists(target / "c.txt"));
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(target)) names.insert(e.path().filename().string());
  EXPECT_THAT(names, ElementsAre("a.txt", "b.txt"));
}

TEST_P(SnapshotsServiceTest, AMountedViewIsReadOnly) {
  SKIP_OR_FAIL_IF_UNAVAILABLE(CanMount() ? "" : "mounting needs root");
  CommitLayer("l1", "", [](const fs::path& root) { std::ofstream(root / "a.txt") << "A"; });
  std::vector<containerd::types::Mount> mounts;
  ASSERT_TRUE(View("view", "l1", &mounts).ok());
  fs::path target = dir_.Join("mnt-view");
  ScopedMount m(mounts, target);
  ASSERT_EQ(m.error(), "");
  EXPECT_EQ(ReadFile(target / "a.txt"), "A");
  std::ofstream out(target / "new.txt");
  EXPECT_FALSE(out.is_open());
}

TEST_P(SnapshotsServiceTest, ACommittedLayerDoesNotChangeWhenItsChildIsWritten) {
  SKIP_OR_FAIL_IF_UNAVAILABLE(CanMount() ? "" : "mounting needs root");
  CommitLayer("l1", "", [](const fs::path& root) { std::ofstream(root / "a.txt") << "A"; });
  CommitLayer("l2", "l1", [](const fs::path& root) {
    std::ofstream(root / "a.txt", std::ios::trunc) << "changed";
  });
  std::vector<containerd::types::Mount> mounts;
  ASSERT_TRUE(View("view", "l1", &mounts).ok());
  fs::path target = dir_.Join("mnt-view");
  ScopedMount m(mounts, target);
  ASSERT_EQ(m.error(), "");
  EXPECT_EQ(ReadFile(target / "a.txt"), "A");
}

TEST_P(SnapshotsServiceTest, ANewSnapshotRootIsMode0755WhenMounted) {
  SKIP_OR_FAIL_IF_UNAVAILABLE(CanMount() ? "" : "mounting needs root");
  std::vector<containerd::types::Mount> mounts;
  ASSERT_TRUE(Prepare("k", "", &mounts).ok());
  fs::path target = dir_.Join("mnt-k");
  ScopedMount m(mounts, target);
  ASSERT_EQ(m.error(), "");
  struct stat st;
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

TEST_P(SnapshotsServiceTest, OwnershipAndModesSurviveCommitIntoAView) {
  SKIP_OR_FAIL_IF_UNAVAILABLE(CanMount() ? "" : "mounting needs root");
  CommitLayer("l1", "", [](const fs::path& root) {
    fs::create_directory(root / "dir");
    ASSERT_EQ(::chmod((root / "dir").c_str(), 0750), 0);
    std::ofstream(root / "dir" / "f") << "F";
    ASSERT_EQ(::chown((root / "dir" / "f").c_str(), 1000, 1001), 0);
  });
  CommitLayer("l2", "l1", [](const fs::path& root) { std::ofstream(root / "g") << "G"; });
  std::vector<containerd::types::Mount> mounts;
  ASSERT_TRUE(View("view", "l2", &mounts).ok());
  fs::path target = dir_.Join("mnt-view");
  ScopedMount m(mounts, target);
  ASSERT_EQ(m.error(), "");
  struct stat st;
  ASSERT_EQ(::stat((target / "dir").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  ASSERT_EQ(::stat((target / "dir" / "f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_gid, 1001u);
}

TEST_P(SnapshotsServiceTest, ADirectoryRemovedAndRecreatedInAChildHidesTheLowerContents) {
  SKIP_OR_FAIL_IF_UNAVAILABLE(CanMount() ? "" : "mounting needs root");
  CommitLayer("l1", "", [](const fs::path& root) {
    fs::create_directory(root / "dir");
    std::ofstream(root / "dir" / "old") << "old";
  });
  CommitLayer("l2", "l1", [](const fs::path& root) {
    fs::remove_all(root / "dir");
    fs::create_directory(root / "dir");
    std::ofstream(root / "dir" / "new") << "new";
  });
  std::vector<containerd::types::Mount> mounts;
  ASSERT_TRUE(View("view", "l2", &mounts).ok());
  fs::path target = dir_.Join("mnt-view");
  ScopedMount m(mounts, target);
  ASSERT_EQ(m.error(), "");
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(target / "dir")) {
    names.insert(e.path().filename().string());
  }
  EXPECT_THAT(names, ElementsAre("new"));
}

TEST_P(SnapshotsServiceTest, AFileRenamedInAChildMovesInTheView) {
  SKIP_OR_FAIL_IF_UNAVAILABLE(CanMount() ? "" : "mounting needs root");
  CommitLayer("l1", "", [](const fs::path& root) { std::ofstream(root / "from") << "data"; });
  CommitLayer("l2", "l1", [](const fs::path& root) { fs::rename(root / "from", root / "to"); });
  CommitLayer("l3", "l2", [](const fs::path& root) { std::ofstream(root / "x") << "x"; });
  std::vector<containerd::types::Mount> mounts;
  ASSERT_TRUE(View("view", "l3", &mounts).ok());
  fs::path target = dir_.Join("mnt-view");
  ScopedMount m(mounts, target);
  ASSERT_EQ(m.error(), "");
  EXPECT_FALSE(fs::exists(target / "from"));
  EXPECT_EQ(ReadFile(target / "to"), "data");
}

TEST_P(SnapshotsServiceTest, AViewOfTwentyLayersShowsAFileFromEachLayer) {
  SKIP_OR_FAIL_IF_UNAVAILABLE(CanMount() ? "" : "mounting needs root");
  std::string parent;
  for (int i = 0; i < 20; ++i) {
    std::string name = "layer" + std::to_string(i);
    CommitLayer(name, parent, [i](const fs::path& root) {
      std::ofstream(root / ("f" + std::to_string(i))) << i;
    });
    parent = name;
  }
  std::vector<containerd::types::Mount> mounts;
  ASSERT_TRUE(View("view", parent, &mounts).ok());
  fs::path target = dir_.Join("mnt-view");
  ScopedMount m(mounts, target);
  ASSERT_EQ(m.error(), "");
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(ReadFile(target / ("f" + std::to_string(i))), std::to_string(i)) << "layer " << i;
  }
}

TEST_P(SnapshotsServiceTest, ConcurrentPreparesOfDistinctKeysAllSucceed) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      if (Prepare("k" + std::to_string(i), "").ok()) ok++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(List({}).first.size(), 8u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.Join("root") / "snapshots"),
                          fs::directory_iterator()),
            8);
}

TEST_P(SnapshotsServiceTest, SnapshotsSurviveARestartOfTheService) {
  ASSERT_TRUE(Prepare("k1", "").ok());
  ASSERT_TRUE(Commit("base", "k1", {{"keep", "me"}}).ok());
  ASSERT_TRUE(Prepare("active", "base").ok());
  server_->Shutdown();
  server_.reset();
  snapshotter_.reset();
  StartServer(/*list_batch=*/100);
  EXPECT_THAT(List({}).first, ElementsAre("active", "base"));
  v1::Info info;
  ASSERT_TRUE(Stat("base", &info).ok());
  EXPECT_THAT(info.labels(), UnorderedElementsAre(Pair("keep", "me")));
  EXPECT_EQ(Prepare("active", "base").error_code(), grpc::StatusCode::ALREADY_EXISTS);
}

INSTANTIATE_TEST_SUITE_P(Snapshotters, SnapshotsServiceTest,
                         ::testing::Values("overlay", "modelfs"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace modelfs::snapshotter
