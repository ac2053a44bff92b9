// The modelfs-snapshotter binary under a stand-in for systemd (fd_store_supervisor.py) that
// keeps the FUSE connection in a file descriptor store: a container's mount of a model keeps
// reading exact bytes across a crash (SIGKILL) of the daemon, including from a file that was
// open before the crash.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "containerd/services/snapshots/v1/snapshots.grpc.pb.h"
#include "core/oci/manifest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "snapshotter/model/model_snapshotter.h"
#include "testsupport/harness/process_runner.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::snapshotter {
namespace {

namespace fs = std::filesystem;
using ::modelfs::testing::DescribeFiles;
using ::modelfs::testing::ReadFileOrDie;
namespace v1 = containerd::services::snapshots::v1;
using ::modelfs::testing::ChildProcess;
using ::modelfs::testing::ProcessResult;
using ::modelfs::testing::RegistryFixture;
using ::modelfs::testing::RunProcess;
using ::modelfs::testing::TempDir;

class DaemonRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_OR_FAIL_IF_UNAVAILABLE(
        geteuid() != 0 || !fs::exists("/dev/fuse") ? "needs root and /dev/fuse" : "");
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start());
    model_dir_ = tmp_.Join("model");
    ASSERT_OK(modelfs::testing::WriteTestModel(model_dir_.string(), /*seed=*/53).status());
    const std::string ref = absl::StrCat(registry_->host_port(), "/restart/llama:v1");
    ASSERT_OK_AND_ASSIGN(auto push, modelfs::testing::RunModelfs({"push", "--plain-http", ref,
                                                                  model_dir_.string(), "--json"}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    nlohmann::json j = modelfs::testing::ParseJsonOutput(push.out);
    const std::string volume_digest = j["volume"]["digest"];
    ASSERT_OK_AND_ASSIGN(auto client, modelfs::testing::ConnectPlainHttp(registry_->host_port()));
    ASSERT_OK_AND_ASSIGN(ManifestResult v, client->GetManifest("restart/llama", volume_digest));
    ASSERT_OK_AND_ASSIGN(Manifest vm, ParseManifest(v.bytes));
    chain_id_ = vm.layers[0].digest.str();
    labels_ = Labels(vm.layers[0].annotations.begin(), vm.layers[0].annotations.end());
    labels_[kLabelTargetRef] = chain_id_;
    labels_[kLabelCriImageRef] = ref + "-volume";
    labels_[kLabelCriManifestDigest] = volume_digest;

    socket_ = tmp_.Join("modelfs.sock").string();
    config_ = tmp_.Join("snapshotter.toml").string();
    std::ofstream(config_) << "insecure_hosts = [\"" << registry_->host_port() << "\"]\n";
    std::vector<std::string> argv = {"python3", MODELFS_SUPERVISOR};
    if (SocketUnit()) argv.insert(argv.end(), {"--listen", socket_});
    // As the unit runs it: the config it started with is kept for a start whose file is broken.
    argv.insert(argv.end(), {StateDir(), MODELFS_SNAPSHOTTER_BIN, "--config", config_, "--root",
                             tmp_.Join("root").string(), "--address", socket_, "--last-good-config",
                             tmp_.Join("last-good.toml").string()});
    ASSERT_OK_AND_ASSIGN(supervisor_, ChildProcess::Spawn(argv, tmp_.Join("daemon.log").string()));
    ASSERT_TRUE(WaitReady(1)) << ReadFileOrDie(tmp_.Join("daemon.log").string());
    stub_ = v1::Snapshots::NewStub(
        grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    for (auto it = mounted_.rbegin(); it != mounted_.rend(); ++it) umount2(it->c_str(), MNT_DETACH);
    if (supervisor_) supervisor_->Stop();
    // The stored connection is gone with the supervisor; clear the mount it leaves behind.
    umount2(tmp_.Join("root/mnt").c_str(), MNT_DETACH);
  }

  std::string StateDir() const { return tmp_.Join("supervisor").string(); }
  // Whether the supervisor holds the gRPC socket and passes it, as modelfs-snapshotter.socket.
  virtual bool SocketUnit() const { return false; }
  // The pid of the daemon that reported READY=1 last (0 when none has).
  pid_t ReadyPid() {
    int pid = 0;
    int gen = 0;
    return sscanf(ReadFileOrDie(StateDir() + "/ready").c_str(), "%d %d", &pid, &gen) == 2 ? pid : 0;
  }
  grpc::Status StatOn(v1::Snapshots::Stub& stub, const std::string& key, v1::Info* info) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::StatSnapshotRequest req;
    req.set_snapshotter("modelfs");
    req.set_key(key);
    v1::StatSnapshotResponse resp;
    grpc::Status st = stub.Stat(&ctx, req, &resp);
    *info = resp.info();
    return st;
  }
  // Has the supervisor SIGKILL the daemon and waits until that process is gone (the next one
  // is being started), with the restart's gap still open.
  void KillDaemonAndWaitUntilGone() {
    const pid_t old = ReadyPid();
    ASSERT_GT(old, 0);
    ::kill(supervisor_->pid(), SIGUSR1);
    absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (::kill(old, 0) == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
    ASSERT_NE(::kill(old, 0), 0) << "the daemon " << old << " did not die";
  }

  // Prepares the model, mounts a view as a pod would, opens a file, has the supervisor stop
  // the daemon with `signal`'s meaning and start it again, then reads through the same mount.
  // With `new_config`, the config file is replaced with it before the restart.
  void ExpectMountSurvives(int signal, const std::string& new_config = "");

  // Waits until the supervisor reports READY=1 from the given generation of the daemon.
  bool WaitReady(int generation) {
    absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      std::string r = ReadFileOrDie(StateDir() + "/ready");
      int pid = 0;
      int gen = 0;
      if (sscanf(r.c_str(), "%d %d", &pid, &gen) == 2 && gen == generation) return true;
      if (!supervisor_->running()) return false;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  grpc::Status Prepare(const std::string& key, const std::string& parent, const Labels& labels) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::PrepareSnapshotRequest req;
    req.set_snapshotter("modelfs");
    req.set_key(key);
    req.set_parent(parent);
    req.mutable_labels()->insert(labels.begin(), labels.end());
    v1::PrepareSnapshotResponse resp;
    return stub_->Prepare(&ctx, req, &resp);
  }

  // A view of the model mounted where a pod's image volume would be.
  std::string MountView(const std::string& key) {
    grpc::ClientContext ctx;
    v1::ViewSnapshotRequest req;
    req.set_snapshotter("modelfs");
    req.set_key(key);
    req.set_parent(chain_id_);
    v1::ViewSnapshotResponse resp;
    grpc::Status st = stub_->View(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    if (!st.ok() || resp.mounts_size() != 1) return "";
    std::string target = tmp_.Join(key).string();
    fs::create_directories(target);
    EXPECT_EQ(::mount(resp.mounts(0).source().c_str(), target.c_str(), nullptr, MS_BIND, nullptr),
              0)
        << strerror(errno);
    mounted_.push_back(target);
    return target;
  }

  TempDir tmp_;
  std::string config_;
  std::unique_ptr<RegistryFixture> registry_;
  fs::path model_dir_;
  std::string chain_id_;
  Labels labels_;
  std::string socket_;
  std::unique_ptr<ChildProcess> supervisor_;
  std::unique_ptr<v1::Snapshots::Stub> stub_;
  std::vector<std::string> mounted_;
};

void DaemonRestartTest::ExpectMountSurvives(int signal, const std::string& new_config) {
  ASSERT_EQ(Prepare("extract-1", "", labels_).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  std::string volume = MountView("pod-volume");
  ASSERT_FALSE(volume.empty());
  const std::map<std::string, std::string> want = DescribeFiles(model_dir_.string());
  ASSERT_FALSE(want.empty());
  const std::string first = want.begin()->first;
  int fd = ::open((fs::path(volume) / first).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  char byte = 0;
  ASSERT_EQ(::pread(fd, &byte, 1, 0), 1);

  if (!new_config.empty()) std::ofstream(config_, std::ios::trunc) << new_config;
  ::kill(supervisor_->pid(), signal);  // stop the daemon, start it again with the fd
  ASSERT_TRUE(WaitReady(2)) << ReadFileOrDie(tmp_.Join("daemon.log").string());

  // The file opened before the crash, then every file through the same mount.
  const std::string bytes = ReadFileOrDie((model_dir_ / first).string());
  std::string got(bytes.size(), '\0');
  ASSERT_EQ(::pread(fd, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
  ::close(fd);
  EXPECT_EQ(got, bytes);
  std::map<std::string, std::string> all = DescribeFiles(volume);
  all.erase(".modelinfo.json");
  EXPECT_EQ(all, want);
  EXPECT_NE(ReadFileOrDie(tmp_.Join("daemon.log").string()).find("inherited the FUSE connection"),
            std::string::npos);
}

TEST_F(DaemonRestartTest, AContainersModelMountKeepsReadingExactBytesAcrossADaemonCrash) {
  ExpectMountSurvives(SIGUSR1);  // the supervisor SIGKILLs the daemon
}

TEST_F(DaemonRestartTest, AContainersModelMountKeepsReadingExactBytesAcrossARestart) {
  ExpectMountSurvives(SIGUSR2);  // the supervisor SIGTERMs the daemon, which leaves the mount
  EXPECT_NE(ReadFileOrDie(tmp_.Join("daemon.log").string()).find("msg=stopping signal=15"),
            std::string::npos);
}

// An admin edits snapshotter.toml, makes a typo and restarts the unit: the daemon refuses the
// file, naming its line and key, starts with the config it last started with, and the pod's
// mount keeps reading; nothing loops (the supervisor saw one restart, generation 2).
TEST_F(DaemonRestartTest, ARestartWithATypoInTheConfigKeepsServingWithTheLastGoodOne) {
  ExpectMountSurvives(SIGUSR2, absl::StrCat("insecure_hosts = [\"", registry_->host_port(),
                                            "\"]\nlazy_imagez = []\n"));
  const std::string log = ReadFileOrDie(tmp_.Join("daemon.log").string());
  // One structured event: level, component, the file, the copy it starts with, and the reason
  // naming the line and the key.
  EXPECT_THAT(log, ::testing::HasSubstr("level=error component=daemon msg=\"config refused; "
                                        "serving with the last config this daemon started with"));
  EXPECT_THAT(log, ::testing::HasSubstr(absl::StrCat(
                       " file=", config_, " last_good=", tmp_.Join("last-good.toml").string(),
                       " reason=\"", config_, ":2: lazy_imagez: unknown key")));
  // The check an admin runs before restarting says the same, and exits 2.
  ASSERT_OK_AND_ASSIGN(ProcessResult check, RunProcess({MODELFS_SNAPSHOTTER_BIN, "--check-config",
                                                        "--config", config_}));
  EXPECT_EQ(check.exit_code, 2);
  EXPECT_THAT(check.err,
              ::testing::HasSubstr(absl::StrCat(config_, ":2: lazy_imagez: unknown key")));
}

class SocketActivatedDaemonTest : public DaemonRestartTest {
 protected:
  bool SocketUnit() const override { return true; }
};

// With the socket held by the supervisor (modelfs-snapshotter.socket), the same call waits in
// the socket's queue and the next process answers it: containerd never sees the restart.
TEST_F(SocketActivatedDaemonTest, ACallDuringTheRestartGapIsAnsweredByTheNextProcess) {
  ASSERT_EQ(Prepare("extract-1", "", labels_).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  KillDaemonAndWaitUntilGone();
  // A new connection, dialled in the gap (a local subchannel pool keeps gRPC from reusing the
  // connection to the dead process, which fails whatever the socket does).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = v1::Snapshots::NewStub(
      grpc::CreateCustomChannel("unix:" + socket_, grpc::InsecureChannelCredentials(), args));
  v1::Info info;
  grpc::Status st = StatOn(*stub, chain_id_, &info);
  const bool ready = WaitReady(2);
  ASSERT_TRUE(st.ok()) << st.error_code() << ": " << st.error_message() << "\n"
                       << ReadFileOrDie(tmp_.Join("daemon.log").string());
  ASSERT_TRUE(ready);
  EXPECT_EQ(info.kind(), v1::Kind::COMMITTED);
  EXPECT_EQ(info.labels().at(kLabelRemoteModel),
            "sha256-" + labels_.at(std::string(kLabelModel)).substr(7));
  EXPECT_NE(ReadFileOrDie(tmp_.Join("daemon.log").string()).find("on the socket systemd passed"),
            std::string::npos);
}

TEST_F(SocketActivatedDaemonTest, TheModelMountSurvivesACrashToo) { ExpectMountSurvives(SIGUSR1); }

TEST_F(DaemonRestartTest, ASnapshotKeyWithANewlineCannotForgeADaemonLogLine) {
  const std::string forged = "modelfs-snapshotter: model sha256:0000 FORGED registered";
  Labels labels;
  labels[kLabelTargetRef] = "forged-target";
  labels[std::string(kLabelModel)] = "not-a-digest";  // logged as malformed, with the key
  Prepare("extract\n" + forged, "", labels);
  const std::string log = ReadFileOrDie(tmp_.Join("daemon.log").string());
  // Escaped, then quoted: the newline reads "\\n", its backslash doubled by the quoting.
  EXPECT_NE(log.find("extract\\\\n" + forged), std::string::npos) << log;
  for (const std::string& line : std::vector<std::string>(absl::StrSplit(log, '\n'))) {
    EXPECT_NE(line.rfind(forged, 0), 0u) << log;
  }
}

}  // namespace
}  // namespace modelfs::snapshotter
