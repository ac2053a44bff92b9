// Where a volume image may send the node: V on registry 1 (anonymous) names its model M on
// registry 2, which wants credentials the node has and the pod's owner may not; and V in
// tenant-a/ names M in tenant-b/ of its own registry, which the node can read too (a
// multi-tenant registry). modelfs-snapshotter under a real containerd 1.6 (CRI, the modelfs
// proxy snapshotter) follows V to M only where snapshotter.toml's model_hosts allows:
//  - by default the CRI pull of V fails, containerd's error names both repositories and the
//    line to add, and the daemon sent no request for M at all;
//  - with model_hosts = [registry 2] (a host: any repository there), or [registry 1/tenant-b/*]
//    (a repository prefix), the same pull mounts M;
//  - with registry 2 down, the pull fails UNAVAILABLE naming it (no pointer files in the
//    model's place), and the retry once it is back mounts M.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
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
using ::testing::HasSubstr;

constexpr char kUser[] = "node";
constexpr char kPassword[] = "node-Pa55word-model-hosts";

class ModelHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string& why :
         {Containerd::WhyUnavailable(), SnapshotterDaemon::WhyUnavailable()}) {
      SKIP_OR_FAIL_IF_UNAVAILABLE(why);
    }
    RegistryFixtureOptions vo;
    vo.access_log = true;
    ASSERT_OK_AND_ASSIGN(volumes_, RegistryFixture::Start(vo));
    RegistryFixtureOptions mo;
    mo.auth = RegistryFixtureOptions::Auth::kHtpasswd;
    mo.username = kUser;
    mo.password = kPassword;
    mo.access_log = true;
    ASSERT_OK_AND_ASSIGN(models_, RegistryFixture::Start(mo));

    // The node's credentials: registry 2 only (registry 1 is anonymous).
    nlohmann::json config = {
        {"auths",
         {{models_->host_port(),
           {{"auth", absl::Base64Escape(absl::StrCat(kUser, ":", kPassword))}}}}}};
    docker_config_ = tmp_.WriteFile("config.json", config.dump(2)).string();

    source_ = tmp_.Join("model").string();
    ASSERT_OK(WriteTestModel(source_, /*seed=*/43).status());
    const std::string m_ref = absl::StrCat(models_->host_port(), "/private/llama:v1");
    ASSERT_OK_AND_ASSIGN(ProcessResult push,
                         RunModelfs({"push", "--plain-http", "--docker-config", docker_config_,
                                     "--json", m_ref, source_}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    model_digest_ = ParseJsonOutput(push.out)["model"]["digest"];
    // V on registry 1, naming M where it is (`convert --to`).
    v_ref_ = absl::StrCat(volumes_->host_port(), "/team/llama:v1-volume");
    ASSERT_OK_AND_ASSIGN(ProcessResult convert,
                         RunModelfs({"convert", "--plain-http", "--docker-config", docker_config_,
                                     m_ref, "--to", v_ref_}));
    ASSERT_EQ(convert.exit_code, 0) << convert.err;
  }

  void TearDown() override {
    if (HasFailure() && daemon_ != nullptr) {
      std::cerr << "--- modelfs-snapshotter log ---\n" << ReadFileOrDie(daemon_->log_path());
    }
  }

  // The daemon (credentials for registry 2, both registries over plain HTTP) with
  // `model_hosts`, and containerd 1.6 pulling into it through CRI. The credentials come from
  // the docker config, or with `plugin` from a kubelet credential provider plugin (a script
  // that logs each request to plugin.log) and no docker config at all.
  void StartNode(const std::vector<std::string>& model_hosts, bool plugin = false) {
    SnapshotterDaemonOptions so;
    so.insecure_hosts = {volumes_->host_port(), models_->host_port()};
    so.docker_config = plugin ? "" : docker_config_;
    if (plugin) {
      const fs::path script = tmp_.Join("plugins/node-plugin");
      fs::create_directories(script.parent_path());
      const std::string log = tmp_.Join("plugin.log").string();
      std::ofstream(script) << "#!/bin/sh\ncat >> '" << log << "'\necho >> '" << log << "'\n"
                            << R"(echo '{"kind":"CredentialProviderResponse",)"
                            << R"("apiVersion":"credentialprovider.kubelet.k8s.io/v1",)"
                            << R"("cacheKeyType":"Registry","auth":{")" << models_->host_port()
                            << R"(":{"username":")" << kUser << R"(","password":")" << kPassword
                            << R"("}}}')"
                            << "\n";
      fs::permissions(script, fs::perms::owner_all);
      const std::string config =
          tmp_.WriteFile("credential-provider.json",
                         absl::StrCat(R"({"apiVersion":"kubelet.config.k8s.io/v1",)",
                                      R"("kind":"CredentialProviderConfig","providers":[)",
                                      R"({"name":"node-plugin","matchImages":[")",
                                      models_->host_port(), R"("],"defaultCacheDuration":"1h",)",
                                      R"("apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]})"))
              .string();
      so.top_level_config = absl::StrCat("credential_provider_config = \"", config,
                                         "\"\ncredential_provider_bin_dir = \"",
                                         script.parent_path().string(), "\"\n");
    }
    so.model_hosts = model_hosts;
    ASSERT_OK_AND_ASSIGN(daemon_, SnapshotterDaemon::Start(so));
    ContainerdOptions co;
    co.registry_host_port = volumes_->host_port();
    co.proxy_snapshotter_name = "modelfs";
    co.proxy_snapshotter_address = daemon_->socket_path();
    co.cri = true;
    co.cri_snapshotter = "modelfs";
    ASSERT_OK_AND_ASSIGN(containerd_, Containerd::Start(co));
    ASSERT_OK_AND_ASSIGN(cri_, CriImageClient::Connect(containerd_->grpc_target()));
  }

  // M in tenant-b/ of registry 1 and V made from it in tenant-a/ (`convert --to`).
  void PushTenantModel() {
    const std::string m_ref = absl::StrCat(volumes_->host_port(), "/tenant-b/llama:v1");
    ASSERT_OK_AND_ASSIGN(ProcessResult push,
                         RunModelfs({"push", "--plain-http", "--json", m_ref, source_}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    tenant_model_digest_ = ParseJsonOutput(push.out)["model"]["digest"];
    tenant_v_ref_ = absl::StrCat(volumes_->host_port(), "/tenant-a/llama:v1-volume");
    ASSERT_OK_AND_ASSIGN(ProcessResult convert,
                         RunModelfs({"convert", "--plain-http", m_ref, "--to", tenant_v_ref_}));
    ASSERT_EQ(convert.exit_code, 0) << convert.err;
  }

  std::string ModelDir() const {
    return daemon_->root() + "/mnt/sha256-" + model_digest_.substr(7);
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> volumes_;  // registry 1: V, anonymous
  std::unique_ptr<RegistryFixture> models_;   // registry 2: M, htpasswd
  std::unique_ptr<SnapshotterDaemon> daemon_;
  std::unique_ptr<Containerd> containerd_;  // destroyed before the daemon
  std::unique_ptr<CriImageClient> cri_;
  std::string docker_config_;
  std::string source_;
  std::string model_digest_;
  std::string v_ref_;
  std::string tenant_model_digest_;
  std::string tenant_v_ref_;
};

TEST_F(ModelHostsTest, AVolumeImageNamingAModelOnAnotherRegistryIsRefusedByDefault) {
  StartNode({});
  ASSERT_FALSE(HasFatalFailure());
  const size_t models_log_before = ReadFileOrDie(models_->log_path()).size();
  absl::StatusOr<std::string> pulled = cri_->PullImage(v_ref_);
  ASSERT_FALSE(pulled.ok()) << "pulled " << *pulled;
  const std::string why(pulled.status().message());
  std::cout << "[refusal] CRI PullImage: " << why << "\n";
  EXPECT_THAT(why, HasSubstr(absl::StrCat(
                       "in repository ", volumes_->host_port(), "/team/llama names its model ",
                       model_digest_, " in repository ", models_->host_port(), "/private/llama")));
  EXPECT_THAT(
      why, HasSubstr(absl::StrCat("model_hosts = [\"", models_->host_port(), "/private/llama\"]")));
  // Refused before any request to registry 2, and nothing registered.
  EXPECT_THAT(ReadFileOrDie(models_->log_path()).substr(models_log_before),
              ::testing::Not(HasSubstr("/v2/")));
  EXPECT_FALSE(fs::exists(ModelDir()));
  const std::string daemon_log = ReadFileOrDie(daemon_->log_path());
  EXPECT_THAT(daemon_log, HasSubstr("level=error component=snapshotter msg=\"model not mounted\""));
  EXPECT_THAT(daemon_log, HasSubstr("reason=\"PERMISSION_DENIED:"));
}

// The confused deputy on one registry: tenant-a's V names tenant-b's M.
TEST_F(ModelHostsTest, AVolumeImageNamingAModelInAnotherTenantsRepositoryIsRefusedByDefault) {
  PushTenantModel();
  ASSERT_FALSE(HasFatalFailure());
  StartNode({});
  ASSERT_FALSE(HasFatalFailure());
  const size_t log_before = ReadFileOrDie(volumes_->log_path()).size();
  absl::StatusOr<std::string> pulled = cri_->PullImage(tenant_v_ref_);
  ASSERT_FALSE(pulled.ok()) << "pulled " << *pulled;
  const std::string why(pulled.status().message());
  std::cout << "[refusal] CRI PullImage: " << why << "\n";
  EXPECT_THAT(why,
              HasSubstr(absl::StrCat("in repository ", volumes_->host_port(),
                                     "/tenant-a/llama names its model ", tenant_model_digest_,
                                     " in repository ", volumes_->host_port(), "/tenant-b/llama")));
  EXPECT_THAT(why, HasSubstr(absl::StrCat("model_hosts = [\"", volumes_->host_port(),
                                          "/tenant-b/llama\"]")));
  // No request for anything of tenant-b's repository, and nothing registered.
  EXPECT_THAT(ReadFileOrDie(volumes_->log_path()).substr(log_before),
              ::testing::Not(HasSubstr("/v2/tenant-b/")));
  EXPECT_FALSE(fs::exists(daemon_->root() + "/mnt/sha256-" + tenant_model_digest_.substr(7)));
}

TEST_F(ModelHostsTest, AVolumeImageNamingAModelInAnotherTenantsRepositoryIsMountedOncePrefixed) {
  PushTenantModel();
  ASSERT_FALSE(HasFatalFailure());
  StartNode({absl::StrCat(volumes_->host_port(), "/tenant-b/*")});
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_OK(cri_->PullImage(tenant_v_ref_).status());
  const std::string dir = daemon_->root() + "/mnt/sha256-" + tenant_model_digest_.substr(7);
  std::map<std::string, std::string> got = DescribeFiles(dir);
  EXPECT_EQ(got.erase(".modelinfo.json"), 1u) << "no .modelinfo.json in " << dir;
  EXPECT_EQ(got, DescribeFiles(source_));
}

TEST_F(ModelHostsTest, AVolumeImageNamingAModelOnAListedRegistryIsMounted) {
  StartNode({models_->host_port()});
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_OK(cri_->PullImage(v_ref_).status());
  std::map<std::string, std::string> got = DescribeFiles(ModelDir());
  EXPECT_EQ(got.erase(".modelinfo.json"), 1u) << "no .modelinfo.json in " << ModelDir();
  EXPECT_EQ(got, DescribeFiles(source_));
  EXPECT_EQ(ReadFileOrDie(ModelDir() + "/config.json"), ReadFileOrDie(source_ + "/config.json"));
}

// The node's credentials for registry 2 from a kubelet credential provider plugin instead of a
// docker config: the daemon runs the plugin (a CredentialProviderRequest naming the registry)
// and mounts the model.
TEST_F(ModelHostsTest, AModelIsMountedWithCredentialsFromAKubeletCredentialProviderPlugin) {
  StartNode({models_->host_port()}, /*plugin=*/true);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_OK(cri_->PullImage(v_ref_).status());
  std::map<std::string, std::string> got = DescribeFiles(ModelDir());
  EXPECT_EQ(got.erase(".modelinfo.json"), 1u) << "no .modelinfo.json in " << ModelDir();
  EXPECT_EQ(got, DescribeFiles(source_));
  EXPECT_EQ(ReadFileOrDie(tmp_.Join("plugin.log").string()),
            absl::StrCat(R"({"apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":")",
                         models_->host_port(), R"(","kind":"CredentialProviderRequest"})", "\n"));
}

// No pointer where a model was meant: the model's registry is down at the first pull. The
// pull fails, UNAVAILABLE naming that registry (the kubelet retries it), nothing is unpacked
// in the model's place; once the registry answers, the same pull mounts the model.
TEST_F(ModelHostsTest, APullWhileTheModelsRegistryIsDownFailsAndTheRetryMountsTheModel) {
  StartNode({models_->host_port()});
  ASSERT_FALSE(HasFatalFailure());
  models_->Stop();
  absl::StatusOr<std::string> pulled = cri_->PullImage(v_ref_);
  ASSERT_FALSE(pulled.ok()) << "pulled " << *pulled;
  const std::string why(pulled.status().message());
  std::cout << "[registry down] CRI PullImage: " << why << "\n";
  EXPECT_THAT(why, HasSubstr(absl::StrCat("cannot be reached on registry ", models_->host_port())));
  EXPECT_FALSE(fs::exists(ModelDir()));
  EXPECT_THAT(ReadFileOrDie(daemon_->log_path()),
              ::testing::Not(HasSubstr("unpacking the volume layer instead")));

  ASSERT_OK(models_->Restart());
  ASSERT_OK(cri_->PullImage(v_ref_).status());
  std::map<std::string, std::string> got = DescribeFiles(ModelDir());
  EXPECT_EQ(got.erase(".modelinfo.json"), 1u) << "no .modelinfo.json in " << ModelDir();
  EXPECT_EQ(got, DescribeFiles(source_));
}

}  // namespace
}  // namespace modelfs::testing
