// kubelet credential provider plugins: matchImages as the kubelet matches them, the config and
// response formats, and the exec protocol and cache with a real plugin script.
#include "core/registry/kubelet_credential_provider.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "testsupport/fakes/fake_clock.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

struct MatchCase {
  const char* pattern;
  const char* image;
  bool matches;
};

TEST(KubeletImageMatches, FollowsTheKubeletsRules) {
  const MatchCase cases[] = {
      {"*.dkr.ecr.*.amazonaws.com", "123456789012.dkr.ecr.us-east-1.amazonaws.com", true},
      {"*.dkr.ecr.*.amazonaws.com", "123456789012.dkr.ecr.us-east-1.amazonaws.com.cn", false},
      {"*.azurecr.io", "team.westeurope.azurecr.io", false},  // one '*' is one part
      {"*.azurecr.io", "team.azurecr.io", true},
      {"*.gcr.io", "gcr.io", false},
      {"gcr.io", "gcr.io", true},
      {"GCR.io", "gcr.io", false},  // as the kubelet: case-sensitive
      {"?cr.io", "gcr.io", true},
      {"[a-h]cr.io", "gcr.io", true},
      {"[x-z]cr.io", "gcr.io", false},
      {"reg.example:5000", "reg.example:5000", true},
      {"reg.example", "reg.example:5000", false},  // ports must be equal
      {"reg.example:5000", "reg.example", false},
      {"reg.example:*", "reg.example:5000", false},  // no globs in the port
      {"reg.example/team", "reg.example/team/model", true},
      {"reg.example/team", "reg.example/other", false},
      {"reg.example/team", "reg.example", false},  // modelfs asks per registry
      {"https://reg.example", "reg.example", true},
  };
  for (const MatchCase& c : cases) {
    EXPECT_EQ(KubeletImageMatches(c.pattern, c.image), c.matches) << c.pattern << " vs " << c.image;
  }
}

TEST(ParseGoDuration, ReadsGoDurations) {
  EXPECT_EQ(*ParseGoDuration("12h"), absl::Hours(12));
  EXPECT_EQ(*ParseGoDuration("1h30m"), absl::Minutes(90));
  EXPECT_EQ(*ParseGoDuration("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseGoDuration("0"), absl::ZeroDuration());
  EXPECT_EQ(*ParseGoDuration("0s"), absl::ZeroDuration());
  for (const char* bad : {"", "12", "soon", "-1s", "inf"}) {
    EXPECT_THAT(ParseGoDuration(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

constexpr char kConfig[] = R"({
  "apiVersion": "kubelet.config.k8s.io/v1",
  "kind": "CredentialProviderConfig",
  "providers": [{
    "name": "ecr-credential-provider",
    "matchImages": ["*.dkr.ecr.*.amazonaws.com", "*.dkr.ecr.*.amazonaws.com.cn"],
    "defaultCacheDuration": "12h",
    "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
    "args": ["get-credentials"],
    "env": [{"name": "AWS_PROFILE", "value": "temp"}]
  }]
})";

TEST(CredentialProviderConfig, ReadsEveryFieldOfAProvider) {
  ASSERT_OK_AND_ASSIGN(auto providers, ParseCredentialProviderConfig(kConfig, "cp.json"));
  ASSERT_EQ(providers.size(), 1u);
  const KubeletCredentialProvider& p = providers[0];
  EXPECT_EQ(p.name, "ecr-credential-provider");
  EXPECT_THAT(p.match_images,
              ::testing::ElementsAre("*.dkr.ecr.*.amazonaws.com", "*.dkr.ecr.*.amazonaws.com.cn"));
  EXPECT_EQ(p.default_cache_duration, absl::Hours(12));
  EXPECT_EQ(p.api_version, "credentialprovider.kubelet.k8s.io/v1");
  EXPECT_THAT(p.args, ::testing::ElementsAre("get-credentials"));
  ASSERT_EQ(p.env.size(), 1u);
  EXPECT_EQ(p.env[0].first, "AWS_PROFILE");
  EXPECT_EQ(p.env[0].second, "temp");
}

TEST(CredentialProviderConfig, ErrorsNameTheFileAndTheProvider) {
  std::string no_match = R"({"apiVersion":"kubelet.config.k8s.io/v1",
      "kind":"CredentialProviderConfig","providers":[{"name":"p1","defaultCacheDuration":"1h",
      "apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]})";
  EXPECT_THAT(ParseCredentialProviderConfig(no_match, "cp.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("cp.json"), HasSubstr("\"p1\""),
                                        HasSubstr("matchImages"))));
  std::string bad_duration = R"({"apiVersion":"kubelet.config.k8s.io/v1",
      "kind":"CredentialProviderConfig","providers":[{"name":"p1","matchImages":["r"],
      "defaultCacheDuration":"12","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]})";
  EXPECT_THAT(ParseCredentialProviderConfig(bad_duration, "cp.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("defaultCacheDuration")));
  std::string alpha = R"({"apiVersion":"kubelet.config.k8s.io/v1",
      "kind":"CredentialProviderConfig","providers":[{"name":"p1","matchImages":["r"],
      "defaultCacheDuration":"1h","apiVersion":"credentialprovider.kubelet.k8s.io/v1alpha1"}]})";
  EXPECT_THAT(ParseCredentialProviderConfig(alpha, "cp.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("v1alpha1")));
  std::string escape = R"({"apiVersion":"kubelet.config.k8s.io/v1",
      "kind":"CredentialProviderConfig","providers":[{"name":"../sh","matchImages":["r"],
      "defaultCacheDuration":"1h","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]})";
  EXPECT_THAT(ParseCredentialProviderConfig(escape, "cp.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("file name")));
  EXPECT_THAT(ParseCredentialProviderConfig("providers: []", "cp.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("as JSON")));
}

constexpr char kV1[] = "credentialprovider.kubelet.k8s.io/v1";

TEST(CredentialProviderResponse, ReadsKeyTypeDurationAndAuth) {
  ASSERT_OK_AND_ASSIGN(
      KubeletCredentialResponse r,
      ParseCredentialProviderResponse(
          R"({"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1",
              "cacheKeyType":"Registry","cacheDuration":"6h",
              "auth":{"*.example":{"username":"u","password":"p"}}})",
          kV1, "plugin"));
  EXPECT_EQ(r.cache_key_type, CredentialCacheKeyType::kRegistry);
  EXPECT_EQ(r.cache_duration, absl::Hours(6));
  ASSERT_EQ(r.auth.count("*.example"), 1u);
  EXPECT_EQ(r.auth.at("*.example").username, "u");
  EXPECT_EQ(r.auth.at("*.example").password, "p");
}

TEST(CredentialProviderResponse, RefusesAnotherApiVersionOrKeyTypeWithoutQuotingSecrets) {
  auto other = ParseCredentialProviderResponse(
      R"({"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1",
          "cacheKeyType":"Image","auth":{"r":{"username":"u","password":"hunter2"}}})",
      kV1, "plugin p");
  EXPECT_THAT(other, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("apiVersion")));
  EXPECT_THAT(other.status().message(), Not(HasSubstr("hunter2")));
  EXPECT_THAT(
      ParseCredentialProviderResponse(
          R"({"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1",
                      "cacheKeyType":"Node"})",
          kV1, "plugin p"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cacheKeyType")));
}

// A plugin directory with one script, "test-plugin", that logs its args, $PLUGIN_ENV and its
// request to plugin.log (one line per run) and answers `response`.
class PluginTest : public ::testing::Test {
 protected:
  void WritePlugin(const std::string& response) {
    auto p =
        bin_.WriteFile("test-plugin", absl::StrCat("#!/bin/sh\necho \"$* $PLUGIN_ENV $(cat)\" >> '",
                                                   bin_.Join("plugin.log").string(),
                                                   "'\ncat <<'EOF'\n", response, "\nEOF\n"));
    std::filesystem::permissions(p, std::filesystem::perms::owner_all);
  }
  absl::StatusOr<std::unique_ptr<KubeletCredentialProviders>> Providers(
      const std::string& match = "*.example:5000", const std::string& dflt = "1h") {
    auto config = cfg_.WriteFile(
        "cp.json",
        absl::StrCat(R"({"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig",
          "providers":[{"name":"test-plugin","matchImages":[")",
                     match, R"("],"defaultCacheDuration":")", dflt,
                     R"(","apiVersion":"credentialprovider.kubelet.k8s.io/v1","args":["get"],
          "env":[{"name":"PLUGIN_ENV","value":"e1"}]}]})"));
    KubeletCredentialProviders::Options o;
    o.config_path = config.string();
    o.bin_dir = bin_.path().string();
    o.clock = &clock_;
    return KubeletCredentialProviders::Create(o);
  }
  static std::string Response(const std::string& duration, const std::string& user = "u1") {
    return absl::StrCat(
        R"({"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1",
            "cacheKeyType":"Registry",)",
        duration.empty() ? "" : absl::StrCat(R"("cacheDuration":")", duration, R"(",)"),
        R"("auth":{"*.example:5000":{"username":")", user,
        R"(","password":"p1"},"reg.example:5000":{"username":"specific","password":"p2"}}})");
  }
  std::string Log() const {
    std::ifstream in(bin_.Join("plugin.log"));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  TempDir bin_, cfg_;
  modelfs::testing::FakeClock clock_;
};

TEST_F(PluginTest, PluginGetsTheRequestArgsAndEnvAndTheMostSpecificAuthEntryWins) {
  WritePlugin(Response("1h"));
  ASSERT_OK_AND_ASSIGN(auto k, Providers());
  ASSERT_OK_AND_ASSIGN(std::optional<Credential> c, k->Get("reg.example:5000"));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->username, "specific");
  EXPECT_EQ(c->password, "p2");
  EXPECT_EQ(Log(),
            "get e1 {\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"image\":"
            "\"reg.example:5000\",\"kind\":\"CredentialProviderRequest\"}\n");
}

TEST_F(PluginTest, RegistryThePluginDoesNotMatchIsNotAskedFor) {
  WritePlugin(Response("1h"));
  ASSERT_OK_AND_ASSIGN(auto k, Providers());
  ASSERT_OK_AND_ASSIGN(std::optional<Credential> c, k->Get("reg.example"));
  EXPECT_FALSE(c.has_value());
  EXPECT_EQ(k->plugin_runs(), 0);
}

TEST_F(PluginTest, AnswerIsCachedForItsCacheDuration) {
  WritePlugin(Response("10m"));
  ASSERT_OK_AND_ASSIGN(auto k, Providers("*.example:5000", "1h"));
  ASSERT_OK(k->Get("reg.example:5000"));
  clock_.Advance(absl::Minutes(9));
  ASSERT_OK(k->Get("reg.example:5000"));
  EXPECT_EQ(k->plugin_runs(), 1);
  clock_.Advance(absl::Minutes(1));
  ASSERT_OK(k->Get("reg.example:5000"));
  EXPECT_EQ(k->plugin_runs(), 2);
}

TEST_F(PluginTest, AnswerWithoutCacheDurationUsesTheProvidersDefault) {
  WritePlugin(Response(""));
  ASSERT_OK_AND_ASSIGN(auto k, Providers("*.example:5000", "2m"));
  ASSERT_OK(k->Get("reg.example:5000"));
  clock_.Advance(absl::Seconds(119));
  ASSERT_OK(k->Get("reg.example:5000"));
  EXPECT_EQ(k->plugin_runs(), 1);
  clock_.Advance(absl::Seconds(1));
  ASSERT_OK(k->Get("reg.example:5000"));
  EXPECT_EQ(k->plugin_runs(), 2);
}

TEST_F(PluginTest, ZeroCacheDurationRunsThePluginEveryTime) {
  WritePlugin(Response("0s"));
  ASSERT_OK_AND_ASSIGN(auto k, Providers());
  ASSERT_OK(k->Get("reg.example:5000"));
  ASSERT_OK(k->Get("reg.example:5000"));
  EXPECT_EQ(k->plugin_runs(), 2);
}

TEST_F(PluginTest, InvalidateRunsThePluginAgain) {
  WritePlugin(Response("1h"));
  ASSERT_OK_AND_ASSIGN(auto k, Providers());
  ASSERT_OK(k->Get("reg.example:5000"));
  k->Invalidate("reg.example:5000");
  ASSERT_OK(k->Get("reg.example:5000"));
  EXPECT_EQ(k->plugin_runs(), 2);
}

TEST_F(PluginTest, MissingPluginIsReportedAtCreate) {
  EXPECT_THAT(Providers(), StatusIs(absl::StatusCode::kNotFound,
                                    ::testing::AllOf(HasSubstr("test-plugin"),
                                                     HasSubstr(bin_.path().string()))));
}

TEST_F(PluginTest, FailingPluginNamesItselfAndTheImageButNotItsOutput) {
  auto p = bin_.WriteFile("test-plugin", "#!/bin/sh\necho hunter2\nexit 4\n");
  std::filesystem::permissions(p, std::filesystem::perms::owner_all);
  ASSERT_OK_AND_ASSIGN(auto k, Providers());
  auto r = k->Get("reg.example:5000");
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kUnauthenticated,
                          ::testing::AllOf(HasSubstr("test-plugin"), HasSubstr("reg.example:5000"),
                                           HasSubstr("exit code 4"))));
  EXPECT_THAT(r.status().message(), Not(HasSubstr("hunter2")));
}

}  // namespace
}  // namespace modelfs
