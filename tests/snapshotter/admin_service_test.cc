// The admin service (snapshotter/admin) over a fake NodeAdmin, served on a real unix socket in
// a temp dir and called through the generated client, as `modelfs node` calls it: the socket's
// mode and refusals, each call's answer, and how errors reach the client.
#include "snapshotter/admin/admin_service.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::snapshotter {
namespace {

namespace admin = modelfs::admin::v1;
using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::HasSubstr;

class FakeNode final : public NodeAdmin {
 public:
  NodeStatus status;
  std::vector<PrefetchProgress> steps;
  absl::Status prefetch_result;
  absl::StatusOr<EvictOutcome> evict_result = EvictOutcome{};
  std::string asked;

  NodeStatus Status() override { return status; }
  absl::Status Prefetch(const std::string& reference,
                        const std::function<void(const PrefetchProgress&)>& progress,
                        const std::function<bool()>&, absl::Duration, absl::Duration) override {
    asked = reference;
    for (const PrefetchProgress& p : steps) progress(p);
    return prefetch_result;
  }
  absl::StatusOr<EvictOutcome> Evict(const std::string& reference) override {
    asked = reference;
    return evict_result;
  }
};

class AdminServiceTest : public ::testing::Test {
 protected:
  std::string Socket() const { return tmp_.Join("run/admin.sock").string(); }
  void Start() {
    absl::StatusOr<std::unique_ptr<AdminServer>> s = AdminServer::Start(Socket(), &node_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    stub_ = admin::Admin::NewStub(
        grpc::CreateChannel("unix:" + Socket(), grpc::InsecureChannelCredentials()));
  }

  TempDir tmp_;
  FakeNode node_;
  std::unique_ptr<AdminServer> server_;
  std::unique_ptr<admin::Admin::Stub> stub_;
};

TEST_F(AdminServiceTest, TheSocketIsMode0600InADirectoryMadeMode0700) {
  Start();
  struct stat st;
  ASSERT_EQ(::stat(Socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(tmp_.Join("run").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(AdminServiceTest, APathThatIsAnotherFileIsRefusedAndKept) {
  std::filesystem::create_directories(tmp_.Join("run"));
  std::ofstream(Socket()) << "not mine";
  EXPECT_THAT(CheckAdminSocketPath(Socket()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not a socket")));
  EXPECT_THAT(AdminServer::Start(Socket(), &node_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(Socket())));
  std::ifstream in(Socket());
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "not mine");
}

TEST_F(AdminServiceTest, ARelativePathIsRefused) {
  EXPECT_THAT(CheckAdminSocketPath("admin.sock"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("absolute")));
}

TEST_F(AdminServiceTest, ASocketLeftByAnEarlierProcessIsReplaced) {
  // A socket file whose listener is gone, as a crash leaves it.
  std::filesystem::create_directories(tmp_.Join("run"));
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", Socket().c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);
  Start();
  grpc::ClientContext context;
  admin::ListResponse r;
  EXPECT_TRUE(stub_->List(&context, admin::ListRequest(), &r).ok());
}

TEST_F(AdminServiceTest, ListAnswersEveryFieldOfTheNodeStatus) {
  NodeModel m;
  m.name = "sha256-11";
  m.model_digest = "sha256:11";
  m.volume_digest = "sha256:22";
  m.reference = "reg/v@sha256:22";
  m.registry = "reg";
  m.repository = "m";
  m.state = "ready";
  m.prefetched = true;
  m.layers = 2;
  m.size = 300;
  m.cached_bytes = 200;
  m.verified_bytes = 100;
  m.sealed = false;
  m.passthrough_opens = 4;
  m.snapshots.push_back({"k8s.io/1/x", "committed", "reg/v:1", ""});
  node_.status.models.push_back(m);
  node_.status.cache_bytes = 200;
  node_.status.cache_max_bytes = 1 << 30;
  node_.status.cache_layers = 3;
  node_.status.disk_full = true;
  node_.status.layers.push_back({"sha256:33", 50, true, false, {"sha256:11"}});
  node_.status.errors.push_back({"reg", absl::FromUnixSeconds(1700000000), "boom", 2});
  Start();
  grpc::ClientContext context;
  admin::ListResponse r;
  ASSERT_TRUE(stub_->List(&context, admin::ListRequest(), &r).ok());
  ASSERT_EQ(r.models_size(), 1);
  const admin::Model& pm = r.models(0);
  EXPECT_EQ(pm.name(), "sha256-11");
  EXPECT_EQ(pm.model_digest(), "sha256:11");
  EXPECT_EQ(pm.volume_digest(), "sha256:22");
  EXPECT_EQ(pm.reference(), "reg/v@sha256:22");
  EXPECT_EQ(pm.registry(), "reg");
  EXPECT_EQ(pm.repository(), "m");
  EXPECT_EQ(pm.state(), "ready");
  EXPECT_TRUE(pm.prefetched());
  EXPECT_EQ(pm.layers(), 2u);
  EXPECT_EQ(pm.size(), 300u);
  EXPECT_EQ(pm.cached_bytes(), 200u);
  EXPECT_EQ(pm.verified_bytes(), 100u);
  EXPECT_FALSE(pm.sealed());
  EXPECT_EQ(pm.passthrough_opens(), 4u);
  ASSERT_EQ(pm.snapshots_size(), 1);
  EXPECT_EQ(pm.snapshots(0).key(), "k8s.io/1/x");
  EXPECT_EQ(pm.snapshots(0).kind(), "committed");
  EXPECT_EQ(pm.snapshots(0).image(), "reg/v:1");
  EXPECT_EQ(r.cache_bytes(), 200u);
  EXPECT_EQ(r.cache_max_bytes(), 1u << 30);
  EXPECT_EQ(r.cache_layers(), 3u);
  EXPECT_TRUE(r.disk_full());
  ASSERT_EQ(r.layers_size(), 1);
  EXPECT_EQ(r.layers(0).digest(), "sha256:33");
  EXPECT_TRUE(r.layers(0).quarantined());
  EXPECT_EQ(r.layers(0).models(0), "sha256:11");
  ASSERT_EQ(r.errors_size(), 1);
  EXPECT_EQ(r.errors(0).registry(), "reg");
  EXPECT_EQ(r.errors(0).at_unix_seconds(), 1700000000);
  EXPECT_EQ(r.errors(0).message(), "boom");
  EXPECT_EQ(r.errors(0).count(), 2u);
}

TEST_F(AdminServiceTest, PrefetchStreamsEachPhaseAndEndsWithItsStatus) {
  PrefetchProgress resolving;
  resolving.phase = "resolving";
  PrefetchProgress done;
  done.phase = "done";
  done.model_digest = "sha256:11";
  done.layers = 2;
  done.layers_sealed = 2;
  done.total_bytes = 300;
  done.verified_bytes = 300;
  node_.steps = {resolving, done};
  Start();
  grpc::ClientContext context;
  admin::PrefetchRequest req;
  req.set_reference("reg/v:1");
  auto reader = stub_->Prefetch(&context, req);
  std::vector<std::string> phases;
  admin::PrefetchProgress p;
  while (reader->Read(&p)) phases.push_back(p.phase());
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(node_.asked, "reg/v:1");
  EXPECT_EQ(phases, (std::vector<std::string>{"resolving", "done"}));
  EXPECT_EQ(p.verified_bytes(), 300u);
  EXPECT_EQ(p.layers_sealed(), 2u);
}

TEST_F(AdminServiceTest, AVerificationFailureOfAPrefetchReachesTheClientAsDataLoss) {
  node_.prefetch_result = absl::DataLossError("layer sha256:33 failed verification");
  Start();
  grpc::ClientContext context;
  admin::PrefetchRequest req;
  req.set_reference("reg/v:1");
  auto reader = stub_->Prefetch(&context, req);
  admin::PrefetchProgress p;
  while (reader->Read(&p)) {
  }
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_THAT(st.error_message(), HasSubstr("sha256:33"));
}

TEST_F(AdminServiceTest, EvictAnswersWhatWasDroppedOrWhySnapshotsHoldTheModel) {
  EvictOutcome o;
  o.model_digest = "sha256:11";
  o.was_registered = true;
  o.layers_evicted = 2;
  o.bytes_evicted = 300;
  o.layers_kept = 1;
  node_.evict_result = o;
  Start();
  {
    grpc::ClientContext context;
    admin::EvictRequest req;
    req.set_reference("sha256:11");
    admin::EvictResponse r;
    ASSERT_TRUE(stub_->Evict(&context, req, &r).ok());
    EXPECT_EQ(r.model_digest(), "sha256:11");
    EXPECT_TRUE(r.was_registered());
    EXPECT_EQ(r.layers_evicted(), 2u);
    EXPECT_EQ(r.bytes_evicted(), 300u);
    EXPECT_EQ(r.layers_kept(), 1u);
  }
  node_.evict_result = absl::FailedPreconditionError("held by 1 snapshot(s): k8s.io/1/x");
  grpc::ClientContext context;
  admin::EvictRequest req;
  req.set_reference("sha256:11");
  admin::EvictResponse r;
  grpc::Status st = stub_->Evict(&context, req, &r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("k8s.io/1/x"));
}

}  // namespace
}  // namespace modelfs::snapshotter
