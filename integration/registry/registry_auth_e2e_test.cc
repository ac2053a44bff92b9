// End-to-end tests of RegistryClient authentication against a real docker-registry:
// htpasswd (Basic) and token (Bearer, via testsupport/harness/token_server.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/registry/registry_client.h"
#include "integration/registry/blob_round_trip.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::Pull;
using ::modelfs::testing::Push;
using ::modelfs::testing::RegistryFixture;
using ::modelfs::testing::RegistryFixtureOptions;
using ::modelfs::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::unique_ptr<RegistryClient> ClientFor(const RegistryFixture& f,
                                          std::optional<Credential> credential) {
  RegistryClientOptions o;
  o.registry = f.host_port();
  o.endpoint.scheme = "http";
  o.endpoint.host = f.host_port();
  o.credential = std::move(credential);
  o.initial_backoff = absl::Milliseconds(10);
  o.retry_deadline = absl::Seconds(20);
  auto c = RegistryClient::Create(std::move(o));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(c).value();
}

Credential Good(const RegistryFixture& f) {
  return Credential{f.options().username, f.options().password, "", ""};
}
Credential Bad(const RegistryFixture& f) {
  return Credential{f.options().username, "wrong-password-xyz", "", ""};
}

class AuthE2E : public ::testing::Test {
 protected:
  static std::unique_ptr<RegistryFixture> Start(RegistryFixtureOptions::Auth auth,
                                                bool anonymous_pull = false) {
    RegistryFixtureOptions o;
    o.auth = auth;
    o.anonymous_pull = anonymous_pull;
    auto f = RegistryFixture::Start(o);
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? std::move(f).value() : nullptr;
  }
};

// --- Basic (htpasswd) ---------------------------------------------------------------------------

TEST_F(AuthE2E, BasicCredentialsPushAndPull) {
  auto f = Start(RegistryFixtureOptions::Auth::kHtpasswd);
  ASSERT_NE(f, nullptr);
  auto client = ClientFor(*f, Good(*f));
  std::string blob(10'000, 'b');
  ASSERT_OK(Push(*client, "auth/basic", blob));
  ASSERT_OK_AND_ASSIGN(std::string back, Pull(*client, "auth/basic", Digest::Of(blob)));
  EXPECT_EQ(back, blob);
  EXPECT_EQ(client->stats().token_requests, 0u);
}

TEST_F(AuthE2E, BasicWithoutCredentialsIsUnauthenticated) {
  auto f = Start(RegistryFixtureOptions::Auth::kHtpasswd);
  ASSERT_NE(f, nullptr);
  auto client = ClientFor(*f, std::nullopt);
  EXPECT_THAT(client->GetManifest("auth/basic", "v1"),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr("HTTP 401"), HasSubstr("no credentials are configured"))));
}

TEST_F(AuthE2E, BasicWithAWrongPasswordIsUnauthenticatedAndNeverQuotesIt) {
  auto f = Start(RegistryFixtureOptions::Auth::kHtpasswd);
  ASSERT_NE(f, nullptr);
  auto client = ClientFor(*f, Bad(*f));
  EXPECT_THAT(client->GetManifest("auth/basic", "v1"),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr("HTTP 401"), Not(HasSubstr("wrong-password-xyz")))));
}

// --- Bearer (token server) ----------------------------------------------------------------------

TEST_F(AuthE2E, TokenFlowPushesAndPullsAManifest) {
  auto f = Start(RegistryFixtureOptions::Auth::kToken);
  ASSERT_NE(f, nullptr);
  auto client = ClientFor(*f, Good(*f));
  std::string config = "{}";
  ASSERT_OK(Push(*client, "auth/token", config));
  std::string manifest = absl::StrCat(
      R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)",
      R"("config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":")",
      Digest::Of(config).str(), R"(","size":2},"layers":[]})");
  ASSERT_OK_AND_ASSIGN(Digest d,
                       client->PutManifest("auth/token", "v1", manifest, kMediaTypeOciManifest));
  ASSERT_OK_AND_ASSIGN(ManifestResult m, client->GetManifest("auth/token", "v1"));
  EXPECT_EQ(m.digest, d);
  EXPECT_EQ(m.bytes, manifest);
}

TEST_F(AuthE2E, TokensAreCachedPerScope) {
  auto f = Start(RegistryFixtureOptions::Auth::kToken);
  ASSERT_NE(f, nullptr);
  auto client = ClientFor(*f, Good(*f));
  std::string blob(5'000, 't');
  ASSERT_OK(Push(*client, "auth/cache", blob));  // scope pull,push
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(client->GetBlobRange("auth/cache", Digest::Of(blob), i * 100, 100));  // scope pull
  }
  EXPECT_EQ(client->stats().token_requests, 2u);
  EXPECT_EQ(f->TokenRequestCount().value_or(-1), 2);
}

TEST_F(AuthE2E, TokenMountAsksForPullOnTheSourceRepository) {
  auto f = Start(RegistryFixtureOptions::Auth::kToken);
  ASSERT_NE(f, nullptr);
  auto client = ClientFor(*f, Good(*f));
  std::string blob(50'000, 'm');
  ASSERT_OK(Push(*client, "auth/from", blob));
  uint64_t sent_before = client->stats().bytes_sent;
  ASSERT_OK_AND_ASSIGN(bool mounted, client->MountBlob("auth/to", Digest::Of(blob), "auth/from"));
  EXPECT_TRUE(mounted);
  EXPECT_EQ(client->stats().bytes_sent, sent_before);
}

TEST_F(AuthE2E, TokenServerRefusingThePasswordIsUnauthenticatedAndNeverQuotesIt) {
  auto f = Start(RegistryFixtureOptions::Auth::kToken);
  ASSERT_NE(f, nullptr);
  auto client = ClientFor(*f, Bad(*f));
  EXPECT_THAT(client->GetManifest("auth/token", "v1"),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr("token server"), HasSubstr("refused"), HasSubstr("HTTP 401"),
                             Not(HasSubstr("wrong-password-xyz")))));
}

TEST_F(AuthE2E, AnonymousTokenWithoutPullRightsIsUnauthenticated) {
  auto f = Start(RegistryFixtureOptions::Auth::kToken);
  ASSERT_NE(f, nullptr);
  auto client = ClientFor(*f, std::nullopt);
  EXPECT_THAT(client->GetManifest("auth/token", "v1"),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("HTTP 401")));
}

TEST_F(AuthE2E, AnonymousPullWorksWhenTheTokenServerAllowsIt) {
  auto f = Start(RegistryFixtureOptions::Auth::kToken, /*anonymous_pull=*/true);
  ASSERT_NE(f, nullptr);
  auto pusher = ClientFor(*f, Good(*f));
  std::string blob(3'000, 'a');
  ASSERT_OK(Push(*pusher, "auth/public", blob));
  auto anonymous = ClientFor(*f, std::nullopt);
  ASSERT_OK_AND_ASSIGN(std::string back, Pull(*anonymous, "auth/public", Digest::Of(blob)));
  EXPECT_EQ(back, blob);
  EXPECT_THAT(Push(*anonymous, "auth/public", std::string(10, 'x')),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("auth/public")));
}

}  // namespace
}  // namespace modelfs
