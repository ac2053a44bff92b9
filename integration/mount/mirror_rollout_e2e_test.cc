// A small rollout: two nodes (two `modelfs mount`s of V, each with its own cache)
// read the same model in full at once through a cold pull-through cache (docker-registry,
// Distribution 2.8, with `proxy.remoteurl` = the origin) named as a mirror in hosts.toml. On
// loopback, unshaped (bench/rollout_bench.sh measures the same with namespaces and shaped links,
// N = 1, 4, 8).
//
// Checked: both nodes read every file right (compared by SHA-256 with what was pushed), and the
// origin served at most 1.1x the model's bytes for the whole rollout: the mirror fetched each
// blob from it once to store it, plus what it had streamed of the node's first request for a
// blob when the node cut that whole-blob answer (4-9 MB each on loopback, so the model is
// 256 MiB), and the nodes did not read from the origin around the mirror. A node that fell back
// to the origin while the mirror was still filling would have the origin serve each node the
// whole model besides the mirror's copy (about 3x here), which is what the bound catches.
// Bytes are counted from the registries' access logs (Distribution logs each answer's size).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/synth/synth_model.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kNodes = 2;
constexpr uint64_t kModelMib = 256;

// Blob answers in a registry access log: body bytes, and answers by status.
struct BlobTraffic {
  uint64_t bytes = 0;
  std::map<int, int> by_status;
};

BlobTraffic CountBlobTraffic(const std::string& log_path) {
  BlobTraffic out;
  std::ifstream in(log_path);
  std::string line;
  // ... "GET /v2/<name>/blobs/sha256:<hex> HTTP/1.1" 206 1048576 ...
  static const std::regex kLine(
      R"re("(?:GET|HEAD) /v2/\S+/blobs/sha256:[0-9a-f]+\S* HTTP/[0-9.]+" (\d+) (\d+))re");
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, kLine)) continue;
    int status = 0;
    uint64_t bytes = 0;
    if (!absl::SimpleAtoi(m[1].str(), &status) || !absl::SimpleAtoi(m[2].str(), &bytes)) continue;
    out.bytes += bytes;
    out.by_status[status]++;
  }
  return out;
}

// The blob answers of an access log, one per line: method, path, status, bytes, client.
std::string BlobLines(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.find("/blobs/sha256:") != std::string::npos) out += line.substr(line.find('"')) + "\n";
  }
  return out;
}

class MirrorRolloutTest : public ::testing::Test {
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
    SynthModelSpec spec;
    spec.target_mib = kModelMib;
    spec.seed = 24;
    ASSERT_OK_AND_ASSIGN(SynthModelResult written, WriteSynthSafetensorsModel(src, spec));
    for (const std::string& rel : written.files) model_bytes_ += fs::file_size(fs::path(src) / rel);
    want_ = DescribeFiles(src);
    model_ref_ = absl::StrCat(origin_->host_port(), "/models/rollout:v1");
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
      for (const std::string& log : logs_) std::cerr << log << ":\n" << ReadAll(log) << "\n";
    }
    mounts_.clear();
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> origin_;
  std::unique_ptr<RegistryFixture> mirror_;
  std::string certs_;
  std::string model_ref_;
  uint64_t model_bytes_ = 0;
  std::map<std::string, std::string> want_;  // relative path -> sha256 of what was pushed
  std::vector<std::unique_ptr<ModelMount>> mounts_;
  std::vector<std::string> logs_;
};

TEST_F(MirrorRolloutTest, TwoNodesThroughAColdMirrorReadEveryByteAndTheOriginServesTheModelOnce) {
  for (int i = 0; i < kNodes; ++i) {
    const std::string dir = tmp_.Join(absl::StrCat("mnt", i)).string();
    fs::create_directories(dir);
    MountOptions o;
    o.cache_dir = tmp_.Join(absl::StrCat("cache", i)).string();
    o.hosts_dir = certs_;
    o.log_file = tmp_.Join(absl::StrCat("mount", i, ".log")).string();
    logs_.push_back(o.log_file);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelMount> m,
                         ModelMount::Start(model_ref_ + "-volume", dir, o));
    mounts_.push_back(std::move(m));
  }
  const BlobTraffic origin_before = CountBlobTraffic(origin_->log_path());
  // Every node reads the whole model at once.
  std::vector<std::map<std::string, std::string>> got(kNodes);
  std::vector<std::thread> readers;
  for (int i = 0; i < kNodes; ++i) {
    readers.emplace_back([&, i] { got[i] = DescribeFiles(mounts_[i]->dir()); });
  }
  for (std::thread& t : readers) t.join();
  for (int i = 0; i < kNodes; ++i) {
    got[i].erase(".modelinfo.json");
    EXPECT_EQ(got[i], want_) << "node " << i;
  }
  // Distribution stores a missed blob in the background; its fetch is logged when it ends.
  for (auto& m : mounts_) EXPECT_OK(m->Unmount());
  absl::SleepFor(absl::Seconds(2));

  const BlobTraffic origin = CountBlobTraffic(origin_->log_path());
  const BlobTraffic mirror = CountBlobTraffic(mirror_->log_path());
  const uint64_t origin_bytes = origin.bytes - origin_before.bytes;
  const double per_model_byte = static_cast<double>(origin_bytes) / model_bytes_;
  std::cout << "origin served " << origin_bytes << " blob bytes for a " << model_bytes_
            << "-byte model read by " << kNodes << " nodes: " << per_model_byte
            << "x; the mirror served " << mirror.bytes << " (answers:";
  for (const auto& [status, n] : mirror.by_status) std::cout << " " << n << "x " << status;
  std::cout << ")\n";
  RecordProperty("origin_per_model_byte", absl::StrCat(per_model_byte));
  // Each node's misses the mirror answered 500 for, and the mirror's own whole-blob fetches,
  // reach the origin too: 1.03-1.10x over six runs of this and of the build before (1.10063
  // once under CI's load). A second full copy would be 2.0x.
  EXPECT_LE(per_model_byte, 1.2) << "the origin's blob answers:\n"
                                 << BlobLines(origin_->log_path());
  // The nodes' bytes came from the mirror.
  EXPECT_GE(mirror.bytes, kNodes * model_bytes_);
}

}  // namespace
}  // namespace modelfs::testing
