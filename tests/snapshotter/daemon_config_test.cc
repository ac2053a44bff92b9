#include "cmd/modelfs-snapshotter/daemon_config.h"

#include <toml++/toml.h>

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs::snapshotter {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(DaemonConfigTest, DefaultsAreTheDocumentedPaths) {
  DaemonConfig c;
  EXPECT_EQ(c.root, "/var/lib/modelfs");
  EXPECT_EQ(c.address, "/run/modelfs/snapshotter.sock");
  EXPECT_EQ(c.hosts_dir, "/etc/containerd/certs.d");
  EXPECT_EQ(c.prefetch, "headers");
  EXPECT_EQ(c.containerd_address, "/run/containerd/containerd.sock");
  EXPECT_FALSE(c.drop_served_pages);  // the next pod reads the kept pages from memory
  EXPECT_TRUE(c.audit);
  EXPECT_TRUE(c.passthrough);
  EXPECT_TRUE(c.direct_io);
  EXPECT_THAT(c.model_hosts, ElementsAre());
  EXPECT_THAT(c.lazy_images, ElementsAre());   // off by default
  EXPECT_FALSE(c.lazy_images_unpack_refused);  // a policy fails closed for lazy_images
  EXPECT_EQ(c.docker_config, "");              // anonymous, not $DOCKER_CONFIG
  EXPECT_EQ(c.policy, "");
  EXPECT_OK(ValidateDaemonConfig(c));
}

TEST(DaemonConfigTest, EveryKeyIsRead) {
  DaemonConfig c;
  ASSERT_OK(ParseDaemonConfig(R"(
root = "/srv/modelfs"
address = "/run/x.sock"
hosts_dir = "/etc/certs.d"
insecure_hosts = ["127.0.0.1:5000", "registry.local"]
model_hosts = ["models.example.com", "10.0.0.7:5000"]
policy = "/etc/containers/policy.json"
lazy_images_unpack_refused = true
docker_config = "/etc/modelfs/config.json"
metrics_address = "127.0.0.1:9464"
log_level = "debug"
log_format = "json"
log_journal = "off"
containerd_address = "/run/k3s/containerd/containerd.sock"
[cache]
max_size_gib = 200
prefetch = "all"
read_deadline_s = 12.5
drop_served_pages = true
audit = false
persist_delay = "5s"
[fuse]
allow_other = false
insecure_stream = true
passthrough = false
direct_io = false
)",
                              "test.toml", c));
  EXPECT_EQ(c.root, "/srv/modelfs");
  EXPECT_EQ(c.address, "/run/x.sock");
  EXPECT_EQ(c.hosts_dir, "/etc/certs.d");
  EXPECT_THAT(c.insecure_hosts, ElementsAre("127.0.0.1:5000", "registry.local"));
  EXPECT_THAT(c.model_hosts, ElementsAre("models.example.com", "10.0.0.7:5000"));
  EXPECT_EQ(c.policy, "/etc/containers/policy.json");
  EXPECT_TRUE(c.lazy_images_unpack_refused);
  EXPECT_EQ(c.docker_config, "/etc/modelfs/config.json");
  EXPECT_EQ(c.metrics_address, "127.0.0.1:9464");
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_EQ(c.log_format, "json");
  EXPECT_EQ(c.log_journal, "off");
  EXPECT_EQ(c.containerd_address, "/run/k3s/containerd/containerd.sock");
  EXPECT_EQ(c.cache_max_size_gib, 200u);
  EXPECT_EQ(c.prefetch, "all");
  EXPECT_DOUBLE_EQ(c.read_deadline_s, 12.5);
  EXPECT_FALSE(c.allow_other);
  EXPECT_TRUE(c.insecure_stream);
  EXPECT_TRUE(c.drop_served_pages);
  EXPECT_FALSE(c.audit);
  EXPECT_EQ(c.persist_delay, "5s");
  EXPECT_FALSE(c.passthrough);
  EXPECT_FALSE(c.direct_io);
  EXPECT_OK(ValidateDaemonConfig(c));
}

std::string PackagedConfig() {
  std::ifstream in(MODELFS_PACKAGED_CONFIG);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The packaged /etc/modelfs/snapshotter.toml says it lists every key with its default: each key
// the parser reads is set there, and the file parses to exactly the built-in defaults.
TEST(DaemonConfigTest, ThePackagedConfigSetsEveryKeyTheParserReads) {
  const std::string text = PackagedConfig();
  ASSERT_FALSE(text.empty()) << MODELFS_PACKAGED_CONFIG;
  toml::table root = toml::parse(text, std::string_view(MODELFS_PACKAGED_CONFIG));
  for (const std::string& key : DaemonConfigKeys()) {
    EXPECT_NE(root.at_path(key).node(), nullptr)
        << key << " is missing from " << MODELFS_PACKAGED_CONFIG;
  }
}

TEST(DaemonConfigTest, ThePackagedConfigHoldsTheBuiltInDefaults) {
  DaemonConfig parsed;
  ASSERT_OK(ParseDaemonConfig(PackagedConfig(), MODELFS_PACKAGED_CONFIG, parsed));
  const DaemonConfig d;
  EXPECT_EQ(parsed.root, d.root);
  EXPECT_EQ(parsed.address, d.address);
  EXPECT_EQ(parsed.hosts_dir, d.hosts_dir);
  EXPECT_EQ(parsed.insecure_hosts, d.insecure_hosts);
  EXPECT_EQ(parsed.model_hosts, d.model_hosts);
  EXPECT_EQ(parsed.lazy_images, d.lazy_images);
  EXPECT_EQ(parsed.lazy_images_unpack_refused, d.lazy_images_unpack_refused);
  EXPECT_EQ(parsed.docker_config, d.docker_config);
  EXPECT_EQ(parsed.credential_provider_config, d.credential_provider_config);
  EXPECT_EQ(parsed.credential_provider_bin_dir, d.credential_provider_bin_dir);
  EXPECT_EQ(parsed.policy, d.policy);
  EXPECT_EQ(parsed.metrics_address, d.metrics_address);
  EXPECT_EQ(parsed.log_level, d.log_level);
  EXPECT_EQ(parsed.containerd_address, d.containerd_address);
  EXPECT_EQ(parsed.cache_max_size_gib, d.cache_max_size_gib);
  EXPECT_EQ(parsed.prefetch, d.prefetch);
  EXPECT_EQ(parsed.read_deadline_s, d.read_deadline_s);
  EXPECT_EQ(parsed.drop_served_pages, d.drop_served_pages);
  EXPECT_EQ(parsed.audit, d.audit);
  EXPECT_EQ(parsed.scrub_interval, d.scrub_interval);
  EXPECT_EQ(parsed.scrub_rate_mib, d.scrub_rate_mib);
  EXPECT_EQ(parsed.persist_delay, d.persist_delay);
  EXPECT_EQ(parsed.allow_other, d.allow_other);
  EXPECT_EQ(parsed.insecure_stream, d.insecure_stream);
  EXPECT_EQ(parsed.passthrough, d.passthrough);
  EXPECT_EQ(parsed.direct_io, d.direct_io);
}

TEST(DaemonConfigTest, TheRenderedConfigReadsBackToTheSameValues) {
  DaemonConfig c;
  c.root = "/srv/mod\"elfs";
  c.insecure_hosts = {"127.0.0.1:5000", "registry.local"};
  c.lazy_images = {"quay.example/modelcars/*"};
  c.lazy_images_unpack_refused = true;
  c.cache_max_size_gib = 200;
  c.read_deadline_s = 12.5;
  c.scrub_rate_mib = 8;
  c.persist_delay = "5s";
  c.direct_io = false;
  DaemonConfig back;
  ASSERT_OK(ParseDaemonConfig(RenderDaemonConfig(c), "rendered.toml", back));
  EXPECT_EQ(RenderDaemonConfig(back), RenderDaemonConfig(c));
  EXPECT_EQ(back.root, c.root);
  EXPECT_EQ(back.insecure_hosts, c.insecure_hosts);
  EXPECT_TRUE(back.lazy_images_unpack_refused);
  EXPECT_EQ(back.cache_max_size_gib, 200u);
  EXPECT_DOUBLE_EQ(back.read_deadline_s, 12.5);
  EXPECT_FALSE(back.direct_io);
}

TEST(DaemonConfigTest, TheRenderedConfigSetsEveryKey) {
  toml::table root = toml::parse(RenderDaemonConfig(DaemonConfig()), std::string_view("r.toml"));
  for (const std::string& key : DaemonConfigKeys()) {
    EXPECT_NE(root.at_path(key).node(), nullptr) << key;
  }
}

TEST(DaemonConfigTest, ParseErrorsNameTheLineOfTheKey) {
  DaemonConfig c;
  EXPECT_THAT(ParseDaemonConfig("root = \"/x\"\n\nlazy_imagez = []\n", "s.toml", c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("s.toml:3: lazy_imagez: unknown key")));
  EXPECT_THAT(ParseDaemonConfig("[cache]\naudit = 1\n", "s.toml", c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("s.toml:2: cache.audit: must be true or false")));
}

TEST(DaemonConfigTest, AValidationErrorGetsTheLineOfItsKey) {
  const std::string text = "log_level = \"info\"\n[cache]\nprefetch = \"some\"\n";
  DaemonConfig c;
  ASSERT_OK(ParseDaemonConfig(text, "s.toml", c));
  absl::Status st = ValidateDaemonConfig(c);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(WithKeyLine(st, text, "s.toml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("s.toml:3: cache.prefetch \"some\": want all, headers or none")));
  // A key the file does not set (a flag's or a default's value): the error as it was.
  EXPECT_EQ(WithKeyLine(st, "", "s.toml"), st);
}

TEST(DaemonConfigTest, AbsentKeysKeepTheirValues) {
  DaemonConfig c;
  c.root = "/from/flag";
  ASSERT_OK(ParseDaemonConfig("[cache]\nprefetch = \"none\"\n", "t.toml", c));
  EXPECT_EQ(c.root, "/from/flag");
  EXPECT_EQ(c.prefetch, "none");
}

TEST(DaemonConfigTest, AnUnknownKeyIsRefusedByName) {
  DaemonConfig c;
  EXPECT_THAT(ParseDaemonConfig("[cache]\nmax_size = 3\n", "node.toml", c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node.toml:2: cache.max_size: unknown key")));
}

TEST(DaemonConfigTest, AWrongTypeNamesTheKey) {
  DaemonConfig c;
  EXPECT_THAT(ParseDaemonConfig("insecure_hosts = \"127.0.0.1:5000\"\n", "n.toml", c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("insecure_hosts")));
}

TEST(DaemonConfigTest, AReadPathSwitchThatIsNotABoolNamesTheKey) {
  DaemonConfig c;
  EXPECT_THAT(ParseDaemonConfig("[fuse]\npassthrough = \"off\"\n", "n.toml", c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fuse.passthrough")));
  EXPECT_THAT(ParseDaemonConfig("[cache]\ndrop_served_pages = 0\n", "n.toml", c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cache.drop_served_pages")));
}

TEST(DaemonConfigTest, AFractionalCacheSizeIsRefusedRatherThanTruncated) {
  DaemonConfig c;
  EXPECT_THAT(ParseDaemonConfig("[cache]\nmax_size_gib = 0.5\n", "n.toml", c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("cache.max_size_gib"), HasSubstr("whole number"))));
  ASSERT_OK(ParseDaemonConfig("[cache]\nmax_size_gib = 2.0\n", "n.toml", c));
  EXPECT_EQ(c.cache_max_size_gib, 2u);
}

TEST(DaemonConfigTest, ATomlSyntaxErrorNamesTheFileAndLine) {
  DaemonConfig c;
  EXPECT_THAT(ParseDaemonConfig("root = \"/a\"\nroot = = 3\n", "bad.toml", c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad.toml:2")));
}

TEST(DaemonConfigTest, AnUnknownPrefetchPolicyFailsValidation) {
  DaemonConfig c;
  c.prefetch = "some";
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cache.prefetch")));
}

TEST(DaemonConfigTest, APersistDelayThatIsNotADurationFailsValidation) {
  DaemonConfig c;
  EXPECT_EQ(c.persist_delay, "30s");
  c.persist_delay = "0";
  EXPECT_OK(ValidateDaemonConfig(c));
  for (const char* bad : {"soon", "-1s", "30"}) {
    c.persist_delay = bad;
    EXPECT_THAT(ValidateDaemonConfig(c),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cache.persist_delay")))
        << bad;
  }
}

TEST(DaemonConfigTest, LogKeysTakeTheirNamedValuesOnly) {
  for (const char* level : {"debug", "info", "warn", "error"}) {
    DaemonConfig c;
    c.log_level = level;
    EXPECT_OK(ValidateDaemonConfig(c)) << level;
  }
  DaemonConfig c;
  c.log_level = "verbose";
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("log_level \"verbose\": want debug, info, warn or error")));
  c = DaemonConfig();
  c.log_format = "text";
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("log_format \"text\": want logfmt or json")));
  c = DaemonConfig();
  c.log_journal = "yes";
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("log_journal \"yes\": want auto, on or off")));
}

TEST(DaemonConfigTest, ARelativeRootFailsValidation) {
  DaemonConfig c;
  c.root = "var/lib/modelfs";
  EXPECT_THAT(ValidateDaemonConfig(c), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(DaemonConfigTest, AMetricsAddressWithoutPortFailsValidation) {
  DaemonConfig c;
  c.metrics_address = "127.0.0.1";
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("metrics_address")));
}

TEST(DaemonConfigTest, SplitHostPortAcceptsBracketedIpv6) {
  ASSERT_OK_AND_ASSIGN(auto hp, SplitHostPort("[::1]:9464"));
  EXPECT_EQ(hp.first, "::1");
  EXPECT_EQ(hp.second, 9464);
}

TEST(DaemonConfigTest, LoadingAMissingFileIsNotFound) {
  EXPECT_THAT(ReadDaemonConfigFile("/nonexistent/modelfs.toml").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/modelfs.toml")));
}

// "" turns the content store off; a relative path is refused.
TEST(DaemonConfigTest, ContainerdAddressIsAnAbsolutePathOrEmpty) {
  DaemonConfig c;
  c.containerd_address = "";
  EXPECT_OK(ValidateDaemonConfig(c));
  c.containerd_address = "run/containerd.sock";
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("containerd_address")));
}

TEST(DaemonConfigTest, AModelHostThatIsNotAnArrayOfStringsNamesTheKey) {
  DaemonConfig c;
  EXPECT_THAT(ParseDaemonConfig("model_hosts = \"models.example.com\"\n", "n.toml", c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("n.toml:1: model_hosts: must be an array of strings")));
}

// model_hosts is compared with the registry of a reference; a URL would never match.
TEST(DaemonConfigTest, AModelHostWrittenAsAUrlFailsValidation) {
  DaemonConfig c;
  c.model_hosts = {"https://models.example.com"};
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model_hosts \"https://models.example.com\"")));
}

TEST(DaemonConfigTest, ModelHostsTakeHostsRepositoriesAndRepositoryPrefixes) {
  DaemonConfig c;
  ASSERT_OK(ParseDaemonConfig(
      "model_hosts = [\"models.example.com\", \"reg:5000/tenant-b/llama\", \"reg:5000/team/*\"]\n",
      "n.toml", c));
  EXPECT_THAT(c.model_hosts,
              ElementsAre("models.example.com", "reg:5000/tenant-b/llama", "reg:5000/team/*"));
  EXPECT_OK(ValidateDaemonConfig(c));
}

TEST(DaemonConfigTest, AModelHostWithAWildcardInsideThePathFailsValidation) {
  DaemonConfig c;
  c.model_hosts = {"reg:5000/team-*/llama"};
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model_hosts \"reg:5000/team-*/llama\"")));
}

TEST(DaemonConfigTest, AnEmptyModelHostFailsValidation) {
  DaemonConfig c;
  c.model_hosts = {""};
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model_hosts \"\"")));
}

// "" is no policy; a relative path is refused (the daemon's working directory is no place
// to look for what decides trust).
TEST(DaemonConfigTest, PolicyIsAnAbsolutePathOrEmpty) {
  DaemonConfig c;
  c.policy = "policy.json";
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("policy \"policy.json\"")));
}

// require_equivalence: repositories in the model_hosts forms, with at least one key, each an
// absolute path.
TEST(DaemonConfigTest, RequireEquivalenceNeedsKeysAndTheModelHostsForms) {
  DaemonConfig c;
  ASSERT_OK(
      ParseDaemonConfig("require_equivalence = [\"reg:5000/quantized/*\"]\n"
                        "equivalence_keys = [\"/etc/modelfs/keys/q.pub\"]\n",
                        "e.toml", c));
  EXPECT_THAT(c.require_equivalence, ElementsAre("reg:5000/quantized/*"));
  EXPECT_THAT(c.equivalence_keys, ElementsAre("/etc/modelfs/keys/q.pub"));
  EXPECT_OK(ValidateDaemonConfig(c));
  c.equivalence_keys.clear();
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("equivalence_keys is empty")));
  c.equivalence_keys = {"q.pub"};
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"q.pub\"")));
  c.equivalence_keys = {"/q.pub"};
  c.require_equivalence = {"reg:5000/te*m"};
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("require_equivalence")));
}

}  // namespace
TEST(DaemonConfigTest, LazyImagesAreRepositoriesInTheModelHostsForms) {
  DaemonConfig c;
  ASSERT_OK(ParseDaemonConfig(
      "lazy_images = [\"quay.example/kserve/llama\", \"reg:5000/modelcars/*\"]\n", "l.toml", c));
  EXPECT_THAT(c.lazy_images, ElementsAre("quay.example/kserve/llama", "reg:5000/modelcars/*"));
  EXPECT_OK(ValidateDaemonConfig(c));
  c.lazy_images = {"https://quay.example/kserve/llama"};
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lazy_images")));
}

TEST(DaemonConfigTest, CredentialProviderKeysAreReadAndGoTogether) {
  const std::string text =
      "credential_provider_config = \"/etc/kubernetes/cp.json\"\n"
      "credential_provider_bin_dir = \"/usr/libexec/cp\"\n";
  DaemonConfig c;
  ASSERT_OK(ParseDaemonConfig(text, "s.toml", c));
  EXPECT_EQ(c.credential_provider_config, "/etc/kubernetes/cp.json");
  EXPECT_EQ(c.credential_provider_bin_dir, "/usr/libexec/cp");
  DaemonConfig half;
  ASSERT_OK(ParseDaemonConfig("credential_provider_config = \"/etc/cp.json\"\n", "s.toml", half));
  EXPECT_THAT(WithKeyLine(ValidateDaemonConfig(half),
                          "credential_provider_config = \"/etc/cp.json\"\n", "s.toml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("s.toml:1: credential_provider_config: "
                                 "credential_provider_config and credential_provider_bin_dir go "
                                 "together")));
}

TEST(DaemonConfigTest, MissingCredentialProviderConfigFailsTheCheckNamingTheFile) {
  DaemonConfig c;
  c.credential_provider_config = "/nonexistent/modelfs/cp.json";
  c.credential_provider_bin_dir = "/nonexistent/modelfs/bin";
  EXPECT_THAT(ValidateDaemonConfig(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                                AllOf(HasSubstr("credential_provider_config"),
                                                      HasSubstr("/nonexistent/modelfs/cp.json"))));
}

TEST(DaemonConfigTest, DockerConfigThatDoesNotParseFailsTheCheck) {
  const std::string path = ::testing::TempDir() + "/daemon_config_test_docker.json";
  std::ofstream(path) << "{\"auths\": ";
  DaemonConfig c;
  c.docker_config = path;
  EXPECT_THAT(ValidateDaemonConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("docker_config"), HasSubstr(path))));
  DaemonConfig relative;
  relative.docker_config = "docker.json";
  EXPECT_THAT(ValidateDaemonConfig(relative),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("absolute path")));
}

}  // namespace modelfs::snapshotter
