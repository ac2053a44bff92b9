// `modelfs mount` through a real pull-through cache: docker-registry (Distribution 2.8) with
// `proxy.remoteurl` in front of the origin registry, configured the containerd way in a
// certs.d directory:
//
//   <certs>/<origin>/hosts.toml
//     server = "http://<origin>"
//     [host."http://<mirror>"]
//       capabilities = ["pull", "resolve"]
//
// Checked: a mount through a cold mirror reads every byte; once the mirror has stored the
// model, a fresh mount (fresh cache) reads every byte with the origin stopped, and further
// mounts cost the origin nothing; a stopped mirror falls back to the origin; a mirror that dies
// mid-load leaves the rest of the load to the origin, within the read deadline; a mirror whose
// answers carry wrong bytes (a fault proxy in front of it flips a byte of every blob answer) is
// refused chunk by chunk and the origin serves those chunks. Every file is compared with what
// was pushed, byte for byte (0 wrong bytes in every case). Traffic is counted from both
// registries' access logs, by client (the mirror's Go client, modelfs).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/oci/digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kRepoTag[] = "models/mirrored:v1";
constexpr char kMirrorAgent[] = "Go-http-client";  // Distribution's proxy client
constexpr char kModelfsAgent[] = "modelfs/";

// GETs of /v2/.../blobs/<digest> in a registry access log, by digest and client.
struct BlobGets {
  std::map<std::string, int> by_mirror;   // the pull-through cache fetching from upstream
  std::map<std::string, int> by_modelfs;  // modelfs itself
  int total = 0;
  int modelfs_total = 0;
};

BlobGets CountBlobGets(const std::string& log_path) {
  BlobGets out;
  std::ifstream in(log_path);
  std::string line;
  while (std::getline(in, line)) {
    size_t get = line.find("\"GET /v2/");
    if (get == std::string::npos) continue;
    size_t blobs = line.find("/blobs/sha256:", get);
    size_t space = line.find(' ', get + 5);
    if (blobs == std::string::npos || blobs > space) continue;
    std::string digest = line.substr(blobs + 7, space - blobs - 7);
    digest = digest.substr(0, digest.find('?'));
    ++out.total;
    if (line.find(kMirrorAgent) != std::string::npos) ++out.by_mirror[digest];
    if (line.find(kModelfsAgent) != std::string::npos) {
      ++out.by_modelfs[digest];
      ++out.modelfs_total;
    }
  }
  return out;
}

class MirrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || !fs::exists("/dev/fuse")) {
      SKIP_OR_FAIL_IF_UNAVAILABLE("needs root and /dev/fuse");
    }
    BecomeSubreaper();
    RegistryFixtureOptions oo;
    oo.access_log = true;
    ASSERT_OK_AND_ASSIGN(origin_, RegistryFixture::Start(oo));
    const std::string src = tmp_.Join("src").string();
    ASSERT_OK(WriteTestModel(src, /*seed=*/23).status());
    want_ = DescribeFiles(src);
    model_ref_ = absl::StrCat(origin_->host_port(), "/", kRepoTag);
    ASSERT_OK_AND_ASSIGN(ProcessResult push, RunModelfs({"push", "--plain-http", model_ref_, src}));
    ASSERT_EQ(push.exit_code, 0) << push.err;

    RegistryFixtureOptions mo;
    mo.access_log = true;
    mo.proxy_remote_url = absl::StrCat("http://", origin_->host_port());
    ASSERT_OK_AND_ASSIGN(mirror_, RegistryFixture::Start(mo));

    certs_ = tmp_.Join("certs.d").string();
    fs::create_directories(fs::path(certs_) / origin_->host_port());
    std::ofstream(fs::path(certs_) / origin_->host_port() / "hosts.toml")
        << "server = \"http://" << origin_->host_port() << "\"\n"
        << "[host.\"http://" << mirror_->host_port() << "\"]\n"
        << "  capabilities = [\"pull\", \"resolve\"]\n";
  }

  void TearDown() override {
    for (auto& m : mounts_) EXPECT_OK(m->Unmount());
    if (HasFailure()) {
      for (const auto& [name, log] : logs_) {
        std::cerr << name << ":\n" << ReadAll(log) << "\n";
      }
    }
    mounts_.clear();
  }

  // Mounts the volume image by its tag on the origin's name, with a cache of its own, through
  // the hosts.toml above, and checks every file against what was pushed, byte for byte.
  void MountAndReadEverything(const std::string& name) {
    const std::string dir = tmp_.Join("mnt-" + name).string();
    fs::create_directories(dir);
    MountOptions o;
    o.cache_dir = tmp_.Join("cache-" + name).string();
    o.hosts_dir = certs_;
    o.log_file = tmp_.Join("mount-" + name + ".log").string();
    logs_[name] = o.log_file;
    auto m = ModelMount::Start(model_ref_ + "-volume", dir, o);
    ASSERT_OK(m.status());
    mounts_.push_back(std::move(*m));
    std::map<std::string, std::string> got = DescribeFiles(dir);
    got.erase(".modelinfo.json");
    EXPECT_EQ(got, want_);
    EXPECT_OK(mounts_.back()->Unmount());
  }

  // Mounts the volume image with a cache of its own through the hosts.toml above and returns
  // the mount (owned by the fixture); its files are not read.
  ModelMount* StartMount(const std::string& name, double read_deadline_s = 0) {
    const std::string dir = tmp_.Join("mnt-" + name).string();
    fs::create_directories(dir);
    MountOptions o;
    o.cache_dir = tmp_.Join("cache-" + name).string();
    o.hosts_dir = certs_;
    o.read_deadline_s = read_deadline_s;
    o.log_file = tmp_.Join("mount-" + name + ".log").string();
    logs_[name] = o.log_file;
    auto m = ModelMount::Start(model_ref_ + "-volume", dir, o);
    EXPECT_OK(m.status());
    if (!m.ok()) return nullptr;
    mounts_.push_back(std::move(*m));
    return mounts_.back().get();
  }

  // Names `host_port` as the mirror in hosts.toml instead of the mirror itself.
  void NameMirror(const std::string& host_port) {
    std::ofstream(fs::path(certs_) / origin_->host_port() / "hosts.toml")
        << "server = \"http://" << origin_->host_port() << "\"\n"
        << "[host.\"http://" << host_port << "\"]\n"
        << "  capabilities = [\"pull\", \"resolve\"]\n";
  }

  // The largest file pushed (relative path) and its size.
  std::pair<std::string, uint64_t> LargestFile() {
    std::pair<std::string, uint64_t> best;
    for (const auto& [rel, digest] : want_) {
      const uint64_t size = fs::file_size(tmp_.Join("src") / rel);
      if (size > best.second) best = {rel, size};
    }
    return best;
  }

  // Waits until the mirror has stored (and so can serve without the origin) every blob it
  // fetched from the origin: Distribution stores a missed blob in the background.
  void WaitUntilTheMirrorStoredWhatItFetched() {
    std::set<std::string> fetched;
    for (const auto& [d, n] : CountBlobGets(origin_->log_path()).by_mirror) fetched.insert(d);
    ASSERT_FALSE(fetched.empty());
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    for (const std::string& d : fetched) {
      ASSERT_OK_AND_ASSIGN(Digest digest, Digest::Parse(d));
      const std::string path = mirror_->BlobDataPath(digest);
      while (!(fs::exists(path) && Sha256Of(ReadAll(path)) == d)) {
        ASSERT_LT(absl::Now(), deadline) << "the mirror never stored " << d;
        absl::SleepFor(absl::Milliseconds(50));
      }
    }
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> origin_;
  std::unique_ptr<RegistryFixture> mirror_;
  std::string certs_;
  std::string model_ref_;
  std::map<std::string, std::string> want_;  // relative path -> sha256 of what was pushed
  std::vector<std::unique_ptr<ModelMount>> mounts_;
  std::map<std::string, std::string> logs_;
};

TEST_F(MirrorTest, AMountThroughAColdMirrorReadsEveryByte) {
  MountAndReadEverything("cold");
  // Every request of modelfs went to the mirror first: it answered the tag and the manifests,
  // and asked the origin for the blobs on modelfs's behalf.
  BlobGets at_mirror = CountBlobGets(mirror_->log_path());
  EXPECT_GT(at_mirror.by_modelfs.size(), 0u);
  EXPECT_GT(CountBlobGets(origin_->log_path()).by_mirror.size(), 0u);
}

TEST_F(MirrorTest, WithTheOriginStoppedAFreshMountReadsEveryByteThroughTheMirror) {
  MountAndReadEverything("warm-up");
  WaitUntilTheMirrorStoredWhatItFetched();
  origin_->Stop();
  MountAndReadEverything("origin-down");
  EXPECT_FALSE(origin_->running());
}

TEST_F(MirrorTest, TheOriginServesEachBlobOnlyWhileTheMirrorFillsAndNeverAgain) {
  MountAndReadEverything("warm-up");
  WaitUntilTheMirrorStoredWhatItFetched();
  const BlobGets warm = CountBlobGets(origin_->log_path());
  // What the origin served while the mirror was cold, by client. Distribution 2.8 fetches a
  // missed blob twice (registry/proxy/proxyblobstore.go ServeBlob: once to store it, once to
  // stream it to the client that asked, which modelfs cuts at its first byte), and once more
  // for every request it gets before it has stored it. modelfs asks a mirror that answered
  // with the whole blob one request at a time, and waits for it rather than reading the
  // blob's ranges from the origin.
  for (const auto& [d, n] : warm.by_mirror) {
    std::cout << "origin served " << d << ": " << n << " GET(s) to the mirror, "
              << (warm.by_modelfs.count(d) ? warm.by_modelfs.at(d) : 0)
              << " range GET(s) to modelfs\n";
    EXPECT_GE(n, 1) << d;
    // Twice on a quiet machine: the mirror stored the blob before modelfs asked it again (on
    // loopback, within the first wait of 250 ms). Each request modelfs makes while the mirror
    // is still storing costs one more, and on a loaded machine (CI compiles beside the tests)
    // the store can outlast that first wait: a third was seen there. More than four would mean
    // modelfs asks while the mirror fills instead of waiting for it. What never happens, loaded
    // or not, is the origin serving a blob once the mirror has it (below).
    EXPECT_LE(n, 4) << d;
  }
  EXPECT_EQ(warm.modelfs_total, 0) << "modelfs read blobs from the origin around the mirror";

  MountAndReadEverything("second");
  MountAndReadEverything("third");
  const BlobGets after = CountBlobGets(origin_->log_path());
  EXPECT_EQ(after.total, warm.total) << "the origin served blobs after the mirror had them";
  // The two later mounts read every blob from the mirror's store.
  BlobGets at_mirror = CountBlobGets(mirror_->log_path());
  for (const auto& [d, n] : warm.by_mirror) EXPECT_GE(at_mirror.by_modelfs[d], 2) << d;
}

// The mirror serves the start of a load, then dies: the rest comes from the origin, and no
// read fails (each has a 5 s deadline here).
TEST_F(MirrorTest, AMirrorThatDiesMidLoadLeavesTheRestOfTheLoadToTheOrigin) {
  MountAndReadEverything("warm-up");
  WaitUntilTheMirrorStoredWhatItFetched();
  const BlobGets before = CountBlobGets(origin_->log_path());
  ModelMount* m = StartMount("dies", /*read_deadline_s=*/5);
  ASSERT_NE(m, nullptr);
  const auto [largest, size] = LargestFile();
  {
    std::ifstream in(fs::path(m->dir()) / largest, std::ios::binary);
    std::string head(1 << 20, '\0');
    ASSERT_TRUE(in.read(head.data(), head.size())) << largest;
  }
  ASSERT_EQ(CountBlobGets(origin_->log_path()).total, before.total)
      << "the origin served blobs while the mirror was up and warm";
  mirror_->Stop();
  const absl::Time start = absl::Now();
  std::map<std::string, std::string> got = DescribeFiles(m->dir());
  got.erase(".modelinfo.json");
  EXPECT_EQ(got, want_);
  std::cout << "read the rest in " << absl::FormatDuration(absl::Now() - start)
            << " after the mirror died\n";
  EXPECT_GT(CountBlobGets(origin_->log_path()).total, before.total);
}

// A fault proxy in front of the (warm) mirror flips a byte of every blob answer: each chunk it
// carries fails verification, is refused, and is fetched again from the origin; every file reads
// right.
TEST_F(MirrorTest, WrongBytesFromTheMirrorAreRefusedAndTheOriginServesThoseChunks) {
  MountAndReadEverything("warm-up");
  WaitUntilTheMirrorStoredWhatItFetched();
  const BlobGets before = CountBlobGets(origin_->log_path());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FaultProxy> liar,
                       FaultProxy::Start(mirror_->host_port(), {}));
  NameMirror(liar->host_port());
  ModelMount* m = StartMount("lied-to", /*read_deadline_s=*/5);
  ASSERT_NE(m, nullptr);
  // From now on (the mount resolved its manifests and config through the proxy unharmed).
  ASSERT_OK(liar->SetBlobFault(FaultProxyOptions::BlobFault::kCorrupt, /*first=*/0));
  std::map<std::string, std::string> got = DescribeFiles(m->dir());
  got.erase(".modelinfo.json");
  EXPECT_EQ(got, want_);
  ASSERT_OK_AND_ASSIGN(int faults, liar->Stat("blob_faults"));
  EXPECT_GT(faults, 0);
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m->FreshStats());
  EXPECT_GT(stats.value("verification_failures", 0), 0) << stats.dump();
  EXPECT_GT(CountBlobGets(origin_->log_path()).modelfs_total, before.modelfs_total);
}

TEST_F(MirrorTest, AStoppedMirrorFallsBackToTheOrigin) {
  mirror_->Stop();
  MountAndReadEverything("mirror-down");
  BlobGets at_origin = CountBlobGets(origin_->log_path());
  EXPECT_GT(at_origin.by_modelfs.size(), 0u);
  EXPECT_EQ(at_origin.by_mirror.size(), 0u);
}

}  // namespace
}  // namespace modelfs::testing
