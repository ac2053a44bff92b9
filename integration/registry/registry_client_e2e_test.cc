// End-to-end tests of RegistryClient against a real docker-registry (Distribution 2.8),
// directly and through a fault-injecting proxy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/oci/descriptor.h"
#include "core/registry/registry_client.h"
#include "integration/registry/blob_round_trip.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::FaultProxy;
using ::modelfs::testing::FaultProxyOptions;
using ::modelfs::testing::Pull;
using ::modelfs::testing::Push;
using ::modelfs::testing::RegistryFixture;
using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

std::string Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

template <typename T>
T Get(absl::StatusOr<T> s) {
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : T{};
}

std::unique_ptr<RegistryClient> ClientFor(const std::string& host_port,
                                          RegistryClientOptions o = {}) {
  o.registry = host_port;
  o.endpoint.scheme = "http";
  o.endpoint.host = host_port;
  o.initial_backoff = absl::Milliseconds(10);
  o.max_backoff = absl::Milliseconds(200);
  o.retry_deadline = absl::Seconds(20);
  auto c = RegistryClient::Create(std::move(o));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(c).value();
}

// An OCI image manifest naming a pushed config and layer.
std::string ManifestFor(const std::string& config, const std::string& layer,
                        const std::string& subject_json = "") {
  nlohmann::json m = {{"schemaVersion", 2},
                      {"mediaType", kMediaTypeOciManifest},
                      {"config",
                       {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                        {"digest", Digest::Of(config).str()},
                        {"size", config.size()}}},
                      {"layers",
                       {{{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                         {"digest", Digest::Of(layer).str()},
                         {"size", layer.size()}}}}};
  if (!subject_json.empty()) m["subject"] = nlohmann::json::parse(subject_json);
  return m.dump();
}

class RegistryClientE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto f = RegistryFixture::Start();
    ASSERT_TRUE(f.ok()) << f.status();
    registry_ = std::move(f).value().release();
  }
  static void TearDownTestSuite() {
    delete registry_;
    registry_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(registry_, nullptr);
    client_ = ClientFor(registry_->host_port());
  }

  // Pushes config + layer + manifest under `tag`; returns the manifest digest and bytes.
  std::pair<Digest, std::string> PushImage(const std::string& repo, const std::string& tag,
                                           uint32_t seed, const std::string& subject = "") {
    std::string config = absl::StrCat("{\"seed\":", seed, "}");
    std::string layer = Bytes(1000 + seed, seed);
    EXPECT_OK(Push(*client_, repo, config));
    EXPECT_OK(Push(*client_, repo, layer));
    std::string manifest = ManifestFor(config, layer, subject);
    auto d = client_->PutManifest(repo, tag, manifest, kMediaTypeOciManifest);
    EXPECT_TRUE(d.ok()) << d.status();
    return {d.ok() ? *d : Digest(), manifest};
  }

  static RegistryFixture* registry_;
  std::unique_ptr<RegistryClient> client_;
};
RegistryFixture* RegistryClientE2E::registry_ = nullptr;

TEST_F(RegistryClientE2E, PushedBlobComesBackByteForByte) {
  std::string blob = Bytes(200'000, 1);
  ASSERT_OK(Push(*client_, "e2e/roundtrip", blob));
  ASSERT_OK_AND_ASSIGN(std::string back, Pull(*client_, "e2e/roundtrip", Digest::Of(blob)));
  EXPECT_EQ(back, blob);
}

TEST_F(RegistryClientE2E, HeadBlobReportsTheSize) {
  std::string blob = Bytes(12'345, 2);
  ASSERT_OK(Push(*client_, "e2e/head", blob));
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> size,
                       client_->HeadBlob("e2e/head", Digest::Of(blob)));
  EXPECT_EQ(size, std::optional<uint64_t>(12'345));
  EXPECT_EQ(Get(client_->BlobExists("e2e/head", Digest::Of(blob))), true);
}

TEST_F(RegistryClientE2E, HeadOfAMissingBlobIsNullopt) {
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> size,
                       client_->HeadBlob("e2e/head", Digest::Of("never pushed")));
  EXPECT_FALSE(size.has_value());
}

TEST_F(RegistryClientE2E, GetOfAMissingBlobIsNotFoundNamingDigestAndRepo) {
  Digest d = Digest::Of("missing blob");
  EXPECT_THAT(Pull(*client_, "e2e/missing", d),
              StatusIs(absl::StatusCode::kNotFound,
                       ::testing::AllOf(HasSubstr(d.str()), HasSubstr("e2e/missing"),
                                        HasSubstr("HTTP 404"), HasSubstr("BLOB_UNKNOWN"))));
}

TEST_F(RegistryClientE2E, RangeReadReturnsExactlyTheRequestedBytes) {
  std::string blob = Bytes(100'000, 3);
  ASSERT_OK(Push(*client_, "e2e/range", blob));
  ASSERT_OK_AND_ASSIGN(std::string part,
                       client_->GetBlobRange("e2e/range", Digest::Of(blob), 4'096, 10'000));
  EXPECT_EQ(part, blob.substr(4'096, 10'000));
  ASSERT_OK_AND_ASSIGN(std::string tail,
                       client_->GetBlobRange("e2e/range", Digest::Of(blob), 99'990, 10));
  EXPECT_EQ(tail, blob.substr(99'990));
}

TEST_F(RegistryClientE2E, RangePastTheEndIsOutOfRange) {
  std::string blob = Bytes(1'000, 4);
  ASSERT_OK(Push(*client_, "e2e/range", blob));
  EXPECT_THAT(client_->GetBlobRange("e2e/range", Digest::Of(blob), 5'000, 10),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr(Digest::Of(blob).str())));
}

TEST_F(RegistryClientE2E, RangeReadAfterItsDeadlineIsDeadlineExceeded) {
  std::string blob = Bytes(1'000, 4);
  ASSERT_OK(Push(*client_, "e2e/range", blob));
  EXPECT_THAT(
      client_->GetBlobRange("e2e/range", Digest::Of(blob), 0, 10, absl::Now() - absl::Seconds(1)),
      StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("deadline")));
}

TEST_F(RegistryClientE2E, ChunkedUploadSendsEveryByteOnce) {
  RegistryClientOptions o;
  o.monolithic_upload_limit = 64 << 10;
  o.upload_chunk_size = 100'000;
  auto client = ClientFor(registry_->host_port(), o);
  std::string blob = Bytes(350'001, 5);
  ASSERT_OK(Push(*client, "e2e/chunked", blob));
  EXPECT_EQ(client->stats().bytes_sent, blob.size());
  // POST + 4 PATCH + PUT.
  EXPECT_EQ(client->stats().requests, 6u);
  ASSERT_OK_AND_ASSIGN(std::string back, Pull(*client_, "e2e/chunked", Digest::Of(blob)));
  EXPECT_EQ(back, blob);
}

TEST_F(RegistryClientE2E, ChunkedUploadStreamsFromAFileDescriptor) {
  RegistryClientOptions o;
  o.monolithic_upload_limit = 0;
  o.upload_chunk_size = 64 << 10;
  auto client = ClientFor(registry_->host_port(), o);
  std::string blob = Bytes(200'000, 6);
  std::string path = registry_->work_dir() + "/upload-source";
  std::ofstream(path, std::ios::binary) << blob;
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  absl::Status s = client->PushBlob("e2e/fd", Digest::Of(blob), blob.size(), BlobReadAtFd(fd));
  ::close(fd);
  ASSERT_OK(s);
  EXPECT_EQ(Get(client->HeadBlob("e2e/fd", Digest::Of(blob))),
            std::optional<uint64_t>(blob.size()));
}

TEST_F(RegistryClientE2E, UploadWithTheWrongDigestIsDataLoss) {
  std::string blob = Bytes(1'000, 7);
  Digest wrong = Digest::Of("something else");
  EXPECT_THAT(client_->PushBlob("e2e/wrong", wrong, blob.size(),
                                BlobReadAtString(std::make_shared<const std::string>(blob))),
              StatusIs(absl::StatusCode::kDataLoss,
                       ::testing::AllOf(HasSubstr(wrong.str()), HasSubstr("DIGEST_INVALID"))));
}

TEST_F(RegistryClientE2E, UploadFromAShortSourceIsOutOfRange) {
  std::string blob = Bytes(1'000, 8);
  EXPECT_THAT(client_->PushBlob("e2e/short", Digest::Of(blob), 2'000,
                                BlobReadAtString(std::make_shared<const std::string>(blob))),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("ended at byte 1000")));
}

TEST_F(RegistryClientE2E, MountAcrossRepositoriesUploadsNothing) {
  std::string blob = Bytes(300'000, 9);
  ASSERT_OK(Push(*client_, "e2e/mount-from", blob));
  auto client = ClientFor(registry_->host_port());
  ASSERT_OK_AND_ASSIGN(bool mounted,
                       client->MountBlob("e2e/mount-to", Digest::Of(blob), "e2e/mount-from"));
  EXPECT_TRUE(mounted);
  EXPECT_EQ(client->stats().bytes_sent, 0u);
  EXPECT_EQ(Get(client->HeadBlob("e2e/mount-to", Digest::Of(blob))),
            std::optional<uint64_t>(blob.size()));
}

TEST_F(RegistryClientE2E, MountFromARepositoryWithoutTheBlobReturnsFalse) {
  Digest d = Digest::Of("not anywhere");
  ASSERT_OK_AND_ASSIGN(bool mounted, client_->MountBlob("e2e/mount-to", d, "e2e/empty-source"));
  EXPECT_FALSE(mounted);
}

TEST_F(RegistryClientE2E, ManifestPutThenGetByTagAndDigest) {
  auto [digest, manifest] = PushImage("e2e/manifest", "v1", 10);
  EXPECT_EQ(digest, Digest::Of(manifest));
  ASSERT_OK_AND_ASSIGN(ManifestResult by_tag, client_->GetManifest("e2e/manifest", "v1"));
  EXPECT_EQ(by_tag.bytes, manifest);
  EXPECT_EQ(by_tag.media_type, kMediaTypeOciManifest);
  EXPECT_EQ(by_tag.digest, digest);
  ASSERT_OK_AND_ASSIGN(ManifestResult by_digest,
                       client_->GetManifest("e2e/manifest", digest.str()));
  EXPECT_EQ(by_digest.bytes, manifest);
  ASSERT_OK_AND_ASSIGN(ManifestHead head, client_->HeadManifest("e2e/manifest", "v1"));
  EXPECT_EQ(head.digest, digest);
  EXPECT_EQ(head.size, manifest.size());
  EXPECT_EQ(head.media_type, kMediaTypeOciManifest);
}

TEST_F(RegistryClientE2E, UnknownTagIsNotFound) {
  PushImage("e2e/manifest", "v1", 10);
  EXPECT_THAT(client_->GetManifest("e2e/manifest", "nope"),
              StatusIs(absl::StatusCode::kNotFound,
                       ::testing::AllOf(HasSubstr("MANIFEST_UNKNOWN"), HasSubstr("nope"))));
}

TEST_F(RegistryClientE2E, TamperedManifestOnDiskIsDataLoss) {
  auto [digest, manifest] = PushImage("e2e/tamper", "v1", 11);
  std::string path = registry_->BlobDataPath(digest);
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  // Still valid JSON (the registry parses it), but one digit of the layer size differs.
  std::string tampered = manifest;
  size_t at = tampered.rfind("\"size\":") + 7;
  tampered[at] = tampered[at] == '9' ? '8' : static_cast<char>(tampered[at] + 1);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << tampered;
  EXPECT_THAT(client_->GetManifest("e2e/tamper", digest.str()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(digest.str())));
}

TEST_F(RegistryClientE2E, ReferrersFallBackToTheDigestTag) {
  auto [subject, subject_bytes] = PushImage("e2e/referrers", "model", 12);
  nlohmann::json subject_desc = {{"mediaType", kMediaTypeOciManifest},
                                 {"digest", subject.str()},
                                 {"size", subject_bytes.size()}};
  auto [referrer, referrer_bytes] = PushImage("e2e/referrers", "volume", 13, subject_desc.dump());
  nlohmann::json desc = {{"mediaType", kMediaTypeOciManifest},
                         {"digest", referrer.str()},
                         {"size", referrer_bytes.size()},
                         {"artifactType", "application/vnd.modelfs.volume.v1"}};
  ASSERT_OK(client_->PutReferrersFallback("e2e/referrers", subject, desc.dump()));
  ASSERT_OK(client_->PutReferrersFallback("e2e/referrers", subject, desc.dump()));  // idempotent

  ASSERT_OK_AND_ASSIGN(std::string index, client_->GetReferrers("e2e/referrers", subject));
  nlohmann::json doc = nlohmann::json::parse(index);
  ASSERT_EQ(doc["manifests"].size(), 1u);
  EXPECT_EQ(doc["manifests"][0]["digest"], referrer.str());
  EXPECT_EQ(doc["mediaType"], kMediaTypeOciIndex);

  ASSERT_OK_AND_ASSIGN(std::string filtered,
                       client_->GetReferrers("e2e/referrers", subject, "application/other"));
  EXPECT_EQ(nlohmann::json::parse(filtered)["manifests"].size(), 0u);

  ASSERT_OK_AND_ASSIGN(
      ManifestResult tag,
      client_->GetManifest("e2e/referrers", "sha256-" + std::string(subject.hex())));
  EXPECT_EQ(tag.media_type, kMediaTypeOciIndex);
}

TEST_F(RegistryClientE2E, ReferrersOfASubjectWithoutAnyAreAnEmptyIndex) {
  auto [subject, unused] = PushImage("e2e/referrers-none", "x", 14);
  ASSERT_OK_AND_ASSIGN(std::string index, client_->GetReferrers("e2e/referrers-none", subject));
  EXPECT_EQ(nlohmann::json::parse(index)["manifests"].size(), 0u);
}

// --- through the fault proxy ------------------------------------------------------------------

class FaultE2E : public RegistryClientE2E {
 protected:
  std::unique_ptr<FaultProxy> StartProxy(FaultProxyOptions o) {
    auto p = FaultProxy::Start(registry_->host_port(), o);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(p).value() : nullptr;
  }
};

TEST_F(FaultE2E, ServerErrorsAreRetriedUntilTheRequestSucceeds) {
  PushImage("e2e/retry", "v1", 20);
  FaultProxyOptions o;
  o.fail_first = 2;
  o.fail_status = 503;
  auto proxy = StartProxy(o);
  ASSERT_NE(proxy, nullptr);
  auto client = ClientFor(proxy->host_port());
  ASSERT_OK(client->GetManifest("e2e/retry", "v1"));
  EXPECT_EQ(client->stats().retries, 2u);
  EXPECT_EQ(Get(proxy->Stat("injected")), 2);
}

TEST_F(FaultE2E, TooManyRequestsHonoursRetryAfter) {
  std::string blob = Bytes(5'000, 21);
  ASSERT_OK(Push(*client_, "e2e/retry", blob));
  FaultProxyOptions o;
  o.fail_first = 1;
  o.fail_status = 429;
  o.retry_after_seconds = 1;
  auto proxy = StartProxy(o);
  ASSERT_NE(proxy, nullptr);
  auto client = ClientFor(proxy->host_port());
  ASSERT_OK_AND_ASSIGN(std::string back, Pull(*client, "e2e/retry", Digest::Of(blob)));
  EXPECT_EQ(back, blob);
  EXPECT_EQ(client->stats().retries, 1u);
}

// A body that stops after megabytes is cut once no byte came for the stall timeout (libcurl's
// low-speed check alone averages over the last seconds, and so let it run several more), as
// retryable kUnavailable; a cut body or a reset is kUnavailable too, never short bytes.
TEST_F(FaultE2E, ARangeBodyThatStallsAfterMegabytesIsCutAfterTheStallTimeout) {
  std::string blob = Bytes(4 << 20, 31);
  ASSERT_OK(Push(*client_, "e2e/stall", blob));
  FaultProxyOptions o;
  o.blob_fault = FaultProxyOptions::BlobFault::kStall;
  o.blob_fault_bytes = 3 << 20;
  auto proxy = StartProxy(o);
  ASSERT_NE(proxy, nullptr);
  RegistryClientOptions co;
  co.stall_timeout = absl::Seconds(1);
  auto client = ClientFor(proxy->host_port(), co);
  const absl::Time start = absl::Now();
  auto got = client->GetBlobRange("e2e/stall", Digest::Of(blob), 0, blob.size(),
                                  absl::Now() + absl::Seconds(30));
  const absl::Duration took = absl::Now() - start;
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("stalled")));
  EXPECT_LT(took, absl::Seconds(3)) << "cut after " << took;
  for (auto fault :
       {FaultProxyOptions::BlobFault::kTruncate, FaultProxyOptions::BlobFault::kReset}) {
    ASSERT_OK(proxy->SetBlobFault(fault, /*first=*/1));
    EXPECT_THAT(client->GetBlobRange("e2e/stall", Digest::Of(blob), 0, blob.size(),
                                     absl::Now() + absl::Seconds(30)),
                StatusIs(absl::StatusCode::kUnavailable))
        << BlobFaultName(fault);
  }
  ASSERT_OK_AND_ASSIGN(std::string back,
                       client->GetBlobRange("e2e/stall", Digest::Of(blob), 0, blob.size(),
                                            absl::Now() + absl::Seconds(30)));
  EXPECT_TRUE(back == blob);
}

TEST_F(FaultE2E, ClientErrorsAreNeverRetried) {
  FaultProxyOptions o;
  o.fail_first = 1;
  o.fail_status = 400;
  auto proxy = StartProxy(o);
  ASSERT_NE(proxy, nullptr);
  auto client = ClientFor(proxy->host_port());
  EXPECT_THAT(
      client->GetManifest("e2e/retry", "v1"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               ::testing::AllOf(HasSubstr("HTTP 400"), HasSubstr("INJECTED: fault proxy"))));
  EXPECT_EQ(client->stats().retries, 0u);
}

TEST_F(FaultE2E, PersistentServerErrorsGiveUpAsUnavailable) {
  FaultProxyOptions o;
  o.fail_first = 1000;
  o.fail_status = 502;
  auto proxy = StartProxy(o);
  ASSERT_NE(proxy, nullptr);
  RegistryClientOptions co;
  co.max_attempts = 3;
  auto client = ClientFor(proxy->host_port(), co);
  EXPECT_THAT(client->GetManifest("e2e/retry", "v1"),
              StatusIs(absl::StatusCode::kUnavailable,
                       ::testing::AllOf(HasSubstr("HTTP 502"), HasSubstr("after 3 attempts"))));
  EXPECT_EQ(client->stats().retries, 2u);
}

TEST_F(FaultE2E, UploadRestartsAfterAServerError) {
  FaultProxyOptions o;
  o.fail_first = 1;
  o.fail_status = 500;
  o.fail_path = "/blobs/uploads/";
  auto proxy = StartProxy(o);
  ASSERT_NE(proxy, nullptr);
  auto client = ClientFor(proxy->host_port());
  std::string blob = Bytes(10'000, 22);
  ASSERT_OK(Push(*client, "e2e/retry-upload", blob));
  EXPECT_EQ(client->stats().retries, 1u);
  ASSERT_OK_AND_ASSIGN(std::string back, Pull(*client_, "e2e/retry-upload", Digest::Of(blob)));
  EXPECT_EQ(back, blob);
}

// A whole-blob answer to a range request: for a large blob (over 4 MiB) an error, for a small
// one the range is taken from it.
TEST_F(FaultE2E, ARegistryThatIgnoresRangeForALargeBlobIsFailedPrecondition) {
  std::string blob = Bytes(5 << 20, 23);
  ASSERT_OK(Push(*client_, "e2e/norange", blob));
  FaultProxyOptions o;
  o.ignore_range = true;
  auto proxy = StartProxy(o);
  ASSERT_NE(proxy, nullptr);
  auto client = ClientFor(proxy->host_port());
  EXPECT_THAT(client->GetBlobRange("e2e/norange", Digest::Of(blob), 10, 10),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("registry ignored Range")));
}

TEST_F(FaultE2E, ARegistryThatIgnoresRangeForASmallBlobServesTheRangeFromTheWholeAnswer) {
  std::string blob = Bytes(50'000, 25);
  ASSERT_OK(Push(*client_, "e2e/norange-small", blob));
  FaultProxyOptions o;
  o.ignore_range = true;
  auto proxy = StartProxy(o);
  ASSERT_NE(proxy, nullptr);
  auto client = ClientFor(proxy->host_port());
  ASSERT_OK_AND_ASSIGN(std::string got,
                       client->GetBlobRange("e2e/norange-small", Digest::Of(blob), 10, 10));
  EXPECT_EQ(got, blob.substr(10, 10));
}

TEST_F(FaultE2E, BlobRedirectsAreFollowedWithoutAuthorization) {
  std::string blob = Bytes(70'000, 24);
  ASSERT_OK(Push(*client_, "e2e/redirect", blob));
  FaultProxyOptions o;
  o.redirect_blobs = true;
  auto proxy = StartProxy(o);
  ASSERT_NE(proxy, nullptr);
  // A registry token is sent on every registry request; the storage host refuses any request
  // that still carries it.
  RegistryClientOptions co;
  co.credential = Credential{"", "", "", "canary-token"};
  auto client = ClientFor(proxy->host_port(), co);
  ASSERT_OK_AND_ASSIGN(std::string back, Pull(*client, "e2e/redirect", Digest::Of(blob)));
  EXPECT_EQ(back, blob);
  ASSERT_OK_AND_ASSIGN(std::string part,
                       client->GetBlobRange("e2e/redirect", Digest::Of(blob), 1'000, 2'000));
  EXPECT_EQ(part, blob.substr(1'000, 2'000));
  EXPECT_EQ(Get(proxy->Stat("storage_with_auth")), 0);
}

TEST_F(FaultE2E, RangeReadsReuseTheRedirectAndReResolveWhenItExpires) {
  std::string blob = Bytes(70'000, 25);
  ASSERT_OK(Push(*client_, "e2e/redirect", blob));
  FaultProxyOptions o;
  o.redirect_blobs = true;
  o.storage_uses = 2;
  auto proxy = StartProxy(o);
  ASSERT_NE(proxy, nullptr);
  auto client = ClientFor(proxy->host_port());
  Digest d = Digest::Of(blob);
  for (uint64_t off : {0u, 10'000u, 20'000u}) {
    ASSERT_OK_AND_ASSIGN(std::string part, client->GetBlobRange("e2e/redirect", d, off, 100));
    EXPECT_EQ(part, blob.substr(off, 100));
  }
  // Read 1 asks the registry (redirect 1, use 1); read 2 goes straight to the remembered URL
  // (use 2); read 3 finds it expired (403) and asks the registry again (redirect 2).
  EXPECT_EQ(Get(proxy->Stat("redirects")), 2);
  EXPECT_EQ(Get(proxy->Stat("storage_expired")), 1);
}

}  // namespace
}  // namespace modelfs
