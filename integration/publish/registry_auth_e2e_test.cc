// `modelfs push` and `pull` through a registry that wants credentials: htpasswd (Basic) and the
// Bearer token flow, with the credential in a docker config.json given by --docker-config. A
// wrong password fails with exit 1, and the password never appears in any output.
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

using ::testing::Gt;
using ::testing::HasSubstr;
using ::testing::Not;
using Auth = RegistryFixtureOptions::Auth;

constexpr char kPassword[] = "s3cret-Pa55word-for-e2e";
constexpr char kWrongPassword[] = "wrong-Pa55word-for-e2e";

// A small model (one GGUF, a config.json, a README): these tests are about auth, not size.
void WriteSmallModel(const TempDir& tmp) {
  tmp.WriteFile("model/config.json", R"({"architectures":["LlamaForCausalLM"]})");
  tmp.WriteFile("model/README.md", "# auth test model\n");
  tmp.WriteFile("model/weights.bin", std::string(300000, 'w'));
}

class AuthTest : public ::testing::TestWithParam<Auth> {
 protected:
  // One registry per auth mode for the whole suite (the token server's key generation is the
  // slow part); every test pushes the same files, so the tests stay independent.
  static void TearDownTestSuite() {
    if (registries_ == nullptr) return;
    for (auto& [auth, r] : *registries_) delete r;
    delete registries_;
    registries_ = nullptr;
  }
  void SetUp() override {
    RegistryFixtureOptions o;
    o.auth = GetParam();
    o.password = kPassword;
    if (registries_ == nullptr) registries_ = new std::map<Auth, RegistryFixture*>();
    RegistryFixture*& r = (*registries_)[GetParam()];
    if (r == nullptr) {
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<RegistryFixture> started, RegistryFixture::Start(o));
      r = started.release();
    }
    registry_ = r;
    WriteSmallModel(tmp_);
    good_config_ =
        tmp_.WriteFile("good.json", DockerConfigJson(registry_->host_port(), o.username, kPassword))
            .string();
    bad_config_ = tmp_.WriteFile("bad.json", DockerConfigJson(registry_->host_port(), o.username,
                                                              kWrongPassword))
                      .string();
  }

  std::string Ref(const std::string& tag) const {
    return absl::StrCat(registry_->host_port(), "/private/model:", tag);
  }
  std::string ModelDir() const { return tmp_.Join("model").string(); }

  static std::map<Auth, RegistryFixture*>* registries_;
  RegistryFixture* registry_ = nullptr;
  TempDir tmp_;
  std::string good_config_;
  std::string bad_config_;
};

std::map<Auth, RegistryFixture*>* AuthTest::registries_ = nullptr;

TEST_P(AuthTest, PushAndPullWithTheDockerConfigCredentialRoundTrip) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push,
                       RunModelfs({"push", "--plain-http", "--docker-config", good_config_,
                                   Ref("v1"), ModelDir(), "--json"}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  std::string dest = tmp_.Join("dest").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult pull, RunModelfs({"pull", "--plain-http", "--docker-config",
                                                       good_config_, Ref("v1-volume"), dest}));
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  EXPECT_EQ(DescribeFiles(dest), DescribeFiles(ModelDir()));
  if (GetParam() == Auth::kToken) {
    ASSERT_OK_AND_ASSIGN(int tokens, registry_->TokenRequestCount());
    EXPECT_THAT(tokens, Gt(0));
  }
}

TEST_P(AuthTest, PushWithoutCredentialsFailsWithExitOne) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push,
                       RunModelfs({"push", "--plain-http", Ref("v1"), ModelDir()}));
  EXPECT_EQ(push.exit_code, 1) << push.err;
}

TEST_P(AuthTest, PushWithAWrongPasswordFailsWithExitOneAndNeverPrintsIt) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push, RunModelfs({"push", "--plain-http", "--docker-config",
                                                       bad_config_, Ref("v1"), ModelDir()}));
  EXPECT_EQ(push.exit_code, 1) << push.err;
  EXPECT_THAT(push.out + push.err, Not(HasSubstr(kWrongPassword)));
  EXPECT_THAT(push.out + push.err, Not(HasSubstr(kPassword)));
}

TEST_P(AuthTest, PullWithAWrongPasswordFailsWithExitOneAndNeverPrintsIt) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push, RunModelfs({"push", "--plain-http", "--docker-config",
                                                       good_config_, Ref("v1"), ModelDir()}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  std::string dest = tmp_.Join("dest").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult pull, RunModelfs({"pull", "--plain-http", "--docker-config",
                                                       bad_config_, Ref("v1"), dest}));
  EXPECT_EQ(pull.exit_code, 1) << pull.err;
  EXPECT_THAT(pull.out + pull.err, Not(HasSubstr(kWrongPassword)));
  EXPECT_THAT(pull.out + pull.err, Not(HasSubstr(kPassword)));
  EXPECT_TRUE(DescribeFiles(dest).empty());
}

TEST_P(AuthTest, SuccessfulCommandsNeverPrintThePassword) {
  ASSERT_OK_AND_ASSIGN(ProcessResult push, RunModelfs({"push", "--plain-http", "--docker-config",
                                                       good_config_, Ref("v1"), ModelDir()}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  ASSERT_OK_AND_ASSIGN(ProcessResult pull,
                       RunModelfs({"pull", "--plain-http", "--docker-config", good_config_,
                                   Ref("v1"), tmp_.Join("dest").string(), "--json"}));
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  EXPECT_THAT(push.out + push.err + pull.out + pull.err, Not(HasSubstr(kPassword)));
}

INSTANTIATE_TEST_SUITE_P(BasicAndBearer, AuthTest, ::testing::Values(Auth::kHtpasswd, Auth::kToken),
                         [](const ::testing::TestParamInfo<Auth>& info) {
                           return info.param == Auth::kHtpasswd ? std::string("Htpasswd")
                                                                : std::string("Token");
                         });

}  // namespace
}  // namespace modelfs::testing
