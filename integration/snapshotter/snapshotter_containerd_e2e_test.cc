// modelfs-snapshotter under a real containerd 1.6 with the CRI plugin, as on a Kubernetes node:
// containerd (its own root, state and socket; CRI pulling into the "modelfs" proxy snapshotter
// with snapshot annotations on), the daemon (its own root, socket and metrics port) and a
// docker-registry with an access log. Images are pushed by `modelfs push` (the volume image V
// of a model M) or by the test itself (ordinary tar layers); pulls go through CRI PullImage
// (integration/cri) or `ctr`; snapshots are prepared through containerd's own Snapshots API in
// namespace k8s.io and mounted with mount(2), as a runtime would.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/oci/digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/snapshotter/snapshotter_daemon.h"
#include "nlohmann/json.hpp"
#include "testsupport/cri/cri_client.h"
#include "testsupport/harness/containerd_fixture.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::IsEmpty;

constexpr char kModelRepo[] = "e2e/llama";
constexpr char kPlainRepo[] = "e2e/plain";
constexpr char kRemoteLabel[] = "containerd.io/snapshot/modelfs.remote";

// Deterministic, incompressible-looking bytes.
std::string PseudoRandomBytes(size_t n, uint64_t seed) {
  std::string out(n, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<char>(x & 0xff);
  }
  return out;
}

class SnapshotterContainerdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string& why :
         {Containerd::WhyUnavailable(), SnapshotterDaemon::WhyUnavailable()}) {
      SKIP_OR_FAIL_IF_UNAVAILABLE(why);
    }
    RegistryFixtureOptions ro;
    ro.access_log = true;
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start(ro));
    SnapshotterDaemonOptions so;
    so.insecure_hosts = {registry_->host_port()};
    ASSERT_OK_AND_ASSIGN(daemon_, SnapshotterDaemon::Start(so));
    ContainerdOptions co;
    co.registry_host_port = registry_->host_port();
    co.proxy_snapshotter_name = "modelfs";
    co.proxy_snapshotter_address = daemon_->socket_path();
    co.cri = true;
    co.cri_snapshotter = "modelfs";
    ASSERT_OK_AND_ASSIGN(containerd_, Containerd::Start(co));
    ASSERT_OK_AND_ASSIGN(cri_, CriImageClient::Connect(containerd_->grpc_target()));
    ASSERT_OK_AND_ASSIGN(snapshots_, SnapshotsClient::Connect(containerd_->grpc_target(), "modelfs",
                                                              containerd_->ns()));
  }

  void TearDown() override {
    for (const auto& m : mounted_) (void)UnmountAll(m, /*lazy=*/true);
    if (HasFailure() && daemon_ != nullptr && daemon_->running()) {
      // The daemon's own view (its backend keys and labels), asked directly on its socket.
      auto direct = SnapshotsClient::Connect("unix://" + daemon_->socket_path(), "", "");
      auto all = direct.ok() ? (*direct)->List() : direct.status();
      if (direct.ok() && !volume_chain_id_.empty()) {
        // What containerd 1.6 asks after a remote Prepare answered ALREADY_EXISTS.
        std::string filter = absl::StrCat(
            "labels.\"containerd.io/snapshot.ref\"==", volume_chain_id_, ",parent==\"\"");
        auto filtered = (*direct)->List({filter});
        std::cerr << "--- List(" << filter << "): "
                  << (filtered.ok() ? absl::StrCat(filtered->size(), " snapshots")
                                    : filtered.status().ToString())
                  << "\n";
      }
      std::cerr << "--- modelfs-snapshotter List() on its own socket ---\n";
      if (!all.ok()) std::cerr << all.status() << "\n";
      for (const auto& i : all.ok() ? *all : std::vector<SnapshotInfo>{}) {
        std::cerr << i.name << " parent=" << i.parent << " kind=" << static_cast<int>(i.kind);
        for (const auto& [k, v] : i.labels) std::cerr << " " << k << "=" << v;
        std::cerr << "\n";
      }
    }
    if (HasFailure() && daemon_ != nullptr) {
      std::cerr << "--- modelfs-snapshotter log (" << daemon_->log_path() << ") ---\n"
                << ReadFileOrDie(daemon_->log_path()) << "\n";
      if (containerd_ != nullptr) {
        std::string log = ReadFileOrDie(containerd_->log_path());
        std::cerr << "--- containerd log (tail) ---\n"
                  << log.substr(log.size() > 8000 ? log.size() - 8000 : 0) << "\n";
      }
    }
  }

  std::string Ref(const std::string& repo, const std::string& tag) const {
    return absl::StrCat(registry_->host_port(), "/", repo, ":", tag);
  }

  // `modelfs push` of the test model: M at tag v1, V at v1-volume. Fills source_, push_,
  // volume_chain_id_ (V's config rootfs.diff_ids[0]; V has one layer).
  void PushModel() {
    source_ = tmp_.Join("model").string();
    ASSERT_OK_AND_ASSIGN(source_files_, WriteTestModel(source_, /*seed=*/41));
    ASSERT_OK_AND_ASSIGN(
        ProcessResult push,
        RunModelfs({"push", "--plain-http", Ref(kModelRepo, "v1"), source_, "--json"}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    push_ = ParseJsonOutput(push.out);
    ASSERT_TRUE(push_.is_object()) << push.out;
    ASSERT_OK_AND_ASSIGN(auto client, ConnectPlainHttp(registry_->host_port()));
    ASSERT_OK_AND_ASSIGN(std::string config,
                         FetchBlob(*client, kModelRepo, BlobDigest("volume config")));
    nlohmann::json c = nlohmann::json::parse(config, nullptr, false);
    ASSERT_TRUE(c.is_object()) << config;
    ASSERT_EQ(c["rootfs"]["diff_ids"].size(), 1u) << config;
    volume_chain_id_ = c["rootfs"]["diff_ids"][0];
  }

  // PushModel, then CRI PullImage of V. Returns the access-log offset before the pull.
  size_t PushAndPullVolume() {
    PushModel();
    if (HasFatalFailure()) return 0;
    const size_t offset = ReadFileOrDie(registry_->log_path()).size();
    absl::StatusOr<std::string> ref = cri_->PullImage(Ref(kModelRepo, "v1-volume"));
    EXPECT_OK(ref.status());
    if (ref.ok()) image_ref_ = *ref;
    return offset;
  }

  std::string BlobDigest(const std::string& role) const {
    for (const auto& b : push_["blobs"]) {
      if (b["role"] == role) return b["digest"];
    }
    return "";
  }
  std::string ModelHexDir() const {
    std::string m = push_["model"]["digest"];
    return "sha256-" + m.substr(7);
  }
  // Digests of M's file layers (every blob that is not a config or part of V).
  std::set<std::string> WeightBlobs() const {
    std::set<std::string> out;
    for (const auto& b : push_["blobs"]) {
      std::string role = b["role"];
      if (role != "config" && role != "volume layer" && role != "volume config") {
        out.insert(b["digest"].get<std::string>());
      }
    }
    return out;
  }

  // Prepare (rw) or View (ro) `key` on V's chain ID through containerd, mounted on a fresh
  // directory; "" (with a test failure) when that fails.
  std::string MountSnapshot(const std::string& key, bool view) {
    return MountSnapshotOn(key, volume_chain_id_, view);
  }
  std::string MountSnapshotOn(const std::string& key, const std::string& parent, bool view) {
    // A GC root, as a runtime's lease or container would be: otherwise containerd's garbage
    // collector (run after the pull) removes the unreferenced snapshot under the mount.
    const std::map<std::string, std::string> labels = {{kGcRootLabel, "modelfs-e2e"}};
    absl::StatusOr<std::vector<SnapshotMount>> mounts =
        view ? snapshots_->View(key, parent, labels) : snapshots_->Prepare(key, parent, labels);
    EXPECT_OK(mounts.status());
    if (!mounts.ok()) return "";
    std::string target = containerd_->MountPoint("mnt-" + key);
    absl::Status s = MountAll(*mounts, target);
    EXPECT_OK(s) << DescribeMounts(*mounts);
    if (!s.ok()) return "";
    mounted_.push_back(target);
    return target;
  }

  // The model files under `dir` equal the source files byte for byte (SHA-256 of every
  // file), and nothing but `.modelinfo.json` is added.
  void ExpectModelFilesEqualSource(const std::string& dir) {
    std::map<std::string, std::string> got = DescribeFiles(dir);
    EXPECT_EQ(got.erase(".modelinfo.json"), 1u) << "no .modelinfo.json in " << dir;
    EXPECT_EQ(got, DescribeFiles(source_));
    // And one file compared as bytes, not only by digest.
    EXPECT_EQ(ReadFileOrDie(dir + "/config.json"), ReadFileOrDie(source_ + "/config.json"));
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
  std::unique_ptr<SnapshotterDaemon> daemon_;
  std::unique_ptr<Containerd> containerd_;  // destroyed before the daemon
  std::unique_ptr<CriImageClient> cri_;
  std::unique_ptr<SnapshotsClient> snapshots_;
  std::vector<std::string> mounted_;
  std::string source_;
  std::vector<std::string> source_files_;
  nlohmann::json push_;
  std::string volume_chain_id_;
  std::string image_ref_;
};

// (a) Ordinary layers take containerd's overlay path through the proxy snapshotter.
TEST_F(SnapshotterContainerdTest, OrdinaryImagePulledWithCtrShowsItsFilesByteForByte) {
  const std::string blob = PseudoRandomBytes(300 * 1024 + 17, 5);
  ASSERT_OK_AND_ASSIGN(
      PushedImage image,
      PushOrdinaryImage(registry_->host_port(), kPlainRepo, "two-layers",
                        {{{"etc/greeting", "hello from layer one\n"}, {"data/blob.bin", blob}},
                         {{"etc/greeting", "layer two wins\n"}, {"data/extra.txt", "extra\n"}}}));
  ASSERT_OK_AND_ASSIGN(
      ProcessResult pull,
      containerd_->Ctr({"images", "pull", "--snapshotter", "modelfs", "--hosts-dir",
                        containerd_->hosts_dir(), image.reference}));
  ASSERT_EQ(pull.exit_code, 0) << pull.out << pull.err;

  std::string mnt = containerd_->MountPoint("ctr-view");
  ASSERT_OK_AND_ASSIGN(ProcessResult mount,
                       containerd_->Ctr({"images", "mount", "--snapshotter", "modelfs",
                                         "--rw=false", image.reference, mnt}));
  ASSERT_EQ(mount.exit_code, 0) << mount.out << mount.err;
  mounted_.push_back(mnt);
  std::map<std::string, std::string> files = DescribeFiles(mnt);
  std::string greeting = ReadFileOrDie(mnt + "/etc/greeting");
  std::string got_blob = ReadFileOrDie(mnt + "/data/blob.bin");
  std::string extra = ReadFileOrDie(mnt + "/data/extra.txt");
  ASSERT_OK_AND_ASSIGN(ProcessResult unmount, containerd_->Ctr({"images", "unmount", "--rm", mnt}));
  EXPECT_EQ(unmount.exit_code, 0) << unmount.out << unmount.err;
  EXPECT_THAT(MountsUnder(mnt), IsEmpty());

  EXPECT_EQ(greeting, "layer two wins\n");
  EXPECT_EQ(got_blob, blob);
  EXPECT_EQ(extra, "extra\n");
  EXPECT_EQ(files.size(), 3u);
  // The committed top layer is containerd's chain ID, held by modelfs.
  ASSERT_OK_AND_ASSIGN(SnapshotInfo top, snapshots_->Stat(image.chain_id));
  EXPECT_EQ(top.kind, SnapshotInfo::Kind::kCommitted);
  EXPECT_EQ(top.parent, image.diff_ids[0]);
}

// Without CRI's snapshot labels (ctr passes none), V's layer takes the ordinary path: the
// image unpacks to the `.modelfs/` pointer files, nothing large is fetched and no model is
// registered.
TEST_F(SnapshotterContainerdTest, CtrPullOfVolumeImageUnpacksOnlyThePointerFiles) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  const size_t offset = ReadFileOrDie(registry_->log_path()).size();
  ASSERT_OK_AND_ASSIGN(
      ProcessResult pull,
      containerd_->Ctr({"images", "pull", "--snapshotter", "modelfs", "--hosts-dir",
                        containerd_->hosts_dir(), Ref(kModelRepo, "v1-volume")}));
  ASSERT_EQ(pull.exit_code, 0) << pull.out << pull.err;
  std::string mnt = containerd_->MountPoint("ctr-volume-view");
  ASSERT_OK_AND_ASSIGN(ProcessResult mount,
                       containerd_->Ctr({"images", "mount", "--snapshotter", "modelfs",
                                         "--rw=false", Ref(kModelRepo, "v1-volume"), mnt}));
  ASSERT_EQ(mount.exit_code, 0) << mount.out << mount.err;
  mounted_.push_back(mnt);
  std::map<std::string, std::string> files = DescribeFiles(mnt);
  ASSERT_OK_AND_ASSIGN(ProcessResult unmount, containerd_->Ctr({"images", "unmount", "--rm", mnt}));
  EXPECT_EQ(unmount.exit_code, 0) << unmount.out << unmount.err;

  EXPECT_TRUE(files.count(".modelfs/model.json")) << "pointer files missing";
  EXPECT_TRUE(files.count(".modelfs/README.txt"));
  EXPECT_FALSE(files.count("config.json")) << "model files must not appear without modelfs";
  const std::string log = ReadFileOrDie(registry_->log_path());
  std::map<std::string, int> gets = BlobGetsInAccessLog(log, offset, kModelRepo);
  for (const std::string& w : WeightBlobs()) EXPECT_EQ(gets.count(w), 0u) << w;
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, snapshots_->Stat(volume_chain_id_));
  EXPECT_EQ(info.labels.count(kRemoteLabel), 0u);
}

// (b) CRI pull of V: the daemon resolves M and commits the model snapshot; no weight blob is
// downloaded (no whole-blob GET), and only V's blobs and M's config are fetched whole.
TEST_F(SnapshotterContainerdTest, CriPullOfVolumeImageDownloadsNoWeightBlob) {
  const size_t offset = PushAndPullVolume();
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(image_ref_, BlobDigest("volume config"));

  const std::string log = ReadFileOrDie(registry_->log_path());
  std::map<std::string, int> whole = BlobGetsInAccessLog(log, offset, kModelRepo, "200");
  for (const std::string& w : WeightBlobs()) {
    EXPECT_EQ(whole.count(w), 0u) << "weight blob " << w << " was downloaded during the pull";
  }
  const std::set<std::string> allowed = {BlobDigest("volume config"), BlobDigest("volume layer"),
                                         BlobDigest("config")};
  for (const auto& [digest, n] : whole) {
    EXPECT_TRUE(allowed.count(digest)) << digest << " fetched whole " << n << " times";
  }
  if (HasFailure())
    std::cerr << "--- registry access log during the pull ---\n" << log.substr(offset);
}

// Registering M builds .modelinfo.json from the weight files' headers (core/model/model_loader.h),
// so the pull reads, verified, the first chunk of each weight file and nothing more.
TEST_F(SnapshotterContainerdTest, CriPullOfVolumeImageReadsAtMostTheFirstChunkOfEachWeightFile) {
  const size_t offset = PushAndPullVolume();
  ASSERT_FALSE(HasFailure());
  const std::string log = ReadFileOrDie(registry_->log_path());
  std::map<std::string, uint64_t> bytes = BlobBytesInAccessLog(log, offset, kModelRepo);
  constexpr uint64_t kChunk = 1 << 20;  // `modelfs push` default chunk size
  for (const std::string& w : WeightBlobs()) {
    EXPECT_LE(bytes[w], kChunk) << "weight blob " << w << " read past its first chunk";
  }
  if (HasFailure())
    std::cerr << "--- registry access log during the pull ---\n" << log.substr(offset);
}

TEST_F(SnapshotterContainerdTest, CriPullOfVolumeImageCommitsTheChainIdAsARemoteModel) {
  PushAndPullVolume();
  ASSERT_FALSE(HasFailure());
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, snapshots_->Stat(volume_chain_id_));
  EXPECT_EQ(info.kind, SnapshotInfo::Kind::kCommitted);
  EXPECT_EQ(info.parent, "");
  EXPECT_EQ(info.labels[kRemoteLabel], ModelHexDir());
  // The daemon's single FUSE mount serves the model.
  EXPECT_TRUE(fs::exists(daemon_->root() + "/mnt/" + ModelHexDir() + "/config.json"));
}

TEST_F(SnapshotterContainerdTest, PreparedSnapshotOfTheModelShowsEveryFileByteForByte) {
  PushAndPullVolume();
  ASSERT_FALSE(HasFailure());
  std::string mnt = MountSnapshot("e2e-rw", /*view=*/false);
  ASSERT_FALSE(mnt.empty());
  ExpectModelFilesEqualSource(mnt);
  // A container may write: the upper directory takes it, the model is untouched.
  const std::string text = "written by the container\n";
  int fd = open((mnt + "/scratch.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << "create " << mnt << "/scratch.txt: " << strerror(errno);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()))
      << strerror(errno);
  close(fd);
  EXPECT_EQ(ReadFileOrDie(mnt + "/scratch.txt"), text);
  EXPECT_FALSE(fs::exists(daemon_->root() + "/mnt/" + ModelHexDir() + "/scratch.txt"));
}

TEST_F(SnapshotterContainerdTest, PreparedSnapshotHasAParsableModelinfoJson) {
  PushAndPullVolume();
  ASSERT_FALSE(HasFailure());
  std::string mnt = MountSnapshot("e2e-info", /*view=*/false);
  ASSERT_FALSE(mnt.empty());
  std::string text = ReadFileOrDie(mnt + "/.modelinfo.json");
  nlohmann::json info = nlohmann::json::parse(text, nullptr, false);
  ASSERT_TRUE(info.is_object()) << text;
  EXPECT_EQ(info["schemaVersion"], 1) << text;
}

TEST_F(SnapshotterContainerdTest, ViewOfTheModelIsReadOnlyAndShowsEveryFileByteForByte) {
  PushAndPullVolume();
  ASSERT_FALSE(HasFailure());
  std::string mnt = MountSnapshot("e2e-ro", /*view=*/true);
  ASSERT_FALSE(mnt.empty());
  ExpectModelFilesEqualSource(mnt);
  int fd = open((mnt + "/new-file").c_str(), O_WRONLY | O_CREAT, 0644);
  const int err = errno;
  if (fd >= 0) close(fd);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(err, EROFS);
}

// Snapshot poisoning: an image P whose config lists the diff ID of an ordinary image B's base
// layer, while P's one layer is V's volume layer A with its modelfs annotations. containerd
// asks the snapshotter to commit B's chain ID from A. Pulled before B, P must not make that
// chain ID hold the model: a container of B sees B's files, and B's snapshot is no model.
TEST_F(SnapshotterContainerdTest, AnImageClaimingAnotherImagesChainIdCannotPoisonItsSnapshot) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  const std::vector<LayerFile> base_files = {{"etc/os-release", "ID=modelfs-base\n"},
                                             {"usr/bin/tool", PseudoRandomBytes(4096, 9)}};
  ASSERT_OK_AND_ASSIGN(PushedImage base,
                       PushOrdinaryImage(registry_->host_port(), kModelRepo, "base", {base_files}));
  // P = V's manifest (layer A, annotations and all) with a config that claims B's layer.
  ASSERT_OK_AND_ASSIGN(auto client, ConnectPlainHttp(registry_->host_port()));
  ASSERT_OK_AND_ASSIGN(ManifestResult v, client->GetManifest(kModelRepo, "v1-volume"));
  nlohmann::json poison = nlohmann::json::parse(v.bytes);
  const std::string config =
      nlohmann::json({{"architecture", "amd64"},
                      {"os", "linux"},
                      {"rootfs", {{"type", "layers"}, {"diff_ids", {base.diff_ids[0]}}}}})
          .dump();
  poison["config"]["size"] = config.size();
  ASSERT_OK_AND_ASSIGN(Digest config_digest, UploadBlob(*client, kModelRepo, config));
  poison["config"]["digest"] = config_digest.str();
  ASSERT_OK(client
                ->PutManifest(kModelRepo, "poison", poison.dump(),
                              "application/vnd.oci.image.manifest.v1+json")
                .status());

  // containerd unpacks A the ordinary way and refuses it: its diff ID is not B's.
  absl::StatusOr<std::string> poisoned = cri_->PullImage(Ref(kModelRepo, "poison"));
  EXPECT_FALSE(poisoned.ok()) << "the colliding image was pulled as " << *poisoned;
  ASSERT_OK(cri_->PullImage(base.reference).status());

  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, snapshots_->Stat(base.chain_id));
  EXPECT_EQ(info.labels.count(kRemoteLabel), 0u) << "B's chain ID was committed as a model";
  std::string rootfs = MountSnapshotOn("poison-check", base.chain_id, /*view=*/false);
  ASSERT_FALSE(rootfs.empty());
  std::map<std::string, std::string> want;
  for (const LayerFile& f : base_files) want[f.path] = Digest::Of(f.content).str();
  EXPECT_EQ(DescribeFiles(rootfs), want);
  EXPECT_THAT(ReadFileOrDie(daemon_->log_path()), ::testing::HasSubstr("does not bind"));
}

// (c) Metadata and models survive a restart of the daemon on the same root.
TEST_F(SnapshotterContainerdTest, RestartKeepsTheModelSnapshotAndServesExactBytesAgain) {
  PushAndPullVolume();
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(daemon_->Stop(), 0) << "SIGTERM must give exit status 0";
  EXPECT_THAT(MountsUnder(daemon_->root()), IsEmpty()) << "the daemon left mounts behind";
  ASSERT_OK(daemon_->Restart());

  // containerd's proxy connection backs off after the daemon went away (gRPC reconnect); until
  // it reconnects, calls fail with UNAVAILABLE, which a kubelet retries.
  absl::StatusOr<SnapshotInfo> stat = snapshots_->Stat(volume_chain_id_);
  for (absl::Time deadline = absl::Now() + absl::Seconds(20);
       stat.status().code() == absl::StatusCode::kUnavailable && absl::Now() < deadline;
       stat = snapshots_->Stat(volume_chain_id_)) {
    absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, std::move(stat));
  EXPECT_EQ(info.kind, SnapshotInfo::Kind::kCommitted);
  EXPECT_EQ(info.labels[kRemoteLabel], ModelHexDir());
  std::string mnt = MountSnapshot("e2e-after-restart", /*view=*/false);
  ASSERT_FALSE(mnt.empty());
  ExpectModelFilesEqualSource(mnt);
}

// (d) Prometheus text with the contract's metric names.
TEST_F(SnapshotterContainerdTest, MetricsEndpointServesTheContractMetricNames) {
  PushAndPullVolume();
  ASSERT_FALSE(HasFailure());
  std::string mnt = MountSnapshot("e2e-metrics", /*view=*/true);
  ASSERT_FALSE(mnt.empty());
  ReadFileOrDie(mnt + "/config.json");
  long status = 0;
  ASSERT_OK_AND_ASSIGN(std::string text, HttpGetForTest(daemon_->metrics_url(), &status));
  EXPECT_EQ(status, 200);
  for (const char* name : {"modelfs_bytes_fetched_total", "modelfs_registry_requests_total",
                           "modelfs_cache_hits_total", "modelfs_cache_misses_total",
                           "modelfs_verification_failures_total", "modelfs_quarantined_layers",
                           "modelfs_active_models", "modelfs_read_latency_seconds_bucket",
                           "modelfs_read_latency_seconds_count", "modelfs_remote_prepares_total",
                           "modelfs_cache_range_requests_total",
                           "modelfs_registry_request_duration_seconds", "modelfs_build_info"}) {
    EXPECT_TRUE(absl::StrContains(text, name)) << name << " missing from\n" << text;
  }
  EXPECT_TRUE(std::regex_search(
      text, std::regex("modelfs_remote_prepares_total\\{result=\"mounted\"\\} [1-9]")))
      << text;
  EXPECT_TRUE(std::regex_search(text, std::regex("\nmodelfs_active_models 1\\b"))) << text;
}

}  // namespace
}  // namespace modelfs::testing
