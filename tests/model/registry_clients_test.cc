// ConnectRegistry's credentials: an explicit docker config, the CLI's default one
// ($DOCKER_CONFIG, ~/.docker) and the daemon's none.
#include "core/resolve/registry_clients.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::HasSubstr;

// $DOCKER_CONFIG set for one test, restored after it.
class DockerConfigEnv {
 public:
  explicit DockerConfigEnv(const std::string& dir) {
    if (const char* old = std::getenv("DOCKER_CONFIG")) old_ = old;
    setenv("DOCKER_CONFIG", dir.c_str(), 1);
  }
  ~DockerConfigEnv() {
    if (old_.empty()) {
      unsetenv("DOCKER_CONFIG");
    } else {
      setenv("DOCKER_CONFIG", old_.c_str(), 1);
    }
  }

 private:
  std::string old_;
};

// A config.json that does not parse makes whoever reads it fail, naming it: that tells which
// commands read $DOCKER_CONFIG without a registry to talk to.
class RegistryClientsTest : public ::testing::Test {
 protected:
  RegistryClientsTest() : env_(tmp_.path().string()) {
    tmp_.WriteFile("config.json", "{ not json");
  }
  TempDir tmp_;
  DockerConfigEnv env_;
};

TEST_F(RegistryClientsTest, TheCliReadsDockerConfigFromTheEnvironmentWhenNoneIsGiven) {
  RegistryAccessOptions o;
  EXPECT_THAT(ConnectRegistry("registry.test:5000", HostCapability::kPull, o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("config.json")));
}

TEST_F(RegistryClientsTest, WithoutTheDefaultAnEmptyDockerConfigIsAnonymous) {
  RegistryAccessOptions o;
  o.default_docker_config = false;  // the daemon's setting
  EXPECT_OK(ConnectRegistry("registry.test:5000", HostCapability::kPull, o).status());
}

TEST_F(RegistryClientsTest, AnExplicitDockerConfigIsReadEitherWay) {
  RegistryAccessOptions o;
  o.default_docker_config = false;
  o.docker_config = (tmp_.path() / "config.json").string();
  EXPECT_THAT(ConnectRegistry("registry.test:5000", HostCapability::kPull, o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("config.json")));
}

TEST_F(RegistryClientsTest, OneCredentialProviderKeyWithoutTheOtherIsRefused) {
  RegistryAccessOptions o;
  o.default_docker_config = false;
  o.credential_provider_config = (tmp_.path() / "cp.json").string();
  EXPECT_THAT(ConnectRegistry("registry.test:5000", HostCapability::kPull, o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("go together")));
}

TEST_F(RegistryClientsTest, PluginCredentialsComeBeforeTheDockerConfigs) {
  // A plugin that answers for every registry, and a docker config with another entry.
  auto plugin = tmp_.WriteFile("bin/p", R"(#!/bin/sh
cat > /dev/null
echo '{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1",
"cacheKeyType":"Global","auth":{"registry.test:5000":{"username":"from-plugin","password":"x"}}}'
)");
  std::filesystem::permissions(plugin, std::filesystem::perms::owner_all);
  auto cp = tmp_.WriteFile("cp.json", R"({"apiVersion":"kubelet.config.k8s.io/v1",
      "kind":"CredentialProviderConfig","providers":[{"name":"p",
      "matchImages":["registry.test:5000"],"defaultCacheDuration":"1h",
      "apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]})");
  auto dc = tmp_.WriteFile("docker.json",
                           R"({"auths":{"registry.test:5000":{"username":"from-docker",
                                "password":"y"},"other.test":{"username":"o","password":"z"}}})");
  RegistryAccessOptions o;
  o.default_docker_config = false;
  o.docker_config = dc.string();
  o.credential_provider_config = cp.string();
  o.credential_provider_bin_dir = (tmp_.path() / "bin").string();
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Keychain> k, MakeKeychain(o));
  ASSERT_OK_AND_ASSIGN(std::optional<Credential> reg, k->Get("registry.test:5000"));
  ASSERT_OK_AND_ASSIGN(std::optional<Credential> other, k->Get("other.test"));
  ASSERT_TRUE(reg.has_value() && other.has_value());
  EXPECT_EQ(reg->username, "from-plugin");
  EXPECT_EQ(other->username, "o");
}

}  // namespace
}  // namespace modelfs
