// RegistryClient against the fault-injecting HTTP server (testsupport/testing/http_fixture.h)
// posing as a registry: what a range read does when the registry fails. The blob cache owns the
// read deadline and the retries, so GetBlobRange must make one attempt and classify the failure.
#include "core/registry/registry_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/base/backoff.h"
#include "testsupport/fakes/fake_clock.h"
#include "testsupport/testing/http_fixture.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::RangeFaults;
using ::modelfs::testing::RangeServer;
using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

class RegistryClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new modelfs::testing::TempDir();
    blob_ = new std::string(64 * 1024, 'w');
    digest_ = new Digest(Digest::Of(*blob_));
    dir_->WriteFile(absl::StrCat("v2/models/m/blobs/", digest_->str()), *blob_);
    auto server = RangeServer::Start({.root = dir_->path()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete digest_;
    delete blob_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_OK(server_->SetFaults({}));
    server_->ClearLog();
  }

  static RegistryClientOptions Options() {
    RegistryClientOptions o;
    o.registry = absl::StrCat("127.0.0.1:", server_->port());
    o.endpoint.scheme = "http";
    o.endpoint.host = o.registry;
    o.initial_backoff = absl::Milliseconds(1);
    o.max_backoff = absl::Milliseconds(2);
    return o;
  }
  std::unique_ptr<RegistryClient> Client() {
    auto client = RegistryClient::Create(Options());
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  static modelfs::testing::TempDir* dir_;
  static std::string* blob_;
  static Digest* digest_;
  static RangeServer* server_;
};

modelfs::testing::TempDir* RegistryClientTest::dir_ = nullptr;
std::string* RegistryClientTest::blob_ = nullptr;
Digest* RegistryClientTest::digest_ = nullptr;
RangeServer* RegistryClientTest::server_ = nullptr;

TEST(StallTimeoutForReadsTest, AThirdOfTheReadDeadlineInWholeSecondsBetweenOneAndTheClientsOwn) {
  const absl::Duration own = absl::Seconds(60);
  EXPECT_EQ(StallTimeoutForReads(own, absl::Seconds(30)), absl::Seconds(10));
  EXPECT_EQ(StallTimeoutForReads(own, absl::Seconds(10)), absl::Seconds(4));  // 3.33 s, up
  EXPECT_EQ(StallTimeoutForReads(own, absl::Seconds(3)), absl::Seconds(1));
  EXPECT_EQ(StallTimeoutForReads(own, absl::Milliseconds(200)), absl::Seconds(1));
  EXPECT_EQ(StallTimeoutForReads(own, absl::Minutes(10)), own);
}

TEST_F(RegistryClientTest, RangeReadReturnsTheExactBytes) {
  auto client = Client();
  ASSERT_OK_AND_ASSIGN(std::string got, client->GetBlobRange("models/m", *digest_, 100, 200));
  EXPECT_EQ(got, blob_->substr(100, 200));
}

TEST_F(RegistryClientTest, RangeReadMakesOneAttemptWhenTheRegistryAnswers503) {
  auto client = Client();
  ASSERT_OK(server_->SetFaults({.fail_first = 1, .fail_status = 503}));
  EXPECT_THAT(client->GetBlobRange("models/m", *digest_, 0, 100),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("HTTP 503")));
  EXPECT_EQ(server_->ReadLog().size(), 1u);
}

TEST_F(RegistryClientTest, RangeReadAnswered429IsResourceExhausted) {
  auto client = Client();
  ASSERT_OK(server_->SetFaults({.fail_first = 1, .fail_status = 429}));
  absl::StatusOr<std::string> got = client->GetBlobRange("models/m", *digest_, 0, 100);
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("HTTP 429")));
  EXPECT_TRUE(RetryableCode(got.status().code()));
}

TEST_F(RegistryClientTest, ManifestAndHeadRequestsStillRetryA503) {
  auto client = Client();
  ASSERT_OK(server_->SetFaults({.fail_first = 2, .fail_status = 503}));
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> size, client->HeadBlob("models/m", *digest_));
  EXPECT_EQ(size, std::optional<uint64_t>(blob_->size()));
  EXPECT_EQ(server_->ReadLog().size(), 3u);
}

// `state push` writes the referrers fallback tag only where the registry has no referrers API:
// Distribution 2.8 answers GET /v2/<repo>/referrers/<digest> with 404, a registry with the API
// with 200.
TEST_F(RegistryClientTest, ARegistryAnswering404HasNoReferrersApi) {
  std::unique_ptr<RegistryClient> client = Client();
  ASSERT_NE(client, nullptr);
  ASSERT_OK_AND_ASSIGN(bool api, client->HasReferrersApi("models/m", Digest::Of("no referrers")));
  EXPECT_FALSE(api);
}

TEST_F(RegistryClientTest, ARegistryAnswering200HasTheReferrersApi) {
  const Digest subject = Digest::Of("a model with referrers");
  dir_->WriteFile(absl::StrCat("v2/models/m/referrers/", subject.str()),
                  R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json",)"
                  R"("manifests":[]})");
  std::unique_ptr<RegistryClient> client = Client();
  ASSERT_NE(client, nullptr);
  ASSERT_OK_AND_ASSIGN(bool api, client->HasReferrersApi("models/m", subject));
  EXPECT_TRUE(api);
}

// Token expiry runs on the client's clock: a FakeClock moves it, nothing sleeps.
TEST_F(RegistryClientTest, ABearerTokenIsReusedUntilItExpiresAndThenRenewed) {
  dir_->WriteFile("token.json", R"({"token": "T1", "expires_in": 60})");
  ASSERT_OK(server_->SetFaults({.require_token = "T1", .token_realm = "/token.json"}));
  modelfs::testing::FakeClock clock;
  RegistryClientOptions o = Options();
  o.clock = &clock;
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(o));
  ASSERT_OK(client->GetBlobRange("models/m", *digest_, 0, 10));
  EXPECT_EQ(client->stats().token_requests, 1u);
  clock.Advance(absl::Seconds(49));  // renewed 10 s early: good until 50 s
  ASSERT_OK(client->GetBlobRange("models/m", *digest_, 10, 10));
  EXPECT_EQ(client->stats().token_requests, 1u);
  clock.Advance(absl::Seconds(1));
  ASSERT_OK_AND_ASSIGN(std::string got, client->GetBlobRange("models/m", *digest_, 20, 10));
  EXPECT_EQ(got, blob_->substr(20, 10));
  EXPECT_EQ(client->stats().token_requests, 2u);
}

// Many range reads in flight when the registry starts refusing the token they carry: the token
// is fetched once, and every read succeeds.
TEST_F(RegistryClientTest, ConcurrentReadsRefusedForTheirTokenShareOneTokenFetch) {
  dir_->WriteFile("token.json", R"({"token": "T1", "expires_in": 300})");
  ASSERT_OK(server_->SetFaults({.require_token = "T1", .token_realm = "/token.json"}));
  std::unique_ptr<RegistryClient> client = Client();
  ASSERT_NE(client, nullptr);
  ASSERT_OK(client->GetBlobRange("models/m", *digest_, 0, 10));
  ASSERT_EQ(client->stats().token_requests, 1u);
  // The registry revokes T1 (a token that expired early, a rotated signing key).
  dir_->WriteFile("token.json", R"({"token": "T2", "expires_in": 300})");
  ASSERT_OK(server_->SetFaults({.require_token = "T2", .token_realm = "/token.json"}));
  std::vector<std::thread> readers;
  std::atomic<int> failed{0};
  for (int i = 0; i < 16; ++i) {
    readers.emplace_back([&, i] {
      absl::StatusOr<std::string> got = client->GetBlobRange("models/m", *digest_, i * 100, 100);
      if (!got.ok() || *got != blob_->substr(i * 100, 100)) ++failed;
    });
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(client->stats().token_requests, 2u);
}

// A keychain that hands out registry token R1 until told to forget it, then R2.
class RotatingKeychain : public Keychain {
 public:
  absl::StatusOr<std::optional<Credential>> Get(const std::string&) override {
    absl::MutexLock l(&mu_);
    ++gets_;
    return Credential{"", "", "", invalidations_ == 0 ? "R1" : "R2"};
  }
  void Invalidate(const std::string&) override {
    absl::MutexLock l(&mu_);
    ++invalidations_;
  }
  int invalidations() {
    absl::MutexLock l(&mu_);
    return invalidations_;
  }

 private:
  absl::Mutex mu_;
  int gets_ ABSL_GUARDED_BY(mu_) = 0;
  int invalidations_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST_F(RegistryClientTest, RefusedKeychainCredentialIsRefreshedOnceForConcurrentReads) {
  ASSERT_OK(server_->SetFaults({.require_token = "R2"}));
  auto keychain = std::make_shared<RotatingKeychain>();
  RegistryClientOptions o = Options();
  o.hosts.push_back(RegistryHost{o.endpoint, std::nullopt, keychain, {o.registry}});
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(o));
  std::vector<std::thread> readers;
  std::atomic<int> failed{0};
  for (int i = 0; i < 16; ++i) {
    readers.emplace_back([&, i] {
      absl::StatusOr<std::string> got = client->GetBlobRange("models/m", *digest_, i * 100, 100);
      if (!got.ok() || *got != blob_->substr(i * 100, 100)) ++failed;
    });
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(keychain->invalidations(), 1);
}

TEST_F(RegistryClientTest, KeychainErrorFailsTheRequestNamingTheHost) {
  class Failing : public Keychain {
   public:
    absl::StatusOr<std::optional<Credential>> Get(const std::string&) override {
      return absl::NotFoundError("credential helper docker-credential-x: cannot run");
    }
    void Invalidate(const std::string&) override {}
  };
  RegistryClientOptions o = Options();
  o.hosts.push_back(
      RegistryHost{o.endpoint, std::nullopt, std::make_shared<Failing>(), {o.registry}});
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(o));
  EXPECT_THAT(client->GetBlobRange("models/m", *digest_, 0, 10),
              StatusIs(absl::StatusCode::kNotFound,
                       ::testing::AllOf(HasSubstr("docker-credential-x"), HasSubstr(o.registry))));
}

// Records what the client reports, as the daemon's metrics do.
class RecordingObserver : public RegistryObserver {
 public:
  void OnRequest(const RegistryRequestRecord& r) override {
    absl::MutexLock lock(&mu_);
    seen_.push_back(absl::StrCat(std::string(r.registry), " ",
                                 std::string(RegistryRequestKindName(r.kind)), " ", r.status));
  }
  std::vector<std::string> seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> seen_ ABSL_GUARDED_BY(mu_);
};

TEST_F(RegistryClientTest, TheObserverSeesEachExchangeWithItsKindStatusAndRegistry) {
  dir_->WriteFile("token.json", R"({"token": "T1", "expires_in": 60})");
  ASSERT_OK(server_->SetFaults({.require_token = "T1", .token_realm = "/token.json"}));
  RecordingObserver observer;
  RegistryClientOptions o = Options();
  o.observer = &observer;
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(o));
  ASSERT_OK(client->GetBlobRange("models/m", *digest_, 0, 10));
  const std::string r = o.registry;
  // The refused attempt, the token, the attempt with it: the label is the registry's name.
  EXPECT_THAT(observer.seen(),
              ::testing::ElementsAre(r + " blob 401", r + " token 200", r + " blob 206"));
}

TEST_F(RegistryClientTest, TheObserverCountsARefusedConnectionAsStatusZero) {
  RecordingObserver observer;
  RegistryClientOptions o = Options();
  o.endpoint.host = "127.0.0.1:1";  // nothing listens
  o.observer = &observer;
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(o));
  EXPECT_FALSE(client->GetBlobRange("models/m", *digest_, 0, 10).ok());
  ASSERT_FALSE(observer.seen().empty());
  EXPECT_EQ(observer.seen()[0], o.registry + " blob 0");
}

TEST(RetryableCodeTest, InternalIsNotRetryable) {
  EXPECT_FALSE(RetryableCode(absl::StatusCode::kInternal));
  EXPECT_FALSE(RetryableCode(absl::StatusCode::kUnknown));
  EXPECT_TRUE(RetryableCode(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(RetryableCode(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(RetryableCode(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace modelfs
