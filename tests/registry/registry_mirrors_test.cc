// RegistryClient with several hosts (hosts.toml mirrors, then the server) against fault-
// injecting HTTP servers posing as registries: which host is asked for what, in which order,
// and what happens when a host fails. containerd's resolver and fetcher are the reference
// (remotes/docker/resolver.go, config/hosts.go).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/registry/registry_client.h"
#include "testsupport/fakes/fake_clock.h"
#include "testsupport/testing/http_fixture.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::RangeServer;
using ::modelfs::testing::RequestLogEntry;
using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kRepo[] = "models/m";
constexpr char kRegistry[] = "reg.example:5000";

// A port on 127.0.0.1 nothing listens on: connections are refused.
int ClosedPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

HostEndpoint Http(int port, bool mirror) {
  HostEndpoint ep;
  ep.scheme = "http";
  ep.host = absl::StrCat("127.0.0.1:", port);
  ep.mirror = mirror;
  return ep;
}

// Requests whose path contains `part`.
int Count(const std::vector<RequestLogEntry>& log, const std::string& part) {
  int n = 0;
  for (const auto& e : log) n += e.path.find(part) != std::string::npos;
  return n;
}

class RegistryMirrorsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    blob_ = new std::string(64 * 1024, 'b');
    for (size_t i = 0; i < blob_->size(); ++i) (*blob_)[i] = static_cast<char>(i * 7);
    digest_ = new Digest(Digest::Of(*blob_));
    // Larger than a whole-blob answer the client reads (4 MiB): one it cuts short.
    large_ = new std::string(5 << 20, 'l');
    for (size_t i = 0; i < large_->size(); ++i) (*large_)[i] = static_cast<char>(i * 13 + i / 7);
    large_digest_ = new Digest(Digest::Of(*large_));
    manifest_ = new std::string(R"({"schemaVersion":2,"mediaType":")" +
                                std::string(kMediaTypeOciManifest) + R"(","layers":[]})");
    // Each directory is one host's content; the mirror's lacks nothing unless a test removes it.
    for (TempDir** d : {&mirror_dir_, &server_dir_}) {
      *d = new TempDir();
      (*d)->WriteFile(absl::StrCat("v2/", kRepo, "/blobs/", digest_->str()), *blob_);
      (*d)->WriteFile(absl::StrCat("v2/", kRepo, "/blobs/", large_digest_->str()), *large_);
      (*d)->WriteFile(absl::StrCat("v2/", kRepo, "/manifests/v1"), *manifest_);
      (*d)->WriteFile(absl::StrCat("v2/", kRepo, "/manifests/", Digest::Of(*manifest_).str()),
                      *manifest_);
      // The same content under a non-standard API root, for override_path.
      (*d)->WriteFile(absl::StrCat("custom/api/", kRepo, "/blobs/", digest_->str()), *blob_);
    }
    auto m = RangeServer::Start({.root = mirror_dir_->path()});
    ASSERT_TRUE(m.ok()) << m.status();
    mirror_ = m->release();
    auto s = RangeServer::Start({.root = server_dir_->path()});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = s->release();
  }
  static void TearDownTestSuite() {
    delete mirror_;
    delete server_;
    delete mirror_dir_;
    delete server_dir_;
    delete manifest_;
    delete digest_;
    delete blob_;
    delete large_digest_;
    delete large_;
  }
  void SetUp() override {
    for (RangeServer* s : {mirror_, server_}) {
      ASSERT_OK(s->SetFaults({}));
      s->ClearLog();
    }
  }

  static RegistryClientOptions Options(std::vector<RegistryHost> hosts) {
    RegistryClientOptions o;
    o.registry = kRegistry;
    o.hosts = std::move(hosts);
    o.initial_backoff = absl::Milliseconds(1);
    o.max_backoff = absl::Milliseconds(2);
    o.max_attempts = 2;
    return o;
  }
  static RegistryHost Mirror(bool resolve = true) {
    RegistryHost h{Http(mirror_->port(), true), std::nullopt};
    h.endpoint.resolve = resolve;
    h.endpoint.push = false;
    return h;
  }
  static RegistryHost Server() { return RegistryHost{Http(server_->port(), false), std::nullopt}; }

  static std::string* blob_;
  static Digest* digest_;
  static std::string* large_;
  static Digest* large_digest_;
  static std::string* manifest_;
  static TempDir* mirror_dir_;
  static TempDir* server_dir_;
  static RangeServer* mirror_;
  static RangeServer* server_;
};

std::string* RegistryMirrorsTest::blob_ = nullptr;
Digest* RegistryMirrorsTest::digest_ = nullptr;
std::string* RegistryMirrorsTest::large_ = nullptr;
Digest* RegistryMirrorsTest::large_digest_ = nullptr;
std::string* RegistryMirrorsTest::manifest_ = nullptr;
TempDir* RegistryMirrorsTest::mirror_dir_ = nullptr;
TempDir* RegistryMirrorsTest::server_dir_ = nullptr;
RangeServer* RegistryMirrorsTest::mirror_ = nullptr;
RangeServer* RegistryMirrorsTest::server_ = nullptr;

TEST_F(RegistryMirrorsTest, RangeReadGoesToTheFirstMirrorOnly) {
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({Mirror(), Server()})));
  ASSERT_OK_AND_ASSIGN(std::string got, client->GetBlobRange(kRepo, *digest_, 100, 50));
  EXPECT_EQ(got, blob_->substr(100, 50));
  EXPECT_EQ(Count(mirror_->ReadLog(), "/blobs/"), 1);
  EXPECT_EQ(Count(server_->ReadLog(), "/blobs/"), 0);
}

TEST_F(RegistryMirrorsTest, MirrorRequestsCarryTheNamespaceAndServerRequestsDoNot) {
  RegistryHost server = Server();
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({Mirror(), server})));
  ASSERT_OK(client->GetBlobRange(kRepo, *digest_, 0, 10).status());
  ASSERT_EQ(mirror_->ReadLog().size(), 1u);
  EXPECT_EQ(mirror_->ReadLog()[0].query, "ns=reg.example%3a5000");  // %-escaped ":"
  // The server of a registry named by its own host gets no ns parameter.
  RegistryClientOptions o = Options({server});
  o.registry = server.endpoint.host;
  ASSERT_OK_AND_ASSIGN(auto direct, RegistryClient::Create(o));
  ASSERT_OK(direct->GetBlobRange(kRepo, *digest_, 0, 10).status());
  ASSERT_EQ(server_->ReadLog().size(), 1u);
  EXPECT_EQ(server_->ReadLog()[0].query, "");
}

TEST_F(RegistryMirrorsTest, RangeReadFallsBackToTheServerWhenTheMirrorIsDown) {
  RegistryHost dead{Http(ClosedPort(), true), std::nullopt};
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({dead, Server()})));
  ASSERT_OK_AND_ASSIGN(std::string got, client->GetBlobRange(kRepo, *digest_, 1000, 4096));
  EXPECT_EQ(got, blob_->substr(1000, 4096));
  EXPECT_EQ(Count(server_->ReadLog(), "/blobs/"), 1);
}

TEST_F(RegistryMirrorsTest, RangeReadFallsBackWhenTheMirrorAnswers503) {
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({Mirror(), Server()})));
  ASSERT_OK(mirror_->SetFaults({.fail_first = 1, .fail_status = 503}));
  ASSERT_OK_AND_ASSIGN(std::string got, client->GetBlobRange(kRepo, *digest_, 0, 64));
  EXPECT_EQ(got, blob_->substr(0, 64));
  EXPECT_EQ(mirror_->ReadLog().size(), 1u);
  EXPECT_EQ(server_->ReadLog().size(), 1u);
}

TEST_F(RegistryMirrorsTest, RangeReadFallsBackWhenTheMirrorLacksTheBlob) {
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({Mirror(), Server()})));
  std::string small = "only on the server";
  Digest d = Digest::Of(small);
  server_dir_->WriteFile(absl::StrCat("v2/", kRepo, "/blobs/", d.str()), small);
  ASSERT_OK_AND_ASSIGN(std::string got, client->GetBlobRange(kRepo, d, 5, 2));
  EXPECT_EQ(got, "on");
  ASSERT_EQ(mirror_->ReadLog().size(), 1u);
  EXPECT_EQ(mirror_->ReadLog()[0].status, 404);
  EXPECT_EQ(server_->ReadLog().size(), 1u);
}

TEST_F(RegistryMirrorsTest, WhenEveryHostFailsTheErrorNamesEachHostAndTheBlob) {
  RegistryHost dead{Http(ClosedPort(), true), std::nullopt};
  ASSERT_OK(server_->SetFaults({.fail_first = 1, .fail_status = 503}));
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({dead, Server()})));
  absl::StatusOr<std::string> got = client->GetBlobRange(kRepo, *digest_, 0, 10);
  // The first failure that is not a 404 decides the code: the dead mirror's connection error.
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kUnavailable,
                            AllOf(HasSubstr(digest_->str()),
                                  HasSubstr(absl::StrCat("mirror ", dead.endpoint.host)),
                                  HasSubstr("registry reg.example:5000"), HasSubstr("HTTP 503"))));
}

TEST_F(RegistryMirrorsTest, NotFoundEverywhereIsNotFound) {
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({Mirror(), Server()})));
  Digest missing = Digest::Of("nowhere");
  EXPECT_THAT(client->GetBlobRange(kRepo, missing, 0, 1),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("HTTP 404")));
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> size, client->HeadBlob(kRepo, missing));
  EXPECT_FALSE(size.has_value());
}

TEST_F(RegistryMirrorsTest, AMirrorWithoutResolveIsNotAskedForTagsButServesDigests) {
  ASSERT_OK_AND_ASSIGN(auto client,
                       RegistryClient::Create(Options({Mirror(/*resolve=*/false), Server()})));
  ASSERT_OK_AND_ASSIGN(ManifestResult by_tag, client->GetManifest(kRepo, "v1"));
  EXPECT_EQ(by_tag.bytes, *manifest_);
  EXPECT_EQ(Count(mirror_->ReadLog(), "/manifests/"), 0);
  EXPECT_EQ(Count(server_->ReadLog(), "/manifests/v1"), 1);

  ASSERT_OK_AND_ASSIGN(ManifestResult by_digest,
                       client->GetManifest(kRepo, Digest::Of(*manifest_).str()));
  EXPECT_EQ(by_digest.digest, Digest::Of(*manifest_));
  EXPECT_EQ(Count(mirror_->ReadLog(), "/manifests/sha256:"), 1);
  EXPECT_EQ(Count(server_->ReadLog(), "/manifests/sha256:"), 0);
}

TEST_F(RegistryMirrorsTest, AMirrorWithResolveAnswersTags) {
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({Mirror(), Server()})));
  ASSERT_OK(client->GetManifest(kRepo, "v1").status());
  EXPECT_EQ(Count(mirror_->ReadLog(), "/manifests/v1"), 1);
  EXPECT_EQ(server_->ReadLog().size(), 0u);
}

TEST_F(RegistryMirrorsTest, WholeBlobGetFallsBackToo) {
  RegistryHost dead{Http(ClosedPort(), true), std::nullopt};
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({dead, Server()})));
  std::string got;
  ASSERT_OK(client->GetBlob(kRepo, *digest_, [&](std::string_view c) {
    got.append(c);
    return absl::OkStatus();
  }));
  EXPECT_EQ(got, *blob_);
}

TEST_F(RegistryMirrorsTest, OverridePathUsesTheUrlPathAsTheApiRoot) {
  RegistryHost m = Mirror();
  m.endpoint.path = "/custom/api";
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({m, Server()})));
  ASSERT_OK_AND_ASSIGN(std::string got, client->GetBlobRange(kRepo, *digest_, 8, 8));
  EXPECT_EQ(got, blob_->substr(8, 8));
  ASSERT_EQ(mirror_->ReadLog().size(), 1u);
  EXPECT_EQ(mirror_->ReadLog()[0].path,
            absl::StrCat("/custom/api/", kRepo, "/blobs/", digest_->str()));
  EXPECT_EQ(server_->ReadLog().size(), 0u);
}

// A host that failed is tried after the others for a backoff that starts at
// host_failure_backoff and doubles with each failure in a row (on the client's clock), then
// first again: a mirror that failed once is not abandoned for the rest of a load.
TEST_F(RegistryMirrorsTest, AFailedMirrorIsAskedAgainAfterABackoffThatDoublesWithEachFailure) {
  modelfs::testing::FakeClock clock;
  RegistryClientOptions o = Options({Mirror(), Server()});
  o.clock = &clock;
  o.host_failure_backoff = absl::Seconds(1);
  o.host_failure_cooldown = absl::Seconds(30);
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(o));
  ASSERT_OK(mirror_->SetFaults({.fail_first = 2, .fail_status = 503}));
  ASSERT_OK(client->GetBlobRange(kRepo, *digest_, 0, 10).status());
  EXPECT_EQ(mirror_->ReadLog().size(), 1u);
  EXPECT_EQ(server_->ReadLog().size(), 1u);

  clock.Advance(absl::Milliseconds(900));
  ASSERT_OK(client->GetBlobRange(kRepo, *digest_, 10, 10).status());
  EXPECT_EQ(mirror_->ReadLog().size(), 1u);  // not asked within its first backoff (1 s)
  EXPECT_EQ(server_->ReadLog().size(), 2u);

  clock.Advance(absl::Milliseconds(200));
  ASSERT_OK(client->GetBlobRange(kRepo, *digest_, 20, 10).status());
  EXPECT_EQ(mirror_->ReadLog().size(), 2u);  // asked, and failed again: now 2 s
  EXPECT_EQ(server_->ReadLog().size(), 3u);

  clock.Advance(absl::Milliseconds(1900));
  ASSERT_OK(client->GetBlobRange(kRepo, *digest_, 30, 10).status());
  EXPECT_EQ(mirror_->ReadLog().size(), 2u);
  EXPECT_EQ(server_->ReadLog().size(), 4u);

  clock.Advance(absl::Milliseconds(200));
  ASSERT_OK_AND_ASSIGN(std::string got, client->GetBlobRange(kRepo, *digest_, 40, 10));
  EXPECT_EQ(got, blob_->substr(40, 10));
  EXPECT_EQ(mirror_->ReadLog().size(), 3u);  // it answers: first again, from now on
  EXPECT_EQ(server_->ReadLog().size(), 4u);
}

// Runs `read` on another thread while advancing `clock` in steps of `step` (with a short real
// wait between steps, so the client can act) and calling `on_step` after each, until it
// returns; the fake time it took.
template <typename F, typename G>
absl::Duration AdvanceUntilDone(modelfs::testing::FakeClock& clock, absl::Duration step, F read,
                                G on_step) {
  const absl::Time start = clock.Now();
  std::atomic<bool> done{false};
  std::thread t([&] {
    read();
    done = true;
  });
  for (int i = 0; i < 20000 && !done; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
    if (done) break;
    clock.Advance(step);
    on_step();
  }
  t.join();
  return clock.Now() - start;
}

// A pull-through cache that has not stored a blob yet answers a range request with the whole
// blob, and fetches it from upstream once more for every such request (Distribution 2.8). The
// read waits for the mirror, asking it again after a short wait, rather than reading from the
// server: the server is not asked at all.
TEST_F(RegistryMirrorsTest, ARangeReadWaitsForAMirrorStillStoringTheBlob) {
  modelfs::testing::FakeClock clock;
  RegistryClientOptions o = Options({Mirror(), Server()});
  o.clock = &clock;
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(o));
  ASSERT_OK(mirror_->SetFaults({.ignore_range = true}));
  absl::StatusOr<std::string> got;
  const absl::Time deadline = clock.Now() + absl::Seconds(30);
  bool stored = false;
  AdvanceUntilDone(
      clock, absl::Milliseconds(50),
      [&] { got = client->GetBlobRange(kRepo, *large_digest_, 300, 30, deadline); },
      [&] {
        // The mirror has stored the blob after its third whole-blob answer.
        if (!stored && mirror_->ReadLog().size() >= 3) {
          ASSERT_OK(mirror_->SetFaults({}));
          stored = true;
        }
      });
  ASSERT_OK(got.status());
  EXPECT_EQ(*got, large_->substr(300, 30));
  EXPECT_EQ(server_->ReadLog().size(), 0u);
  const auto log = mirror_->ReadLog();
  ASSERT_GE(log.size(), 4u);
  EXPECT_EQ(log.back().status, 206);
  // Further reads of the blob go to the mirror at once.
  ASSERT_OK(client->GetBlobRange(kRepo, *large_digest_, 600, 30, deadline).status());
  EXPECT_EQ(mirror_->ReadLog().size(), log.size() + 1);
  EXPECT_EQ(server_->ReadLog().size(), 0u);
}

// A mirror that keeps answering with the whole blob is waited for at most half of the read's
// time left; then the server serves the read.
TEST_F(RegistryMirrorsTest, AReadWaitsForAFillingMirrorAtMostHalfItsTimeLeft) {
  modelfs::testing::FakeClock clock;
  RegistryClientOptions o = Options({Mirror(), Server()});
  o.clock = &clock;
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(o));
  ASSERT_OK(mirror_->SetFaults({.ignore_range = true}));
  absl::StatusOr<std::string> got;
  const absl::Time deadline = clock.Now() + absl::Seconds(10);
  const absl::Duration took = AdvanceUntilDone(
      clock, absl::Milliseconds(50),
      [&] { got = client->GetBlobRange(kRepo, *large_digest_, 300, 30, deadline); }, [] {});
  ASSERT_OK(got.status());
  EXPECT_EQ(*got, large_->substr(300, 30));
  EXPECT_GE(took, absl::Seconds(5));
  EXPECT_LT(took, absl::Seconds(7));
  EXPECT_EQ(server_->ReadLog().size(), 1u);
  // Asked at 0, 1, 3 and (when the answers came at once) 5 s: waits of 1 s doubling to 2 s, a
  // handful of requests, not one per poll.
  EXPECT_GE(mirror_->ReadLog().size(), 3u);
  EXPECT_LE(mirror_->ReadLog().size(), 4u);
}

// Bytes the caller found wrong (a chunk that failed verification) make the host that sent
// them avoided for that blob, so the caller's refetch goes to the next host rather than back
// to the one whose bytes were wrong.
TEST_F(RegistryMirrorsTest, AnAnswerTheCallerFindsWrongSendsTheNextReadOfTheBlobToTheServer) {
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({Mirror(), Server()})));
  absl::Status s = client->StreamBlobRange(
      kRepo, *digest_, 0, 100, absl::InfiniteFuture(), [](absl::string_view) {
        return MarkBadAnswer(absl::DataLossError("chunk 0 does not match"));
      });
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("chunk 0 does not match")));
  EXPECT_TRUE(IsBadAnswer(s));
  ASSERT_OK_AND_ASSIGN(std::string got, client->GetBlobRange(kRepo, *digest_, 0, 100));
  EXPECT_EQ(got, blob_->substr(0, 100));
  EXPECT_EQ(mirror_->ReadLog().size(), 1u);
  EXPECT_EQ(server_->ReadLog().size(), 1u);
}

TEST_F(RegistryMirrorsTest, AMirrorThatNeverServesRangesIsSkippedForThatBlobDuringTheCooldown) {
  modelfs::testing::FakeClock clock;
  RegistryClientOptions o = Options({Mirror(), Server()});
  o.clock = &clock;
  o.mirror_fill_wait = absl::ZeroDuration();  // not waited for: the cooldown alone
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(o));
  ASSERT_OK(mirror_->SetFaults({.ignore_range = true}));
  ASSERT_OK_AND_ASSIGN(std::string got, client->GetBlobRange(kRepo, *large_digest_, 300, 30));
  EXPECT_EQ(got, large_->substr(300, 30));
  ASSERT_OK(mirror_->SetFaults({}));
  ASSERT_OK(client->GetBlobRange(kRepo, *large_digest_, 400, 30).status());
  EXPECT_EQ(mirror_->ReadLog().size(), 1u);
  EXPECT_EQ(server_->ReadLog().size(), 2u);
  // Manifests (no range) still go to the mirror first.
  ASSERT_OK(client->GetManifest(kRepo, "v1").status());
  EXPECT_EQ(mirror_->ReadLog().size(), 2u);

  clock.Advance(o.ignored_range_cooldown + absl::Seconds(1));
  ASSERT_OK(client->GetBlobRange(kRepo, *large_digest_, 500, 30).status());
  EXPECT_EQ(mirror_->ReadLog().size(), 3u);
  EXPECT_EQ(server_->ReadLog().size(), 2u);
}

TEST_F(RegistryMirrorsTest, ASingleHostThatIgnoresRangeForALargeBlobIsStillAnError) {
  RegistryHost server = Server();
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({server})));
  ASSERT_OK(server_->SetFaults({.ignore_range = true}));
  EXPECT_THAT(client->GetBlobRange(kRepo, *large_digest_, 0, 10),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("ignored Range")));
}

// A whole-blob answer for a small blob (up to 4 MiB) is read and the range taken from it:
// cutting it short and asking elsewhere would cost about as much.
TEST_F(RegistryMirrorsTest, AWholeAnswerForASmallBlobServesTheRangeFromIt) {
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({Mirror(), Server()})));
  ASSERT_OK(mirror_->SetFaults({.ignore_range = true}));
  ASSERT_OK_AND_ASSIGN(std::string got, client->GetBlobRange(kRepo, *digest_, 40000, 5000));
  EXPECT_EQ(got, blob_->substr(40000, 5000));
  ASSERT_OK_AND_ASSIGN(got, client->GetBlobRange(kRepo, *digest_, 60000, blob_->size() - 60000));
  EXPECT_EQ(got, blob_->substr(60000));
  EXPECT_EQ(mirror_->ReadLog().size(), 2u);
  EXPECT_EQ(server_->ReadLog().size(), 0u);
}

// The sink says when it has the range (BodyNeed::kDone): the rest of the whole blob is not read,
// and the cut-off answer is the range's, not an error or a retry.
TEST_F(RegistryMirrorsTest, AWholeAnswerForASmallBlobIsCutOffOnceTheRangeIsIn) {
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({Mirror(), Server()})));
  ASSERT_OK(mirror_->SetFaults({.ignore_range = true}));
  ASSERT_OK_AND_ASSIGN(std::string got, client->GetBlobRange(kRepo, *digest_, 0, 10));
  EXPECT_EQ(got, blob_->substr(0, 10));
  EXPECT_LT(client->stats().bytes_received, blob_->size());
  EXPECT_EQ(client->stats().retries, 0u);
  EXPECT_EQ(mirror_->ReadLog().size(), 1u);
  EXPECT_EQ(server_->ReadLog().size(), 0u);
}

// A mirror gets only the credential stored under its own host name, never the registry's.
TEST_F(RegistryMirrorsTest, TheRegistryCredentialGoesToTheServerNotToMirrors) {
  TempDir certs;
  std::filesystem::create_directories(certs.Join(kRegistry));
  certs.WriteFile(absl::StrCat(kRegistry, "/hosts.toml"),
                  absl::StrCat("server = \"http://127.0.0.1:", server_->port(), "\"\n",
                               "[host.\"http://127.0.0.1:", mirror_->port(), "\"]\n",
                               "  capabilities = [\"pull\", \"resolve\"]\n"));
  HostsOptions hosts;
  hosts.certs_dir = certs.path().string();
  ASSERT_OK_AND_ASSIGN(CredentialStore creds, CredentialStore::FromDockerConfigJson(
                                                  absl::StrCat(R"({"auths":{")", kRegistry,
                                                               R"(":{"registrytoken":"T1"}}})"),
                                                  "config.json"));
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::ForRegistry(kRegistry, HostCapability::kPull,
                                                                hosts, creds, Options({})));
  ASSERT_EQ(client->endpoints().size(), 2u);
  EXPECT_TRUE(client->endpoints()[0].mirror);
  ASSERT_OK(client->GetBlobRange(kRepo, *digest_, 0, 4).status());
  ASSERT_OK(mirror_->SetFaults({.fail_first = 1, .fail_status = 503}));
  ASSERT_OK(client->GetBlobRange(kRepo, *digest_, 4, 4).status());
  std::vector<RequestLogEntry> m = mirror_->ReadLog();
  std::vector<RequestLogEntry> s = server_->ReadLog();
  ASSERT_EQ(m.size(), 2u);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_FALSE(m[0].auth);
  EXPECT_FALSE(m[1].auth);
  EXPECT_TRUE(s[0].auth);
}

TEST_F(RegistryMirrorsTest, APushClientTalksOnlyToTheFirstHostWithPush) {
  TempDir certs;
  std::filesystem::create_directories(certs.Join(kRegistry));
  certs.WriteFile(absl::StrCat(kRegistry, "/hosts.toml"),
                  absl::StrCat("server = \"http://127.0.0.1:", server_->port(), "\"\n",
                               "[host.\"http://127.0.0.1:", mirror_->port(), "\"]\n",
                               "  capabilities = [\"pull\", \"resolve\"]\n"));
  HostsOptions hosts;
  hosts.certs_dir = certs.path().string();
  ASSERT_OK_AND_ASSIGN(auto client,
                       RegistryClient::ForRegistry(kRegistry, HostCapability::kPush, hosts,
                                                   CredentialStore(), Options({})));
  ASSERT_EQ(client->endpoints().size(), 1u);
  EXPECT_EQ(client->endpoints()[0].host, absl::StrCat("127.0.0.1:", server_->port()));
  // Its reads (a push checks what the registry has) go to that host too.
  ASSERT_OK_AND_ASSIGN(bool exists, client->BlobExists(kRepo, *digest_));
  EXPECT_TRUE(exists);
  EXPECT_EQ(mirror_->ReadLog().size(), 0u);
  EXPECT_EQ(server_->ReadLog().size(), 1u);
}

TEST_F(RegistryMirrorsTest, NoHostWithTheCapabilityIsFailedPrecondition) {
  RegistryHost m = Mirror(/*resolve=*/false);
  ASSERT_OK_AND_ASSIGN(auto client, RegistryClient::Create(Options({m})));
  EXPECT_THAT(client->GetManifest(kRepo, "v1"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("resolve")));
  EXPECT_THAT(client->PutManifest(kRepo, "v1", *manifest_, kMediaTypeOciManifest),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("push")));
  EXPECT_EQ(mirror_->ReadLog().size(), 0u);
}

}  // namespace
}  // namespace modelfs
