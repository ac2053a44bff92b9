#include "core/registry/hosts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(Hosts, DefaultIsHttpsToTheRegistryItself) {
  ASSERT_OK_AND_ASSIGN(HostEndpoint ep, ResolveHost("reg:5000", HostCapability::kPull, {}));
  EXPECT_EQ(ep.BaseUrl(), "https://reg:5000");
  EXPECT_FALSE(ep.skip_verify);
  EXPECT_TRUE(ep.ca_files.empty());
}

TEST(Hosts, DockerHubConnectsToRegistry1) {
  ASSERT_OK_AND_ASSIGN(HostEndpoint ep, ResolveHost("docker.io", HostCapability::kPull, {}));
  EXPECT_EQ(ep.BaseUrl(), "https://registry-1.docker.io");
}

TEST(Hosts, PlainHttpFlagSwitchesToHttp) {
  HostsOptions o;
  o.plain_http = true;
  ASSERT_OK_AND_ASSIGN(HostEndpoint ep, ResolveHost("127.0.0.1:5000", HostCapability::kPush, o));
  EXPECT_EQ(ep.BaseUrl(), "http://127.0.0.1:5000");
}

TEST(Hosts, ServerKeySetsSchemeAndHost) {
  ASSERT_OK_AND_ASSIGN(auto eps, ParseHostsToml("reg:5000", "server = \"http://reg:5000\"\n",
                                                "/etc/certs.d/reg:5000", "hosts.toml"));
  ASSERT_EQ(eps.size(), 1u);
  EXPECT_EQ(eps[0].BaseUrl(), "http://reg:5000");
  EXPECT_TRUE(eps[0].push);
}

TEST(Hosts, MirrorsComeFirstInFileOrderThenServer) {
  const char* text = R"(
server = "https://reg.example.com"
ca = "server-ca.pem"

[host."https://zz-mirror:5000"]
  capabilities = ["pull", "resolve"]
  skip_verify = true

[host."http://aa-mirror:6000"]
  capabilities = ["pull"]
  ca = ["/abs/one.pem", "two.pem"]
  client = ["c.crt", "c.key"]
)";
  ASSERT_OK_AND_ASSIGN(auto eps,
                       ParseHostsToml("reg.example.com", text, "/etc/certs.d/reg", "hosts.toml"));
  ASSERT_EQ(eps.size(), 3u);
  EXPECT_EQ(eps[0].BaseUrl(), "https://zz-mirror:5000");
  EXPECT_TRUE(eps[0].skip_verify);
  EXPECT_TRUE(eps[0].pull);
  EXPECT_TRUE(eps[0].resolve);
  EXPECT_FALSE(eps[0].push);
  EXPECT_EQ(eps[1].BaseUrl(), "http://aa-mirror:6000");
  EXPECT_FALSE(eps[1].resolve);
  EXPECT_THAT(eps[1].ca_files, ElementsAre("/abs/one.pem", "/etc/certs.d/reg/two.pem"));
  EXPECT_EQ(eps[1].client_cert, "/etc/certs.d/reg/c.crt");
  EXPECT_EQ(eps[1].client_key, "/etc/certs.d/reg/c.key");
  EXPECT_EQ(eps[2].BaseUrl(), "https://reg.example.com");
  EXPECT_THAT(eps[2].ca_files, ElementsAre("/etc/certs.d/reg/server-ca.pem"));
  EXPECT_FALSE(eps[2].skip_verify);
}

TEST(Hosts, PushSkipsPullOnlyMirrors) {
  TempDir dir;
  std::filesystem::create_directories(dir.Join("reg:5000"));
  dir.WriteFile("reg:5000/hosts.toml",
                "server = \"https://reg:5000\"\n"
                "[host.\"http://mirror:80\"]\n  capabilities = [\"pull\", \"resolve\"]\n");
  HostsOptions o;
  o.certs_dir = dir.path().string();
  ASSERT_OK_AND_ASSIGN(HostEndpoint pull, ResolveHost("reg:5000", HostCapability::kPull, o));
  EXPECT_EQ(pull.BaseUrl(), "http://mirror:80");
  ASSERT_OK_AND_ASSIGN(HostEndpoint push, ResolveHost("reg:5000", HostCapability::kPush, o));
  EXPECT_EQ(push.BaseUrl(), "https://reg:5000");
}

TEST(Hosts, CertsDirWithoutEntryForHostUsesDefault) {
  TempDir dir;
  HostsOptions o;
  o.certs_dir = dir.path().string();
  ASSERT_OK_AND_ASSIGN(HostEndpoint ep, ResolveHost("other:5000", HostCapability::kPull, o));
  EXPECT_EQ(ep.BaseUrl(), "https://other:5000");
}

TEST(Hosts, DefaultDirectoryAppliesToUnlistedHosts) {
  TempDir dir;
  std::filesystem::create_directories(dir.Join("_default"));
  dir.WriteFile("_default/hosts.toml", "skip_verify = true\n");
  HostsOptions o;
  o.certs_dir = dir.path().string();
  ASSERT_OK_AND_ASSIGN(HostEndpoint ep, ResolveHost("any:443", HostCapability::kPull, o));
  EXPECT_EQ(ep.BaseUrl(), "https://any:443");
  EXPECT_TRUE(ep.skip_verify);
}

TEST(Hosts, TomlSyntaxErrorNamesFileAndLine) {
  EXPECT_THAT(ParseHostsToml("reg", "server = \n", "/d", "/d/hosts.toml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("/d/hosts.toml"), HasSubstr("line 1"))));
}

TEST(Hosts, RejectsNonHttpScheme) {
  EXPECT_THAT(ParseHostsToml("reg", "server = \"ftp://reg\"\n", "/d", "hosts.toml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be http or https")));
}

TEST(Hosts, RejectsUnknownCapability) {
  EXPECT_THAT(
      ParseHostsToml("reg", "[host.\"https://m\"]\ncapabilities = [\"fly\"]\n", "/d", "hosts.toml"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown capability \"fly\"")));
}

TEST(Hosts, RejectsNonBooleanSkipVerify) {
  EXPECT_THAT(ParseHostsToml("reg", "skip_verify = \"yes\"\n", "/d", "hosts.toml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("skip_verify")));
}

}  // namespace
}  // namespace modelfs
