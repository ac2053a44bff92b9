// A volume image whose chunk indexes are over the 4 MiB layer A may hold (docs/volume-image.md,
// "Index layers"): 9 GiB of weights pushed with `--chunk-size 64KiB` (4.5 MiB of indexes), so
// `modelfs push` writes them into an index layer below A. The model is read, and checked byte
// for byte, through `modelfs mount` and through an image volume of a pod on an upstream
// containerd release ($MODELFS_CONTAINERD_RELEASE; 2.3.4 in CTest) with the modelfs
// snapshotter, which answers the index layer as a remote snapshot too (containerd fetches none
// of V's layers).
//
// Slow (9 GiB pushed to a loopback registry): labelled e2e and slow. The weights are sparse
// files with random bytes in a few places; those places are what the readers check. Without
// root, FUSE, the containerd release or the daemon the test skips, except with CI=true, where it
// fails.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/oci/digest.h"
#include "core/oci/manifest.h"
#include "core/oci/volume_image.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "integration/snapshotter/snapshotter_daemon.h"
#include "testsupport/cri/cri_client.h"
#include "testsupport/harness/containerd_fixture.h"
#include "testsupport/harness/containerd_release.h"
#include "testsupport/harness/process_runner.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kModelRepo[] = "e2e/big";
constexpr char kBusyboxRepo[] = "e2e/busybox";
constexpr char kBusyboxBinary[] = "/bin/busybox";
constexpr uint64_t kShardBytes = 3ull << 30;
constexpr int kShards = 3;
constexpr uint64_t kRegion = 1 << 20;  // the bytes checked at each place

// Where each shard holds random bytes (64 KiB-aligned, so `dd bs=64k` reaches them).
std::vector<uint64_t> RegionOffsets() {
  return {0, kShardBytes / 2 + (64 << 10), kShardBytes - kRegion};
}

std::string ShardName(int i) { return absl::StrCat("shard-", i, ".dat"); }

// Writes the sparse shards; returns "<shard> <offset>" -> SHA-256 of the region there.
std::map<std::string, std::string> WriteSparseModel(const std::string& dir) {
  fs::create_directories(dir);
  std::map<std::string, std::string> want;
  std::mt19937_64 rng(29);
  for (int i = 0; i < kShards; ++i) {
    const std::string path = absl::StrCat(dir, "/", ShardName(i));
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0) << path;
    if (fd < 0) return want;
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(kShardBytes)), 0);
    for (uint64_t off : RegionOffsets()) {
      std::string bytes(kRegion, '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      EXPECT_EQ(::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(off)),
                static_cast<ssize_t>(bytes.size()));
      want[absl::StrCat(ShardName(i), " ", off)] = Digest::Of(bytes).str();
    }
    ::close(fd);
  }
  return want;
}

// The same regions read from a mounted directory.
std::map<std::string, std::string> ReadRegions(const std::string& dir) {
  std::map<std::string, std::string> got;
  for (int i = 0; i < kShards; ++i) {
    const std::string path = absl::StrCat(dir, "/", ShardName(i));
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0) << path;
    if (fd < 0) continue;
    EXPECT_EQ(static_cast<uint64_t>(::lseek(fd, 0, SEEK_END)), kShardBytes);
    for (uint64_t off : RegionOffsets()) {
      std::string bytes(kRegion, '\0');
      ssize_t n = ::pread(fd, bytes.data(), bytes.size(), static_cast<off_t>(off));
      EXPECT_EQ(n, static_cast<ssize_t>(kRegion)) << path << " at " << off;
      got[absl::StrCat(ShardName(i), " ", off)] = Digest::Of(bytes).str();
    }
    ::close(fd);
  }
  return got;
}

// A shell script printing "<shard> <offset> <sha256 hex>" per region, read with busybox dd.
std::string ReadRegionsScript() {
  std::string script = "set -e; cd /models; ";
  for (int i = 0; i < kShards; ++i) {
    for (uint64_t off : RegionOffsets()) {
      absl::StrAppend(&script, "echo \"", ShardName(i), " ", off, " $(dd if=", ShardName(i),
                      " bs=65536 skip=", off / 65536, " count=", kRegion / 65536,
                      " 2>/dev/null | sha256sum)\"; ");
    }
  }
  return script;
}

class IndexLayersE2eTest : public ::testing::Test {
 protected:
  void MissingComponent(const std::string& why) {
    if (RunningInCi()) FAIL() << why << " (CI=true: this test must run in CI)";
    GTEST_SKIP() << why;
  }

  void TearDown() override {
    for (const std::string& id : containers_) {
      EXPECT_OK(runtime_->StopContainer(id, absl::Seconds(5)));
      EXPECT_OK(runtime_->RemoveContainer(id));
    }
    for (const std::string& id : sandboxes_) {
      EXPECT_OK(runtime_->StopPodSandbox(id));
      EXPECT_OK(runtime_->RemovePodSandbox(id));
    }
    if (HasFailure() && daemon_ != nullptr) {
      std::string log = ReadFileOrDie(daemon_->log_path());
      std::cerr << "--- modelfs-snapshotter log (tail) ---\n"
                << log.substr(log.size() > 12000 ? log.size() - 12000 : 0) << "\n";
    }
    if (HasFailure() && containerd_ != nullptr) {
      std::string log = ReadFileOrDie(containerd_->log_path());
      std::cerr << "--- containerd log (tail) ---\n"
                << log.substr(log.size() > 12000 ? log.size() - 12000 : 0) << "\n";
    }
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
  std::unique_ptr<SnapshotterDaemon> daemon_;
  std::unique_ptr<Containerd> containerd_;
  std::unique_ptr<CriImageClient> images_;
  std::unique_ptr<CriRuntimeClient> runtime_;
  std::vector<std::string> sandboxes_, containers_;
};

TEST_F(IndexLayersE2eTest, NineGiBAt64KiBChunksMountByTheCliAndInAPod) {
  ASSERT_OK_AND_ASSIGN(const ContainerdRelease under_test, ContainerdReleaseUnderTest());
  absl::StatusOr<std::string> release = ContainerdReleaseDir(under_test);
  if (!release.ok()) return MissingComponent(std::string(release.status().message()));
  for (const std::string& why :
       {Containerd::WhyUnavailable(*release), SnapshotterDaemon::WhyUnavailable(),
        std::string(access(kBusyboxBinary, X_OK) == 0 ? ""
                                                      : "no /bin/busybox (package busybox-static)"),
        std::string(access("/dev/fuse", R_OK | W_OK) == 0 ? "" : "no /dev/fuse")}) {
    if (!why.empty()) return MissingComponent(why);
  }
  BecomeSubreaper();
  RegistryFixtureOptions ro;
  ro.access_log = true;
  ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start(ro));
  const std::string host = registry_->host_port();

  // 9 GiB at 64 KiB chunks: 147,456 BLAKE3 hashes, 4.5 MiB of chunk indexes.
  const std::string src = tmp_.Join("model").string();
  const std::map<std::string, std::string> want = WriteSparseModel(src);
  ASSERT_FALSE(HasFailure());
  // RunModelfs allows two minutes; pushing 9 GiB on a busy machine may take longer.
  ASSERT_OK_AND_ASSIGN(
      ProcessResult push,
      RunProcess({ModelfsBinary(), "push", "--plain-http",
                  absl::StrCat(host, "/", kModelRepo, ":v1"), src, "--chunk-size", "64KiB"},
                 {{"DOCKER_CONFIG", tmp_.Join("no-docker-config").string()}}, absl::Minutes(30)));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  const std::string volume_ref = absl::StrCat(host, "/", kModelRepo, ":v1-volume");

  // V: the index layer below A, uncompressed, annotated with its role, and over 4 MiB.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RegistryClient> client, ConnectPlainHttp(host));
  ASSERT_OK_AND_ASSIGN(ManifestResult vm, client->GetManifest(kModelRepo, "v1-volume"));
  ASSERT_OK_AND_ASSIGN(Manifest v, ParseManifest(vm.bytes));
  ASSERT_EQ(v.layers.size(), 2u) << vm.bytes;
  const Descriptor& index_layer = v.layers[0];
  ASSERT_NE(index_layer.Annotation(kLabelRole), nullptr);
  EXPECT_EQ(*index_layer.Annotation(kLabelRole), "index");
  EXPECT_GT(index_layer.size, kMaxVolumeLayerBytes);
  EXPECT_LT(v.layers[1].size, 64u << 10);
  EXPECT_NE(v.layers[1].Annotation(kLabelModel), nullptr);
  std::cout << "[figures] V: index layer " << index_layer.size << " bytes, A " << v.layers[1].size
            << " bytes\n";

  {
    // `modelfs mount` of V.
    MountOptions mo;
    mo.cache_dir = tmp_.Join("cli-cache").string();
    const std::string dir = tmp_.Join("cli-mnt").string();
    fs::create_directories(dir);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelMount> mount, ModelMount::Start(volume_ref, dir, mo));
    EXPECT_EQ(ReadRegions(dir), want);
    EXPECT_OK(mount->Unmount());
  }

  // A pod on the containerd release under test (2.3.4 in CTest) with the modelfs snapshotter, V
  // as an image volume.
  const std::string containerd_socket = tmp_.Join("containerd.sock").string();
  std::vector<LayerFile> files = {{"bin/busybox", ReadFileOrDie(kBusyboxBinary), 0755, ""}};
  for (const char* applet : {"sh", "sha256sum", "sleep", "dd", "echo"}) {
    files.push_back({absl::StrCat("bin/", applet), "", 0777, "busybox"});
  }
  ASSERT_OK_AND_ASSIGN(PushedImage busybox, PushOrdinaryImage(host, kBusyboxRepo, "1.35", {files},
                                                              {"/bin/sleep", "86400"}));
  SnapshotterDaemonOptions so;
  so.insecure_hosts = {host};
  so.containerd_address = containerd_socket;
  ASSERT_OK_AND_ASSIGN(daemon_, SnapshotterDaemon::Start(so));
  ContainerdOptions co;
  co.release_dir = *release;
  co.config_version = under_test.config_version;
  co.registry_host_port = host;
  co.proxy_snapshotter_name = "modelfs";
  co.proxy_snapshotter_address = daemon_->socket_path();
  co.cri = true;
  co.cri_snapshotter = "modelfs";
  co.sandbox_image = busybox.reference;
  co.socket_path = containerd_socket;
  ASSERT_OK_AND_ASSIGN(containerd_, Containerd::Start(co));
  ASSERT_OK_AND_ASSIGN(images_, CriImageClient::Connect(containerd_->grpc_target()));
  ASSERT_OK_AND_ASSIGN(runtime_, CriRuntimeClient::Connect(containerd_->grpc_target()));

  const size_t log_offset = ReadFileOrDie(registry_->log_path()).size();
  CriPodSpec pod;
  pod.name = "big";
  pod.uid = "big-uid";
  pod.log_directory = tmp_.Join("pods/big").string();
  fs::create_directories(pod.log_directory);
  ASSERT_OK_AND_ASSIGN(std::string sandbox, runtime_->RunPodSandbox(pod));
  sandboxes_.push_back(sandbox);
  ASSERT_OK_AND_ASSIGN(std::string volume_image, images_->PullImageForPod(volume_ref, pod));
  CriContainerSpec c;
  c.name = "reader";
  c.image = busybox.reference;
  c.command = {"/bin/sh", "-c", ReadRegionsScript()};
  c.mounts = {{"/models", "", volume_image, true}};
  c.log_path = "reader.log";
  ASSERT_OK_AND_ASSIGN(std::string id, runtime_->CreateContainer(sandbox, c, pod));
  containers_.push_back(id);
  ASSERT_OK(runtime_->StartContainer(id));
  ASSERT_OK_AND_ASSIGN(CriContainerStatus st, runtime_->WaitForExit(id, absl::Minutes(5)));
  const std::string out = ParseCriLog(ReadFileOrDie(pod.log_directory + "/reader.log"));
  EXPECT_EQ(st.exit_code, 0) << out;
  std::map<std::string, std::string> seen;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() >= 3) seen[absl::StrCat(f[0], " ", f[1])] = "sha256:" + f[2];
  }
  EXPECT_EQ(seen, want) << out;

  // containerd fetched none of V's layers: the daemon answered both as remote snapshots. The
  // daemon read the index layer whole and only the regions' chunks of the weights.
  const std::string log = ReadFileOrDie(registry_->log_path());
  const std::map<std::string, uint64_t> bytes = BlobBytesInAccessLog(log, log_offset, kModelRepo);
  auto by = [&](const Digest& d) {
    auto it = bytes.find(d.str());
    return it == bytes.end() ? 0 : it->second;
  };
  EXPECT_EQ(by(index_layer.digest), index_layer.size);
  uint64_t weights = 0;
  for (const auto& [digest, n] : bytes) {
    if (digest != index_layer.digest.str() && digest != v.layers[1].digest.str() &&
        digest != v.config.digest.str()) {
      weights += n;
    }
  }
  std::cout << "[figures] pod: registry bytes of weights " << weights << " for "
            << want.size() * kRegion << " bytes read\n";
  EXPECT_LE(weights, 4 * want.size() * kRegion);
  // No blob GET of the model's repository by containerd (its user agent "containerd/...") but
  // V's config.
  for (absl::string_view line : absl::StrSplit(log.substr(log_offset), '\n')) {
    if (absl::StrContains(line, absl::StrCat("GET /v2/", kModelRepo, "/blobs/")) &&
        !absl::StrContains(line, v.config.digest.str())) {
      EXPECT_FALSE(absl::StrContains(line, "\"containerd/")) << line;
    }
  }
  const std::string daemon_log = ReadFileOrDie(daemon_->log_path());
  EXPECT_TRUE(absl::StrContains(daemon_log, "answered as remote")) << daemon_log;
}

}  // namespace
}  // namespace modelfs::testing
