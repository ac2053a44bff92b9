#include "core/registry/credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "absl/strings/escaping.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(Credentials, DecodesBase64AuthIntoUserAndPassword) {
  std::string json =
      R"({"auths":{"reg:5000":{"auth":")" + absl::Base64Escape("alice:pa:ss") + R"("}}})";
  ASSERT_OK_AND_ASSIGN(CredentialStore s, CredentialStore::FromDockerConfigJson(json, "c.json"));
  auto c = s.Lookup("reg:5000");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->username, "alice");
  EXPECT_EQ(c->password, "pa:ss");
}

TEST(Credentials, ReadsUsernamePasswordAndIdentityToken) {
  const char* json = R"({"auths":{
    "https://reg.example.com/v1/": {"username": "bob", "password": "pw"},
    "tok.example.com": {"identitytoken": "refresh-123"}}})";
  ASSERT_OK_AND_ASSIGN(CredentialStore s, CredentialStore::FromDockerConfigJson(json, "c.json"));
  EXPECT_EQ(s.size(), 2u);
  ASSERT_TRUE(s.Lookup("reg.example.com").has_value());
  EXPECT_EQ(s.Lookup("reg.example.com")->username, "bob");
  EXPECT_EQ(s.Lookup("reg.example.com")->password, "pw");
  ASSERT_TRUE(s.Lookup("tok.example.com").has_value());
  EXPECT_EQ(s.Lookup("tok.example.com")->identity_token, "refresh-123");
}

TEST(Credentials, DockerHubKeysAreOneEntry) {
  std::string json = R"({"auths":{"https://index.docker.io/v1/":{"auth":")" +
                     absl::Base64Escape("u:p") + R"("}}})";
  ASSERT_OK_AND_ASSIGN(CredentialStore s, CredentialStore::FromDockerConfigJson(json, "c.json"));
  EXPECT_TRUE(s.Lookup("docker.io").has_value());
  EXPECT_TRUE(s.Lookup("registry-1.docker.io").has_value());
  EXPECT_FALSE(s.Lookup("quay.io").has_value());
}

TEST(Credentials, SkipsEmptyEntriesLeftByCredentialStores) {
  ASSERT_OK_AND_ASSIGN(CredentialStore s,
                       CredentialStore::FromDockerConfigJson(
                           R"({"auths":{"reg":{}},"credsStore":"desktop"})", "c.json"));
  EXPECT_EQ(s.size(), 0u);
}

TEST(Credentials, BadBase64NamesFileAndRegistryButNotTheSecret) {
  const char* json = R"({"auths":{"reg:5000":{"auth":"%%%secret%%%"}}})";
  auto s = CredentialStore::FromDockerConfigJson(json, "/home/u/.docker/config.json");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          ::testing::AllOf(HasSubstr("/home/u/.docker/config.json"),
                                           HasSubstr("reg:5000"), Not(HasSubstr("secret")))));
}

TEST(Credentials, AuthWithoutColonIsRejectedWithoutQuotingIt) {
  std::string json = R"({"auths":{"reg":{"auth":")" + absl::Base64Escape("hunter2") + R"("}}})";
  EXPECT_THAT(CredentialStore::FromDockerConfigJson(json, "c.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("user:password"), Not(HasSubstr("hunter2")))));
}

TEST(Credentials, MalformedJsonIsInvalidArgument) {
  EXPECT_THAT(CredentialStore::FromDockerConfigJson("{", "c.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("c.json")));
}

TEST(Credentials, MissingFileIsAnEmptyStore) {
  ASSERT_OK_AND_ASSIGN(CredentialStore s,
                       CredentialStore::LoadDockerConfig("/nonexistent/modelfs/config.json"));
  EXPECT_EQ(s.size(), 0u);
}

TEST(Credentials, LoadDefaultReadsDockerConfigEnvironment) {
  TempDir dir;
  dir.WriteFile("config.json", R"({"auths":{"reg:1":{"username":"e","password":"f"}}})");
  const char* old = std::getenv("DOCKER_CONFIG");
  std::string saved = old ? old : "";
  setenv("DOCKER_CONFIG", dir.path().c_str(), 1);
  auto s = CredentialStore::LoadDefault();
  if (old) {
    setenv("DOCKER_CONFIG", saved.c_str(), 1);
  } else {
    unsetenv("DOCKER_CONFIG");
  }
  ASSERT_OK(s);
  ASSERT_TRUE(s->Lookup("reg:1").has_value());
  EXPECT_EQ(s->Lookup("reg:1")->username, "e");
}

TEST(Credentials, ExplicitEntriesOverrideDockerConfig) {
  ASSERT_OK_AND_ASSIGN(CredentialStore s,
                       CredentialStore::FromDockerConfigJson(
                           R"({"auths":{"reg":{"username":"a","password":"b"}}})", "c.json"));
  CredentialStore explicit_entries;
  explicit_entries.Add("https://reg/", Credential{"x", "y", "", ""});
  s.Merge(explicit_entries);
  EXPECT_EQ(s.Lookup("reg")->username, "x");
  EXPECT_EQ(s.Lookup("reg")->password, "y");
}

}  // namespace
}  // namespace modelfs
