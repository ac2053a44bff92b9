// RegistryClient against the fault-injecting HTTP server (tests/testing/http_fixture.h) posing
// as a registry: what a range read does when the registry fails. The blob cache owns the read
// deadline and the retries, so GetBlobRange must make one attempt and classify the failure.
#include "core/registry/registry_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/base/backoff.h"
#include "tests/testing/http_fixture.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

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

  std::unique_ptr<RegistryClient> Client() {
    RegistryClientOptions o;
    o.registry = absl::StrCat("127.0.0.1:", server_->port());
    o.endpoint.scheme = "http";
    o.endpoint.host = o.registry;
    o.initial_backoff = absl::Milliseconds(1);
    o.max_backoff = absl::Milliseconds(2);
    auto client = RegistryClient::Create(o);
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

TEST(RetryableCodeTest, InternalIsNotRetryable) {
  EXPECT_FALSE(RetryableCode(absl::StatusCode::kInternal));
  EXPECT_FALSE(RetryableCode(absl::StatusCode::kUnknown));
  EXPECT_TRUE(RetryableCode(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(RetryableCode(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(RetryableCode(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace modelfs
