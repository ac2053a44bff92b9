// Credentials from the sources the ecosystem uses, against a real docker-registry with token auth
// (token_server.py): a kubelet image credential provider plugin and a docker credential helper,
// each a real script speaking its protocol, reached the way the daemon and the CLI reach
// registries (ConnectRegistry with RegistryAccessOptions). A rotated password is picked up by
// running the plugin again once the token server refuses the cached one; a helper's identity
// token is exchanged at the token endpoint (grant_type=refresh_token); a plugin that matches a
// registry wins over the docker config.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/resolve/registry_clients.h"
#include "integration/registry/blob_round_trip.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

namespace fs = std::filesystem;
using ::modelfs::testing::Pull;
using ::modelfs::testing::Push;
using ::modelfs::testing::RegistryFixture;
using ::modelfs::testing::RegistryFixtureOptions;
using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::HasSubstr;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
int Lines(const fs::path& p) {
  std::vector<std::string> l = absl::StrSplit(ReadAll(p), '\n', absl::SkipEmpty());
  return static_cast<int>(l.size());
}
void Executable(const fs::path& p, const std::string& body) {
  std::ofstream(p) << "#!/bin/sh\n" << body;
  fs::permissions(p, fs::perms::owner_all);
}

class CredentialsE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    password_ = tmp_.WriteFile("password", "pw-1\n");
    RegistryFixtureOptions o;
    o.auth = RegistryFixtureOptions::Auth::kToken;
    o.password_file = password_.string();
    o.refresh_token = "refresh-e2e";
    auto f = RegistryFixture::Start(o);
    ASSERT_OK(f.status());
    registry_ = std::move(*f);
    fs::create_directories(tmp_.Join("bin"));
    saved_path_ = getenv("PATH") != nullptr ? getenv("PATH") : "";
    setenv("PATH", absl::StrCat(tmp_.Join("bin").string(), ":", saved_path_).c_str(), 1);
  }
  void TearDown() override { setenv("PATH", saved_path_.c_str(), 1); }

  // A kubelet credential provider plugin, "modelfs-e2e-plugin", whose answer carries the password
  // in the file when it runs (cached for an hour), and its config matching the registry.
  void WritePlugin() {
    Executable(tmp_.Join("plugins/modelfs-e2e-plugin"),
               absl::StrCat("cat >> '", tmp_.Join("plugin.log").string(), "'; echo >> '",
                            tmp_.Join("plugin.log").string(), "'\n",
                            "printf '{\"kind\":\"CredentialProviderResponse\",\"apiVersion\":"
                            "\"credentialprovider.kubelet.k8s.io/v1\",\"cacheKeyType\":"
                            "\"Registry\",\"cacheDuration\":\"1h\",\"auth\":{\"%s\":{"
                            "\"username\":\"modelfs\",\"password\":\"%s\"}}}' '",
                            registry_->host_port(), "' \"$(cat '", password_.string(), "')\"\n"));
    tmp_.WriteFile("provider.json",
                   absl::StrCat(R"({"apiVersion":"kubelet.config.k8s.io/v1",
        "kind":"CredentialProviderConfig","providers":[{"name":"modelfs-e2e-plugin",
        "matchImages":["127.0.0.*:)",
                                registry_->host_port().substr(registry_->host_port().find(':') + 1),
                                R"("],"defaultCacheDuration":"10m",
        "apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]})"));
  }

  RegistryAccessOptions Access() {
    RegistryAccessOptions a;
    a.hosts.plain_http_hosts = {registry_->host_port()};
    a.default_docker_config = false;
    a.client.initial_backoff = absl::Milliseconds(10);
    a.client.retry_deadline = absl::Seconds(20);
    return a;
  }

  TempDir tmp_;
  fs::path password_;
  std::unique_ptr<RegistryFixture> registry_;
  std::string saved_path_;
};

TEST_F(CredentialsE2E, KubeletPluginCredentialsPushAndPull) {
  fs::create_directories(tmp_.Join("plugins"));
  WritePlugin();
  RegistryAccessOptions a = Access();
  a.credential_provider_config = tmp_.Join("provider.json").string();
  a.credential_provider_bin_dir = tmp_.Join("plugins").string();
  ASSERT_OK_AND_ASSIGN(auto client,
                       ConnectRegistry(registry_->host_port(), HostCapability::kPull, a));
  std::string blob(100'000, 'k');
  ASSERT_OK(Push(*client, "creds/plugin", blob));
  ASSERT_OK_AND_ASSIGN(std::string back, Pull(*client, "creds/plugin", Digest::Of(blob)));
  EXPECT_EQ(back, blob);
  EXPECT_EQ(ReadAll(tmp_.Join("plugin.log")),
            absl::StrCat(R"({"apiVersion":"credentialprovider.kubelet.k8s.io/v1",)", R"("image":")",
                         registry_->host_port(), R"(","kind":"CredentialProviderRequest"})", "\n"));
}

TEST_F(CredentialsE2E, RotatedPasswordRunsThePluginAgainWithinItsCacheDuration) {
  fs::create_directories(tmp_.Join("plugins"));
  WritePlugin();
  RegistryAccessOptions a = Access();
  a.credential_provider_config = tmp_.Join("provider.json").string();
  a.credential_provider_bin_dir = tmp_.Join("plugins").string();
  ASSERT_OK_AND_ASSIGN(auto client,
                       ConnectRegistry(registry_->host_port(), HostCapability::kPull, a));
  std::string blob(10'000, 'r');
  ASSERT_OK(Push(*client, "creds/one", blob));
  EXPECT_EQ(Lines(tmp_.Join("plugin.log")), 1);
  tmp_.WriteFile("password", "pw-2\n");
  // Another repository: a new scope, so a token is fetched with the cached (old) password; the
  // token server refuses it and the plugin runs once more.
  ASSERT_OK(Push(*client, "creds/two", blob));
  EXPECT_EQ(Lines(tmp_.Join("plugin.log")), 2);
}

TEST_F(CredentialsE2E, HelperIdentityTokenIsExchangedAtTheTokenEndpoint) {
  Executable(tmp_.Join("bin/docker-credential-modelfs-e2e"),
             "cat > /dev/null; printf '{\"Username\":\"<token>\",\"Secret\":\"refresh-e2e\"}'\n");
  auto config = tmp_.WriteFile(
      "config.json",
      absl::StrCat(R"({"credHelpers":{")", registry_->host_port(), R"(":"modelfs-e2e"}})"));
  RegistryAccessOptions a = Access();
  a.docker_config = config.string();
  ASSERT_OK_AND_ASSIGN(auto client,
                       ConnectRegistry(registry_->host_port(), HostCapability::kPull, a));
  std::string blob(10'000, 'i');
  ASSERT_OK(Push(*client, "creds/identity", blob));
  ASSERT_OK_AND_ASSIGN(std::string back, Pull(*client, "creds/identity", Digest::Of(blob)));
  EXPECT_EQ(back, blob);
}

TEST_F(CredentialsE2E, MatchingPluginWinsOverTheDockerConfig) {
  fs::create_directories(tmp_.Join("plugins"));
  WritePlugin();
  auto config = tmp_.WriteFile(
      "config.json", absl::StrCat(R"({"auths":{")", registry_->host_port(),
                                  R"(":{"username":"modelfs","password":"wrong-password"}}})"));
  RegistryAccessOptions a = Access();
  a.docker_config = config.string();
  a.credential_provider_config = tmp_.Join("provider.json").string();
  a.credential_provider_bin_dir = tmp_.Join("plugins").string();
  ASSERT_OK_AND_ASSIGN(auto client,
                       ConnectRegistry(registry_->host_port(), HostCapability::kPull, a));
  ASSERT_OK(Push(*client, "creds/order", std::string(1000, 'o')));
  EXPECT_EQ(Lines(tmp_.Join("plugin.log")), 1);
}

TEST_F(CredentialsE2E, MissingHelperFailsNamingTheHelperAndTheRegistry) {
  auto config = tmp_.WriteFile(
      "config.json",
      absl::StrCat(R"({"credHelpers":{")", registry_->host_port(), R"(":"absent-e2e"}})"));
  RegistryAccessOptions a = Access();
  a.docker_config = config.string();
  ASSERT_OK_AND_ASSIGN(auto client,
                       ConnectRegistry(registry_->host_port(), HostCapability::kPull, a));
  EXPECT_THAT(client->GetManifest("creds/none", "v1"),
              StatusIs(absl::StatusCode::kNotFound,
                       ::testing::AllOf(HasSubstr("docker-credential-absent-e2e"),
                                        HasSubstr(registry_->host_port()))));
}

}  // namespace
}  // namespace modelfs
