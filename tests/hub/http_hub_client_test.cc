// HttpHubClient against testsupport/fakes/fake_hub.py: the revision API, the two shapes of a
// resolve answer (direct and redirected to a CDN), where the token goes, and how each error
// the Hub names becomes a Status.
#include "core/hub/http_hub_client.h"

#include "core/hub/git_blob.h"
#include "core/oci/digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/hub/fake_hub_fixture.h"
#include "testsupport/hub/hub_test_model.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kCommit[] = "0123456789abcdef0123456789abcdef01234567";

class HttpHubClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto hub = FakeHub::Start();
    ASSERT_OK(hub.status());
    hub_ = hub->release();
    files_ = new std::map<std::string, std::string>(TinyRepoFiles());
    auto dir = hub_->WriteCommit("c", *files_);
    ASSERT_OK(dir.status());
    ASSERT_OK(hub_->SetState(
        {{"tokens",
          {{"hf_good", {"org/gated", "org/private"}}, {"hf_other", nlohmann::json::array()}}},
         {"lfs_threshold", 1024},
         {"repos",
          {{"org/tiny", {{"commits", {{kCommit, *dir}}}, {"refs", {{"main", {kCommit}}}}}},
           {"org/gated", {{"gated", "manual"}, {"commits", {{kCommit, *dir}}}}},
           {"org/private", {{"private", true}, {"commits", {{kCommit, *dir}}}}}}}}));
  }
  static void TearDownTestSuite() {
    delete hub_;
    delete files_;
  }

  std::unique_ptr<HttpHubClient> Client(const std::string& token = "") {
    HubClientOptions o;
    o.endpoint = hub_->endpoint() + "/";
    o.token = token;
    o.api_attempts = 1;
    auto c = HttpHubClient::Create(o);
    EXPECT_OK(c.status());
    return c.ok() ? std::move(*c) : nullptr;
  }

  struct Got {
    HubFileIdentity id;
    std::string bytes;
  };
  absl::StatusOr<Got> Download(HttpHubClient& c, const std::string& repo, const std::string& path) {
    Got g;
    absl::Status st = c.Download(
        repo, kCommit, path,
        [&](const HubFileIdentity& id) {
          g.id = id;
          return absl::OkStatus();
        },
        [&](std::string_view b) {
          g.bytes.append(b);
          return absl::OkStatus();
        });
    if (!st.ok()) return st;
    return g;
  }

  static FakeHub* hub_;
  static std::map<std::string, std::string>* files_;
};

FakeHub* HttpHubClientTest::hub_ = nullptr;
std::map<std::string, std::string>* HttpHubClientTest::files_ = nullptr;

TEST_F(HttpHubClientTest, EndpointLosesItsTrailingSlash) {
  EXPECT_EQ(Client()->endpoint(), hub_->endpoint());
}

TEST_F(HttpHubClientTest, ARevisionListsEveryFileWithSizeBlobIdAndLfs) {
  ASSERT_OK_AND_ASSIGN(HubRevision r, Client()->GetRevision("org/tiny", "main"));
  EXPECT_EQ(r.commit, kCommit);
  EXPECT_EQ(r.repo, "org/tiny");
  ASSERT_EQ(r.files.size(), files_->size());
  for (const HubFile& f : r.files) {
    const std::string& bytes = files_->at(f.path);
    ASSERT_TRUE(f.size.has_value()) << f.path;
    EXPECT_EQ(*f.size, bytes.size()) << f.path;
    if (bytes.size() >= 1024) {
      ASSERT_TRUE(f.lfs.has_value()) << f.path;
      EXPECT_EQ(f.lfs->sha256, Digest::Of(bytes).hex());
    } else {
      EXPECT_FALSE(f.lfs.has_value()) << f.path;
      EXPECT_EQ(f.blob_id, GitBlobSha1Hex(bytes)) << f.path;
    }
  }
}

TEST_F(HttpHubClientTest, ASmallFileComesDirectlyWithItsGitBlobIdAsETag) {
  auto c = Client();
  ASSERT_OK_AND_ASSIGN(Got g, Download(*c, "org/tiny", "config.json"));
  EXPECT_EQ(g.bytes, files_->at("config.json"));
  EXPECT_EQ(g.id.commit, kCommit);
  EXPECT_EQ(g.id.etag, GitBlobSha1Hex(files_->at("config.json")));
  EXPECT_EQ(g.id.size, files_->at("config.json").size());
  EXPECT_FALSE(g.id.redirected);
}

TEST_F(HttpHubClientTest, AnLfsFileIsIdentifiedByTheHubAndServedByTheCdn) {
  auto c = Client();
  ASSERT_OK_AND_ASSIGN(Got g, Download(*c, "org/tiny", "model.safetensors"));
  EXPECT_EQ(g.bytes, files_->at("model.safetensors"));
  EXPECT_EQ(g.id.commit, kCommit);
  EXPECT_EQ(g.id.etag, Digest::Of(files_->at("model.safetensors")).hex());
  EXPECT_EQ(g.id.size, files_->at("model.safetensors").size());
  EXPECT_TRUE(g.id.redirected);
  EXPECT_THAT(g.id.location, HasSubstr(absl::StrCat(":", hub_->cdn_port(), "/lfs/")));
  EXPECT_THAT(g.id.location, Not(HasSubstr("Signature")));  // query removed for messages
}

TEST_F(HttpHubClientTest, TheTokenGoesToTheHubButNeverToTheCdn) {
  auto c = Client("hf_good");
  ASSERT_OK(Download(*c, "org/gated", "model.safetensors").status());
  bool hub_auth = false, cdn_seen = false;
  for (const FakeHubRequest& r : hub_->ReadLog()) {
    if (r.path.find("/org/gated/resolve/") == 0 && r.auth) hub_auth = true;
    if (r.server == "cdn") {
      cdn_seen = true;
      EXPECT_FALSE(r.auth) << r.path;
    }
  }
  EXPECT_TRUE(hub_auth);
  EXPECT_TRUE(cdn_seen);
}

TEST_F(HttpHubClientTest, AGatedRepositoryWithoutATokenNamesHfToken) {
  auto c = Client();
  ASSERT_OK(c->GetRevision("org/gated", kCommit).status());  // metadata stays public
  EXPECT_THAT(Download(*c, "org/gated", "config.json"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr("HTTP 401 GatedRepo"), HasSubstr("set HF_TOKEN"))));
}

TEST_F(HttpHubClientTest, ATokenWithoutAccessIsRefusedAsSuch) {
  auto c = Client("hf_other");
  EXPECT_THAT(Download(*c, "org/gated", "config.json"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr("HTTP 403 GatedRepo"), HasSubstr("HF_TOKEN was sent"))));
  auto bad = Client("hf_wrong");
  EXPECT_THAT(bad->GetRevision("org/tiny", "main"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("Invalid credentials in Authorization header")));
}

TEST_F(HttpHubClientTest, APrivateRepositoryLooksMissingWithoutAToken) {
  EXPECT_THAT(Client()->GetRevision("org/private", kCommit),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr("401 RepoNotFound"), HasSubstr("HF_TOKEN"))));
  EXPECT_OK(Client("hf_good")->GetRevision("org/private", kCommit).status());
  EXPECT_THAT(Client("hf_good")->GetRevision("org/none", kCommit),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no such repository")));
}

TEST_F(HttpHubClientTest, AMissingRevisionOrFileIsNotFound) {
  auto c = Client();
  EXPECT_THAT(c->GetRevision("org/tiny", "nope"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("org/tiny@nope"), HasSubstr("RevisionNotFound"))));
  EXPECT_THAT(Download(*c, "org/tiny", "nope.json"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("nope.json"), HasSubstr("EntryNotFound"))));
}

TEST_F(HttpHubClientTest, ANonHttpEndpointIsRefused) {
  HubClientOptions o;
  o.endpoint = "file:///etc";
  EXPECT_THAT(HttpHubClient::Create(o), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(HubUrlEncodeTest, EncodesEverythingButUnreservedAndOptionallySlashes) {
  EXPECT_EQ(HubUrlEncode("refs/pr/1", false), "refs%2Fpr%2F1");
  EXPECT_EQ(HubUrlEncode("a b/c#d.json", true), "a%20b/c%23d.json");
}

TEST(RepoIdTest, AcceptsHubIdsAndRefusesTheRest) {
  EXPECT_OK(CheckRepoId("gpt2"));
  EXPECT_OK(CheckRepoId("HuggingFaceTB/SmolLM2-135M-Instruct"));
  for (const char* bad : {"", "a/b/c", "../x", "a/..b", "a/.b", "a b/c", "a/", "/a", "a?b/c"}) {
    EXPECT_THAT(CheckRepoId(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

}  // namespace
}  // namespace modelfs::testing
