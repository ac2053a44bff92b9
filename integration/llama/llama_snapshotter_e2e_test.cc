// llama.cpp loads models through the snapshotter's tree exactly as from local disk: the volume
// image V pushed with `modelfs push`, prepared by ModelSnapshotter with the labels a CRI pull
// of V passes (the remote Prepare that registers the model in the daemon's FUSE tree), then a
// read-only View on its chain ID bind-mounted as a pod's image volume would be, and the GGUFs
// (F16, Q8_0, Q4_K) loaded there cold, with mmap and with use_mmap=false. The daemon binary and
// containerd are left out (integration/snapshotter covers them): this is the same tree and read
// path, driven in-process.
//
// Needs root, /dev/fuse, Node.js >= 20 and `npm ci` in testsupport/llama: skipped without them,
// failed under CI=true.
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/oci/manifest.h"
#include "core/status/status_macros.h"
#include "gtest/gtest.h"
#include "integration/llama/llama_test_env.h"
#include "snapshotter/model/model_snapshotter.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::snapshotter {
namespace {

namespace fs = std::filesystem;
using ::modelfs::testing::LlamaSuite;
using ::modelfs::testing::TempDir;

LlamaSuite* env = nullptr;
std::string suite_unavailable;
std::string suite_error;

class LlamaSnapshotterE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) != 0) {
      suite_unavailable = "needs root and /dev/fuse";
      return;
    }
    suite_unavailable = modelfs::testing::LlamaUnavailable();
    if (!suite_unavailable.empty()) return;
    setenv("DOCKER_CONFIG", "/nonexistent/modelfs-llama-e2e", 1);
    auto suite = modelfs::testing::StartLlamaSuite();
    if (!suite.ok()) {
      suite_error = std::string(suite.status().message());
      return;
    }
    env = suite->release();
  }

  static void TearDownTestSuite() {
    delete env;
    env = nullptr;
  }

  void SetUp() override {
    SKIP_OR_FAIL_IF_UNAVAILABLE(suite_unavailable);
    ASSERT_EQ(suite_error, "") << "suite setup failed";
    ModelSnapshotterOptions o;
    o.root = tmp_.Join("root");
    o.registry.hosts.plain_http_hosts = {env->registry->host_port()};
    o.prefetch = PrefetchPolicy::kNone;
    o.log = [this](const log::Event& e) {
      log_ += log::FormatLine(e, absl::Now(), log::Format::kLogfmt) + "\n";
    };
    ASSERT_OK_AND_ASSIGN(snapshotter_, ModelSnapshotter::Open(o));
  }

  void TearDown() override {
    if (!volume_.empty()) umount2(volume_.c_str(), MNT_DETACH);
    if (snapshotter_) (void)snapshotter_->Shutdown();
    snapshotter_.reset();
    if (HasFailure()) std::cerr << "snapshotter log:\n" << log_;
  }

  // What a CRI pull of V and a pod's image volume do: the remote Prepare of V's layer (answered
  // ALREADY_EXISTS once the model is registered), then a View on its chain ID, bind-mounted.
  // Returns the volume's directory.
  absl::StatusOr<std::string> PrepareVolume() {
    ASSIGN_OR_RETURN(auto client, modelfs::testing::ConnectPlainHttp(env->registry->host_port()));
    ASSIGN_OR_RETURN(ManifestResult v, client->GetManifest(env->repository, "v1-volume"));
    ASSIGN_OR_RETURN(Manifest vm, ParseManifest(v.bytes));
    if (vm.layers.size() != 1) return absl::InternalError("V has other than one layer");
    // One uncompressed layer: its chain ID is its digest.
    const std::string chain = vm.layers[0].digest.str();
    Labels labels(vm.layers[0].annotations.begin(), vm.layers[0].annotations.end());
    labels[kLabelTargetRef] = chain;
    labels[kLabelCriImageRef] = env->volume_ref;
    labels[kLabelCriManifestDigest] = v.digest.str();
    labels["containerd.io/snapshot/cri.layer-digest"] = chain;
    absl::Status prepared =
        snapshotter_->Prepare("k8s.io/1/extract-1 " + chain, "", labels).status();
    if (!absl::IsAlreadyExists(prepared)) {
      return absl::InternalError(absl::StrCat("the remote Prepare answered ", prepared.ToString(),
                                              ", not ALREADY_EXISTS"));
    }
    ASSIGN_OR_RETURN(std::vector<Mount> mounts, snapshotter_->View("volume-1", chain, {}));
    if (mounts.size() != 1 || mounts[0].type != "bind") {
      return absl::InternalError("the View is not one bind mount");
    }
    const std::string target = tmp_.Join("volume").string();
    fs::create_directories(target);
    if (::mount(mounts[0].source.c_str(), target.c_str(), "", MS_BIND | MS_REC, nullptr) != 0) {
      return absl::InternalError(absl::StrCat("bind mount: ", strerror(errno)));
    }
    volume_ = target;
    ::mount("", target.c_str(), "", MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr);
    return target;
  }

  TempDir tmp_;
  std::unique_ptr<ModelSnapshotter> snapshotter_;
  std::string volume_;
  std::string log_;
};

TEST_F(LlamaSnapshotterE2eTest, ColdVolumeWithMmapEvaluatesAsFromLocalDisk) {
  ASSERT_OK_AND_ASSIGN(std::string dir, PrepareVolume());
  modelfs::testing::ExpectEveryModelEvaluatesAsFromLocalDisk(*env, dir, /*use_mmap=*/true);
}

TEST_F(LlamaSnapshotterE2eTest, ColdVolumeWithoutMmapEvaluatesAsFromLocalDisk) {
  ASSERT_OK_AND_ASSIGN(std::string dir, PrepareVolume());
  modelfs::testing::ExpectEveryModelEvaluatesAsFromLocalDisk(*env, dir, /*use_mmap=*/false);
}

}  // namespace
}  // namespace modelfs::snapshotter
