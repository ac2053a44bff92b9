// The graceful path on a node without modelfs: a real containerd 1.6 (CRI disabled, overlayfs
// snapshotter, its own root, state and socket) pulls the volume image V that `modelfs push`
// wrote. It unpacks only V's small layer, the mounted image shows the `.modelfs/` pointer
// files, and the registry's access log shows that no byte of the model's layers was fetched.
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/oci/volume_image.h"
#include "core/status/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/harness/registry_fixture.h"
#include "integration/publish/publish_test_env.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kContainerd[] = "/usr/bin/containerd";
constexpr char kCtr[] = "/usr/bin/ctr";
constexpr char kNamespace[] = "modelfs-e2e";

// Mount points at or below `dir`, deepest first (so they can be unmounted in that order).
std::vector<std::string> MountsUnder(const std::string& dir) {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() > 4 && (f[4] == dir || absl::StartsWith(f[4], dir + "/"))) out.push_back(f[4]);
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return out;
}

// Why this machine cannot run containerd for the test, or "" when it can.
std::string WhyNoContainerd() {
  if (geteuid() != 0) return "containerd needs root (overlay mounts)";
  if (!fs::exists(kContainerd) || !fs::exists(kCtr)) return "containerd 1.6 / ctr not installed";
  std::ifstream fss("/proc/filesystems");
  std::string all((std::istreambuf_iterator<char>(fss)), std::istreambuf_iterator<char>());
  if (!absl::StrContains(all, "overlay")) return "the kernel has no overlay filesystem";
  return "";
}

// A containerd of our own: root, state, socket and hosts directory in a temporary directory,
// the CRI plugin disabled. Stopped by PID and unmounted in the destructor.
class Containerd {
 public:
  static absl::StatusOr<std::unique_ptr<Containerd>> Start(const std::string& registry_host_port) {
    std::unique_ptr<Containerd> c(new Containerd());
    c->socket_ = c->dir_.Join("containerd.sock").string();
    c->hosts_dir_ = c->dir_.Join("certs.d").string();
    c->dir_.WriteFile(
        absl::StrCat("certs.d/", registry_host_port, "/hosts.toml"),
        absl::StrCat("server = \"http://", registry_host_port, "\"\n\n[host.\"http://",
                     registry_host_port, "\"]\n  capabilities = [\"pull\", \"resolve\"]\n"));
    std::string root = c->dir_.Join("root").string();
    std::string config = absl::StrCat(
        "version = 2\n", "root = \"", root, "\"\n", "state = \"", c->dir_.Join("state").string(),
        "\"\n", "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n", "[grpc]\n  address = \"",
        c->socket_, "\"\n", "[ttrpc]\n  address = \"", c->socket_, ".ttrpc\"\n",
        "[debug]\n  address = \"\"\n", "[metrics]\n  address = \"\"\n",
        // The opt plugin would otherwise create /opt/containerd on the host.
        "[plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"", c->dir_.Join("opt").string(),
        "\"\n");
    std::string config_path = c->dir_.WriteFile("config.toml", config).string();
    ASSIGN_OR_RETURN(c->process_, ChildProcess::Spawn({kContainerd, "--config", config_path},
                                                      c->dir_.Join("containerd.log").string()));
    absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (true) {
      if (fs::exists(c->socket_)) {
        absl::StatusOr<ProcessResult> v = RunProcess({kCtr, "--address", c->socket_, "version"});
        if (v.ok() && v->exit_code == 0) break;
      }
      if (!c->process_->running() || absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("containerd did not come up; log:\n",
                         ReadFileOrDie(c->dir_.Join("containerd.log").string())));
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return c;
  }

  ~Containerd() {
    // Unmount what a failed test may have left, stop the daemon, then unmount what it left.
    for (const auto& m : MountsUnder(dir_.path().string())) umount2(m.c_str(), MNT_DETACH);
    if (process_) process_->Stop();
    for (const auto& m : MountsUnder(dir_.path().string())) umount2(m.c_str(), MNT_DETACH);
  }

  absl::StatusOr<ProcessResult> Ctr(std::vector<std::string> args) {
    std::vector<std::string> argv = {kCtr, "--address", socket_, "--namespace", kNamespace};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, {}, absl::Seconds(90));
  }
  const std::string& hosts_dir() const { return hosts_dir_; }
  std::string MountPoint() const { return dir_.Join("mnt").string(); }

 private:
  Containerd() = default;
  TempDir dir_;
  std::string socket_;
  std::string hosts_dir_;
  std::unique_ptr<ChildProcess> process_;
};

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
    std::string why = WhyNoContainerd();
    if (!why.empty()) GTEST_SKIP() << why;
    RegistryFixtureOptions o;
    o.access_log = true;
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start(o));
    ASSERT_OK(WriteTestModel(tmp_.Join("model").string(), /*seed=*/31).status());
    ASSERT_OK_AND_ASSIGN(ProcessResult push, RunModelfs({"push", "--plain-http", Ref("v1"),
                                                         tmp_.Join("model").string(), "--json"}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    push_ = ParseJsonOutput(push.out);
    absl::StatusOr<std::unique_ptr<Containerd>> c = Containerd::Start(registry_->host_port());
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
  fs::create_directories(mnt);
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
