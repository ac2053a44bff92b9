#include "core/registry/hosts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

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

TEST(Hosts, PlainHttpChangesOnlyTheDefaultSchemeHostsTomlStillApplies) {
  TempDir dir;
  std::filesystem::create_directories(dir.Join("reg:5000"));
  dir.WriteFile("reg:5000/hosts.toml",
                "[host.\"https://mirror:443\"]\n  capabilities = [\"pull\"]\n");
  HostsOptions o;
  o.certs_dir = dir.path().string();
  o.plain_http = true;
  ASSERT_OK_AND_ASSIGN(auto eps, ResolveHosts("reg:5000", o));
  ASSERT_EQ(eps.size(), 2u);
  EXPECT_EQ(eps[0].ApiRoot(), "https://mirror:443/v2");
  EXPECT_EQ(eps[1].ApiRoot(), "http://reg:5000/v2");
}

TEST(Hosts, ApiRootGainsV2UnlessTheUrlEndsInV2OrOverridePathIsSet) {
  const char* text = R"(
[host."http://a:1"]
[host."http://b:2/"]
[host."http://c:3/cache"]
[host."http://d:4/cache/v2/"]
[host."http://e:5/registry/api"]
  override_path = true
[host."f:6"]
)";
  ASSERT_OK_AND_ASSIGN(auto eps, ParseHostsToml("reg", text, "/d", "hosts.toml"));
  ASSERT_EQ(eps.size(), 7u);
  EXPECT_EQ(eps[0].ApiRoot(), "http://a:1/v2");
  EXPECT_EQ(eps[1].ApiRoot(), "http://b:2/v2");
  EXPECT_EQ(eps[2].ApiRoot(), "http://c:3/cache/v2");
  EXPECT_EQ(eps[3].ApiRoot(), "http://d:4/cache/v2");
  EXPECT_EQ(eps[4].ApiRoot(), "http://e:5/registry/api");
  EXPECT_EQ(eps[5].ApiRoot(), "https://f:6/v2");  // no scheme: https
  EXPECT_EQ(eps[6].ApiRoot(), "https://reg/v2");
}

TEST(Hosts, MirrorsAreMarkedAndTheServerIsNot) {
  ASSERT_OK_AND_ASSIGN(auto eps, ParseHostsToml("reg", "[host.\"http://m:1\"]\n", "/d", "h"));
  ASSERT_EQ(eps.size(), 2u);
  EXPECT_TRUE(eps[0].mirror);
  EXPECT_FALSE(eps[1].mirror);
}

TEST(Hosts, TopLevelCapabilitiesApplyOnlyToANamedServer) {
  ASSERT_OK_AND_ASSIGN(
      auto named,
      ParseHostsToml("reg", "server = \"https://up\"\ncapabilities = [\"pull\"]\n", "/d", "h"));
  ASSERT_EQ(named.size(), 1u);
  EXPECT_TRUE(named[0].pull);
  EXPECT_FALSE(named[0].resolve);
  EXPECT_FALSE(named[0].push);
  // containerd gives the implicit default server every capability.
  ASSERT_OK_AND_ASSIGN(auto implicit,
                       ParseHostsToml("reg", "capabilities = [\"pull\"]\n", "/d", "h"));
  ASSERT_EQ(implicit.size(), 1u);
  EXPECT_TRUE(implicit[0].resolve);
  EXPECT_TRUE(implicit[0].push);
}

TEST(Hosts, HeaderTableBecomesRequestHeadersForThatHostOnly) {
  const char* text = R"(
[host."https://m:1"]
  [host."https://m:1".header]
    x-one = "1"
    x-many = ["a", "b"]
)";
  ASSERT_OK_AND_ASSIGN(auto eps, ParseHostsToml("reg", text, "/d", "h"));
  ASSERT_EQ(eps.size(), 2u);
  EXPECT_THAT(eps[0].headers, ElementsAre("x-many: a", "x-many: b", "x-one: 1"));
  EXPECT_TRUE(eps[1].headers.empty());
}

TEST(Hosts, HeaderValueWithALineBreakIsRefused) {
  EXPECT_THAT(ParseHostsToml("reg", "[header]\nx = \"a\\r\\nEvil: 1\"\n", "/d", "h"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line break")));
}

TEST(Hosts, HostPortUnderscoreDirectoryComesFirst) {
  EXPECT_THAT(HostDirectoryNames("reg:5000"), ElementsAre("reg_5000_", "reg:5000", "_default"));
  EXPECT_THAT(HostDirectoryNames("reg"), ElementsAre("reg", "_default"));
  TempDir dir;
  std::filesystem::create_directories(dir.Join("reg_5000_"));
  std::filesystem::create_directories(dir.Join("reg:5000"));
  dir.WriteFile("reg_5000_/hosts.toml", "server = \"http://first:1\"\n");
  dir.WriteFile("reg:5000/hosts.toml", "server = \"http://second:2\"\n");
  HostsOptions o;
  o.certs_dir = dir.path().string();
  ASSERT_OK_AND_ASSIGN(auto eps, ResolveHosts("reg:5000", o));
  ASSERT_EQ(eps.size(), 1u);
  EXPECT_EQ(eps[0].BaseUrl(), "http://first:1");
}

TEST(Hosts, DirectoryWithoutHostsTomlUsesDockerStyleCertFilesNotDefault) {
  TempDir dir;
  std::filesystem::create_directories(dir.Join("reg:5000"));
  dir.WriteFile("reg:5000/ca.crt", "x");
  dir.WriteFile("reg:5000/client.cert", "x");
  dir.WriteFile("reg:5000/client.key", "x");
  std::filesystem::create_directories(dir.Join("_default"));
  dir.WriteFile("_default/hosts.toml", "server = \"http://elsewhere:1\"\n");
  HostsOptions o;
  o.certs_dir = dir.path().string();
  ASSERT_OK_AND_ASSIGN(auto eps, ResolveHosts("reg:5000", o));
  ASSERT_EQ(eps.size(), 1u);
  EXPECT_EQ(eps[0].BaseUrl(), "https://reg:5000");
  EXPECT_THAT(eps[0].ca_files, ElementsAre(dir.Join("reg:5000/ca.crt").string()));
  EXPECT_EQ(eps[0].client_cert, dir.Join("reg:5000/client.cert").string());
  EXPECT_EQ(eps[0].client_key, dir.Join("reg:5000/client.key").string());
}

TEST(Hosts, OnlyHostsOfAnotherNameAreProxies) {
  EXPECT_FALSE(IsProxyFor(DefaultHostEndpoint("reg:5000"), "reg:5000"));
  EXPECT_FALSE(IsProxyFor(DefaultHostEndpoint("docker.io"), "docker.io"));
  HostEndpoint m;
  m.host = "mirror:5000";
  EXPECT_TRUE(IsProxyFor(m, "reg:5000"));
}

TEST(Hosts, ResolveHostForResolveSkipsPullOnlyMirror) {
  TempDir dir;
  std::filesystem::create_directories(dir.Join("reg"));
  dir.WriteFile("reg/hosts.toml", "[host.\"http://m:1\"]\n  capabilities = [\"pull\"]\n");
  HostsOptions o;
  o.certs_dir = dir.path().string();
  ASSERT_OK_AND_ASSIGN(HostEndpoint ep, ResolveHost("reg", HostCapability::kResolve, o));
  EXPECT_EQ(ep.BaseUrl(), "https://reg");
}

}  // namespace
}  // namespace modelfs
