// KServe's own pod for an `oci+native://` storageUri, driven over CRI as the kubelet runs it, with
// llama.cpp as the model server. KServe v0.20's webhook (ConfigureImageVolumeToContainer, and the
// pod spec test/e2e/storage/test_oci_native.py in kserve/kserve checks) adds to the predictor
// pod an image volume of the reference (pullPolicy IfNotPresent) and mounts it on
// kserve-container read-only at /mnt/models with `subPath: models`; the kubelet turns that into
// PullImage of the reference and a CreateContainer mount {container_path /mnt/models, readonly,
// image <PullImage's image_ref>, image_sub_path "models"}. Here the reference is V published
// with `modelfs push --path-prefix models`; the server (testsupport/llama/eval.mjs under the
// node's Node.js, whose /usr, /lib and /lib64 the container binds read-only, as a runtime image
// would carry them) loads /mnt/models/<gguf> and must give the tokens and probabilities of the
// local file, while containerd fetches none of the model's weights.
//
// Runs on containerd 2.2 and later ($MODELFS_CONTAINERD_RELEASE): 2.1 ignores the subPath. Without
// root, FUSE, the release, Node.js with node-llama-cpp or the daemon the test skips, except with
// CI=true, where it fails.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/llama/llama_test_env.h"
#include "integration/snapshotter/snapshotter_daemon.h"
#include "nlohmann/json.hpp"
#include "testsupport/cri/cri_client.h"
#include "testsupport/harness/containerd_fixture.h"
#include "testsupport/harness/containerd_release.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/synth/synthetic_models.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kModelRepo[] = "kserve/llama";
constexpr char kBusyboxRepo[] = "kserve/busybox";
constexpr char kBusyboxBinary[] = "/bin/busybox";
constexpr char kGguf[] = "llama-q8_0.gguf";
constexpr uint32_t kQ8_0 = 8;

// Blob GETs of `repo` in a registry access log (Distribution's combined format) by user agent
// prefix ("containerd/", "modelfs/"): digest -> response bytes.
std::map<std::string, uint64_t> BlobBytesBy(const std::string& log, const std::string& repo,
                                            const std::string& agent_prefix) {
  static const std::regex re(
      "\"GET (/v2/[^ ?]*)[^ ]* HTTP/[0-9.]+\" [0-9]{3} ([0-9]+|-) \"[^\"]*\" \"([^\"]*)\"");
  std::map<std::string, uint64_t> out;
  const std::string prefix = absl::StrCat("/v2/", repo, "/blobs/");
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it) {
    const std::string path = (*it)[1].str();
    if (!absl::StartsWith(path, prefix) || !absl::StartsWith((*it)[3].str(), agent_prefix)) {
      continue;
    }
    out[path.substr(prefix.size())] += (*it)[2].str() == "-" ? 0 : std::stoull((*it)[2].str());
  }
  return out;
}

class KServeNativeTest : public ::testing::Test {
 protected:
  void MissingComponent(const std::string& why) {
    if (RunningInCi()) FAIL() << why << " (CI=true: this test must run in CI)";
    GTEST_SKIP() << why;
  }

  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(release_, ContainerdReleaseUnderTest());
    if (!release_.applies_image_sub_path) {
      GTEST_SKIP() << "containerd " << release_.version << " ignores image_sub_path";
    }
    absl::StatusOr<std::string> dir = ContainerdReleaseDir(release_);
    if (!dir.ok() && dir.status().code() == absl::StatusCode::kNotFound) {
      return MissingComponent(std::string(dir.status().message()));
    }
    ASSERT_OK(dir.status());
    const char* src = std::getenv("MODELFS_SOURCE_DIR");
    source_dir_ = src != nullptr ? src : "";
    for (const std::string& why :
         {Containerd::WhyUnavailable(*dir), SnapshotterDaemon::WhyUnavailable(), LlamaUnavailable(),
          std::string(access(kBusyboxBinary, X_OK) == 0 ? "" : "no /bin/busybox")}) {
      if (!why.empty()) return MissingComponent(why);
    }
    RegistryFixtureOptions ro;
    ro.access_log = true;
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start(ro));
    std::vector<LayerFile> files = {{"bin/busybox", ReadFileOrDie(kBusyboxBinary), 0755, ""}};
    for (const char* applet : {"sh", "ls", "sleep"}) {
      files.push_back({absl::StrCat("bin/", applet), "", 0777, "busybox"});
    }
    ASSERT_OK_AND_ASSIGN(busybox_, PushOrdinaryImage(registry_->host_port(), kBusyboxRepo, "1.35",
                                                     {files}, {"/bin/sleep", "86400"}));
    const std::string socket = tmp_.Join("containerd.sock").string();
    SnapshotterDaemonOptions so;
    so.insecure_hosts = {registry_->host_port()};
    so.containerd_address = socket;
    ASSERT_OK_AND_ASSIGN(daemon_, SnapshotterDaemon::Start(so));
    ContainerdOptions co;
    co.release_dir = *dir;
    co.config_version = release_.config_version;
    co.registry_host_port = registry_->host_port();
    co.proxy_snapshotter_address = daemon_->socket_path();
    co.cri = true;
    co.cri_snapshotter = "modelfs";
    co.sandbox_image = busybox_.reference;
    co.socket_path = socket;
    ASSERT_OK_AND_ASSIGN(containerd_, Containerd::Start(co));
    ASSERT_OK_AND_ASSIGN(images_, CriImageClient::Connect(containerd_->grpc_target()));
    ASSERT_OK_AND_ASSIGN(runtime_, CriRuntimeClient::Connect(containerd_->grpc_target()));
  }

  void TearDown() override {
    if (runtime_ != nullptr) {
      for (const std::string& id : containers_) {
        EXPECT_OK(runtime_->StopContainer(id, absl::Seconds(5)));
        EXPECT_OK(runtime_->RemoveContainer(id));
      }
      for (const std::string& id : sandboxes_) {
        EXPECT_OK(runtime_->StopPodSandbox(id));
        EXPECT_OK(runtime_->RemovePodSandbox(id));
      }
    }
    if (HasFailure() && daemon_ != nullptr) {
      const std::string log = ReadFileOrDie(daemon_->log_path());
      std::cerr << "--- modelfs-snapshotter log (tail) ---\n"
                << log.substr(log.size() > 8000 ? log.size() - 8000 : 0) << "\n";
    }
    if (HasFailure() && containerd_ != nullptr) {
      const std::string log = ReadFileOrDie(containerd_->log_path());
      std::cerr << "--- containerd log (tail) ---\n"
                << log.substr(log.size() > 8000 ? log.size() - 8000 : 0) << "\n";
    }
  }

  TempDir tmp_;
  ContainerdRelease release_;
  std::string source_dir_;
  std::unique_ptr<RegistryFixture> registry_;
  PushedImage busybox_;
  std::unique_ptr<SnapshotterDaemon> daemon_;
  std::unique_ptr<Containerd> containerd_;  // destroyed before the daemon
  std::unique_ptr<CriImageClient> images_;
  std::unique_ptr<CriRuntimeClient> runtime_;
  std::vector<std::string> sandboxes_, containers_;
};

TEST_F(KServeNativeTest, LlamaCppStartedFromKServesPodSpecReadsTheModelContainerdNeverFetched) {
  // The model, published for KServe, and what llama.cpp makes of the local file.
  const std::string model_dir = tmp_.Join("model").string();
  fs::create_directories(model_dir);
  LlamaCppSpec spec;
  spec.weight_type = kQ8_0;
  ASSERT_OK(WriteLlamaCppGguf(model_dir + "/" + kGguf, spec));
  ASSERT_OK_AND_ASSIGN(nlohmann::json local, EvalWithLlama(model_dir + "/" + kGguf, true));
  const std::string m_ref = absl::StrCat(registry_->host_port(), "/", kModelRepo, ":v1");
  ASSERT_OK_AND_ASSIGN(ProcessResult push,
                       RunModelfs({"push", "--plain-http", "--json", m_ref, model_dir,
                                   "--path-prefix", "models", "--volume-tag", "v1-kserve"}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  const nlohmann::json pushed = ParseJsonOutput(push.out);
  std::string weight_digest, volume_config;
  for (const auto& b : pushed["blobs"]) {
    if (b["role"] == kGguf) weight_digest = b["digest"];
    if (b["role"] == "volume config") volume_config = b["digest"];
  }
  ASSERT_FALSE(weight_digest.empty()) << push.out;
  // storageUri: oci+native://<registry>/kserve/llama@sha256:<V>, as docs/install.md says.
  const std::string storage_ref = absl::StrCat(registry_->host_port(), "/", kModelRepo, "@",
                                               pushed["volume"]["digest"].get<std::string>());
  const size_t log_offset = ReadFileOrDie(registry_->log_path()).size();

  // The predictor pod: RunPodSandbox, PullImage of the volume's reference and of the server's
  // image, CreateContainer of kserve-container with KServe's mount.
  CriPodSpec pod;
  pod.name = "llama-predictor";
  pod.uid = "llama-predictor-uid";
  pod.log_directory = tmp_.Join("pods/llama-predictor").string();
  fs::create_directories(pod.log_directory);
  ASSERT_OK_AND_ASSIGN(std::string sandbox, runtime_->RunPodSandbox(pod));
  sandboxes_.push_back(sandbox);
  ASSERT_OK_AND_ASSIGN(std::string volume, images_->PullImageForPod(storage_ref, pod));
  EXPECT_EQ(volume, volume_config);
  ASSERT_OK_AND_ASSIGN(std::string server, images_->PullImageForPod(busybox_.reference, pod));
  CriContainerSpec c;
  c.name = "kserve-container";
  c.image = server;
  const std::string llama_dir = source_dir_ + "/testsupport/llama";
  c.command = {"/bin/sh", "-c",
               absl::StrCat("ls -A /mnt/models && exec /usr/bin/node ", llama_dir,
                            "/eval.mjs /mnt/models/", kGguf)};
  c.mounts = {{"/mnt/models", "", volume, /*readonly=*/true, /*image_sub_path=*/"models"},
              {"/usr", "/usr", "", true},
              {"/lib", "/lib", "", true},
              {"/lib64", "/lib64", "", true},
              {"/etc/ld.so.cache", "/etc/ld.so.cache", "", true},
              {llama_dir, llama_dir, "", true}};
  c.log_path = "kserve-container.log";
  ASSERT_OK_AND_ASSIGN(std::string id, runtime_->CreateContainer(sandbox, c, pod));
  containers_.push_back(id);
  ASSERT_OK(runtime_->StartContainer(id));
  ASSERT_OK_AND_ASSIGN(CriContainerStatus st, runtime_->WaitForExit(id, absl::Minutes(5)));
  const std::string log = ReadFileOrDie(pod.log_directory + "/kserve-container.log");
  const std::string out = ParseCriLog(log);
  ASSERT_EQ(st.exit_code, 0) << out << ParseCriLog(log, "stderr");

  // /mnt/models holds the model's file and .modelinfo.json, nothing else.
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << out;
  EXPECT_EQ(std::set<std::string>(lines.begin(), lines.begin() + 2),
            (std::set<std::string>{".modelinfo.json", kGguf}));
  const nlohmann::json got = nlohmann::json::parse(lines[2], nullptr, false);
  ASSERT_TRUE(got.is_object()) << lines[2];
  ASSERT_EQ(got["tokens"].size(), 4u);
  EXPECT_EQ(got["tokens"], local["tokens"]);
  EXPECT_EQ(got["steps"], local["steps"]);
  std::cout << "[kserve] llama.cpp in kserve-container: load " << got["load_ms"]
            << " ms, first token " << got["first_token_ms"] << " ms\n";

  // containerd fetched V's config and nothing of the model; modelfs read the weights by range.
  const std::string access = ReadFileOrDie(registry_->log_path()).substr(log_offset);
  EXPECT_EQ(BlobBytesBy(access, kModelRepo, "containerd/").count(weight_digest), 0u);
  std::set<std::string> containerd_blobs;
  for (const auto& [digest, bytes] : BlobBytesBy(access, kModelRepo, "containerd/")) {
    containerd_blobs.insert(digest);
  }
  EXPECT_EQ(containerd_blobs, std::set<std::string>{volume_config});
  EXPECT_GT(BlobBytesBy(access, kModelRepo, "modelfs/")[weight_digest], 0u);
}

}  // namespace
}  // namespace modelfs::testing
