// `modelfs node ls | prefetch | evict` against the modelfs-snapshotter binary and a real
// docker-registry on loopback: the daemon (SnapshotterDaemon) serves a model whose volume
// layer was prepared over its snapshots socket as containerd's CRI pull would; the CLI finds
// the admin socket through the daemon's config file. Checks every field of `node ls --json`,
// a prefetch to a sealed model, its evict, the refusal to evict a model a snapshot holds, and
// the admin socket's mode.
#include <grpcpp/grpcpp.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "containerd/services/snapshots/v1/snapshots.grpc.pb.h"
#include "core/oci/manifest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/snapshotter/snapshotter_daemon.h"
#include "nlohmann/json.hpp"
#include "snapshotter/model/model_snapshotter.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::snapshotter {
namespace {

namespace fs = std::filesystem;
namespace v1 = containerd::services::snapshots::v1;
using ::modelfs::testing::ParseJsonOutput;
using ::modelfs::testing::RegistryFixture;
using ::modelfs::testing::RunModelfs;
using ::modelfs::testing::SnapshotterDaemon;
using ::modelfs::testing::SnapshotterDaemonOptions;
using ::modelfs::testing::TempDir;
using nlohmann::json;
using ::testing::HasSubstr;

struct Pushed {
  std::string ref;     // the model's tag; the volume image is ref + "-volume"
  std::string model;   // M's digest
  std::string volume;  // V's digest
  std::string chain_id;
  Labels labels;  // what a CRI pull passes with the Prepare of V's layer A
};

class NodeAdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_OR_FAIL_IF_UNAVAILABLE(SnapshotterDaemon::WhyUnavailable());
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start());
    ASSERT_NO_FATAL_FAILURE(Push("node/held:v1", 61, &held_));
    ASSERT_NO_FATAL_FAILURE(Push("node/warm:v1", 62, &warm_));
    admin_socket_ = tmp_.Join("admin/admin.sock").string();
    SnapshotterDaemonOptions o;
    o.insecure_hosts = {registry_->host_port()};
    o.top_level_config = absl::StrCat("admin_socket = \"", admin_socket_, "\"\n");
    ASSERT_OK_AND_ASSIGN(daemon_, SnapshotterDaemon::Start(o));
    stub_ = v1::Snapshots::NewStub(
        grpc::CreateChannel("unix:" + daemon_->socket_path(), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (daemon_) daemon_->Stop();
    if (daemon_) umount2((daemon_->root() + "/mnt").c_str(), MNT_DETACH);
  }

  void Push(const std::string& repo_tag, uint64_t seed, Pushed* out) {
    const fs::path dir = tmp_.Join("model-" + std::to_string(seed));
    ASSERT_OK(modelfs::testing::WriteTestModel(dir.string(), seed).status());
    out->ref = absl::StrCat(registry_->host_port(), "/", repo_tag);
    ASSERT_OK_AND_ASSIGN(auto push,
                         RunModelfs({"push", "--plain-http", out->ref, dir.string(), "--json"}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    json j = ParseJsonOutput(push.out);
    out->model = j["model"]["digest"];
    out->volume = j["volume"]["digest"];
    const std::string repo = repo_tag.substr(0, repo_tag.find(':'));
    ASSERT_OK_AND_ASSIGN(auto client, modelfs::testing::ConnectPlainHttp(registry_->host_port()));
    ASSERT_OK_AND_ASSIGN(ManifestResult v, client->GetManifest(repo, out->volume));
    ASSERT_OK_AND_ASSIGN(Manifest vm, ParseManifest(v.bytes));
    out->chain_id = vm.layers[0].digest.str();
    out->labels = Labels(vm.layers[0].annotations.begin(), vm.layers[0].annotations.end());
    out->labels[kLabelTargetRef] = out->chain_id;
    out->labels[kLabelCriImageRef] = out->ref + "-volume";
    out->labels[kLabelCriManifestDigest] = out->volume;
  }

  grpc::Status Prepare(const std::string& key, const Labels& labels) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::PrepareSnapshotRequest req;
    req.set_snapshotter("modelfs");
    req.set_key(key);
    req.mutable_labels()->insert(labels.begin(), labels.end());
    v1::PrepareSnapshotResponse resp;
    return stub_->Prepare(&ctx, req, &resp);
  }

  // `modelfs node ARGS... --config <the daemon's config>`.
  modelfs::testing::ProcessResult Node(std::vector<std::string> args) {
    args.insert(args.begin(), "node");
    args.insert(args.end(), {"--config", daemon_->config_path()});
    absl::StatusOr<modelfs::testing::ProcessResult> r = RunModelfs(args);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : modelfs::testing::ProcessResult{};
  }

  json List() {
    modelfs::testing::ProcessResult r = Node({"ls", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return ParseJsonOutput(r.out);
  }

  static const json* ModelIn(const json& node, const std::string& digest) {
    for (const json& m : node["models"]) {
      if (m["model_digest"] == digest) return &m;
    }
    return nullptr;
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
  Pushed held_;
  Pushed warm_;
  std::string admin_socket_;
  std::unique_ptr<SnapshotterDaemon> daemon_;
  std::unique_ptr<v1::Snapshots::Stub> stub_;
};

TEST_F(NodeAdminTest, TheAdminSocketIsRootOnly) {
  struct stat st;
  ASSERT_EQ(::stat(admin_socket_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, 0u);
  ASSERT_EQ(::stat(fs::path(admin_socket_).parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(NodeAdminTest, LsShowsAPreparedModelWithEveryField) {
  ASSERT_EQ(Prepare("extract-1", held_.labels).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  const json node = List();
  ASSERT_EQ(node["models"].size(), 1u) << node.dump(2);
  const json& m = node["models"][0];
  EXPECT_EQ(m["name"], "sha256-" + held_.model.substr(7));
  EXPECT_EQ(m["model_digest"], held_.model);
  EXPECT_EQ(m["volume_digest"], held_.volume);
  EXPECT_EQ(m["reference"], absl::StrCat(registry_->host_port(), "/node/held@", held_.volume));
  EXPECT_EQ(m["registry"], registry_->host_port());
  EXPECT_EQ(m["repository"], "node/held");
  EXPECT_EQ(m["state"], "ready");
  EXPECT_EQ(m["error"], "");
  EXPECT_EQ(m["prefetched"], false);
  EXPECT_GT(m["layers"].get<uint64_t>(), 0u);
  EXPECT_GT(m["size"].get<uint64_t>(), 0u);
  EXPECT_LE(m["cached_bytes"].get<uint64_t>(), m["size"].get<uint64_t>());
  EXPECT_LE(m["verified_bytes"].get<uint64_t>(), m["size"].get<uint64_t>());
  EXPECT_EQ(m["sealed"], false);  // nothing read yet, and prefetch = none
  EXPECT_EQ(m["passthrough_opens"], 0u);
  ASSERT_EQ(m["snapshots"].size(), 1u);
  EXPECT_EQ(m["snapshots"][0]["key"], held_.chain_id);
  EXPECT_EQ(m["snapshots"][0]["kind"], "committed");
  EXPECT_EQ(m["snapshots"][0]["image"], held_.ref + "-volume");
  EXPECT_EQ(m["snapshots"][0]["container"], "");
  EXPECT_EQ(node["cache"]["max_bytes"], 0u);
  EXPECT_EQ(node["cache"]["disk_full"], false);
  EXPECT_GE(node["cache"]["layers"].get<uint64_t>(), m["layers"].get<uint64_t>());
  EXPECT_EQ(node["layers"], json::array());
  EXPECT_EQ(node["errors"], json::array());

  modelfs::testing::ProcessResult text = Node({"ls"});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr(held_.model.substr(0, 19)));
  EXPECT_THAT(text.out, HasSubstr("committed " + held_.chain_id));
}

TEST_F(NodeAdminTest, PrefetchSealsEveryLayerAndEvictDropsIt) {
  modelfs::testing::ProcessResult prefetch = Node({"prefetch", warm_.ref + "-volume", "--json"});
  ASSERT_EQ(prefetch.exit_code, 0) << prefetch.err;
  json done = ParseJsonOutput(prefetch.out);
  EXPECT_EQ(done["phase"], "done");
  EXPECT_EQ(done["model_digest"], warm_.model);
  EXPECT_EQ(done["layers_sealed"], done["layers"]);
  EXPECT_EQ(done["verified_bytes"], done["total_bytes"]);

  json node = List();
  const json* m = ModelIn(node, warm_.model);
  ASSERT_NE(m, nullptr) << node.dump(2);
  EXPECT_EQ((*m)["prefetched"], true);
  EXPECT_EQ((*m)["sealed"], true);
  EXPECT_EQ((*m)["verified_bytes"], (*m)["size"]);
  EXPECT_EQ((*m)["cached_bytes"], (*m)["size"]);
  EXPECT_EQ((*m)["snapshots"], json::array());
  const uint64_t size = (*m)["size"];
  const uint64_t cached_before = node["cache"]["bytes"];
  EXPECT_GE(cached_before, size);

  modelfs::testing::ProcessResult evict = Node({"evict", warm_.ref + "-volume", "--json"});
  ASSERT_EQ(evict.exit_code, 0) << evict.err;
  json evicted = ParseJsonOutput(evict.out);
  EXPECT_EQ(evicted["model_digest"], warm_.model);
  EXPECT_EQ(evicted["was_registered"], true);
  EXPECT_EQ(evicted["bytes_evicted"], size);
  EXPECT_EQ(evicted["layers_kept"], 0u);
  node = List();
  EXPECT_EQ(ModelIn(node, warm_.model), nullptr);
  EXPECT_EQ(node["cache"]["bytes"].get<uint64_t>(), cached_before - size);

  // Prefetched again: fetched and verified afresh.
  modelfs::testing::ProcessResult again = Node({"prefetch", warm_.ref + "-volume"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  node = List();
  ASSERT_NE(ModelIn(node, warm_.model), nullptr);
  EXPECT_EQ((*ModelIn(node, warm_.model))["sealed"], true);
}

TEST_F(NodeAdminTest, EvictOfAModelASnapshotHoldsExitsTwoNamingTheSnapshot) {
  ASSERT_EQ(Prepare("extract-1", held_.labels).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  modelfs::testing::ProcessResult evict = Node({"evict", held_.model});
  EXPECT_EQ(evict.exit_code, 2);
  EXPECT_THAT(evict.err, HasSubstr(held_.chain_id));
  const json node = List();
  const json* m = ModelIn(node, held_.model);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ((*m)["state"], "ready");
}

TEST_F(NodeAdminTest, PrefetchOfAReferenceThatIsNotOneExitsTwo) {
  modelfs::testing::ProcessResult r = Node({"prefetch", "not a reference"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("not an image reference"));
}

}  // namespace
}  // namespace modelfs::snapshotter
