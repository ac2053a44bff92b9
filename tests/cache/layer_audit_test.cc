// LayerAudit: the whole-layer check of each mode, the seal, the audit and quarantine.
#include "tests/cache/blob_cache_fixture.h"

namespace modelfs {
namespace {

TEST_F(BlobCacheTest, WholeLayerModeServesBytesAfterTheDigestMatches) {
  auto cache = Open();
  const std::string blob = RandomBytes(40 * 1024 + 5, 11);
  Digest d = AddWhole(*cache, blob, VerifyMode::kWholeLayer);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 30000, 5000));
  EXPECT_EQ(got, blob.substr(30000, 5000));
  ASSERT_OK_AND_ASSIGN(auto info, cache->GetLayerInfo(d));
  EXPECT_TRUE(info.whole_verified);
  EXPECT_EQ(remote_.bytes_served(), blob.size());
}

TEST_F(BlobCacheTest, WholeLayerModeCorruptionQuarantinesTheLayer) {
  auto cache = Open();
  const std::string blob = RandomBytes(40 * 1024, 12);
  Digest d = AddWhole(*cache, blob, VerifyMode::kWholeLayer);
  remote_.CorruptByte(d, 39 * 1024);
  EXPECT_THAT(cache->Read(d, 0, 10), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(d.str())));
  remote_.Heal();
  EXPECT_THAT(cache->Read(d, 20000, 10),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("quarantined")));
  EXPECT_EQ(cache->stats().quarantined_layers, 1u);
  EXPECT_EQ(cache->stats().cached_bytes, 0u);
  EXPECT_THAT(Logged(), AllOf(HasSubstr("quarantined layer"), HasSubstr(d.str())));
  EXPECT_FALSE(std::filesystem::exists(dir_.Join("cache") / "blobs" / "sha256" /
                                       (std::string(d.hex()) + ".data")));
}

TEST_F(BlobCacheTest, ChunkModeLayerWhoseDigestDoesNotMatchIsQuarantinedAfterTheFullCheck) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * 1024, 13);
  Digest lie = Digest::Of("not these bytes");
  remote_.AddBlobAs(lie, blob);
  LayerSpec spec;
  spec.digest = lie;
  spec.size = blob.size();
  spec.index = MakeIndex(lie, blob, kChunk);
  spec.model_ref = "m";
  ASSERT_OK(cache->RegisterLayer(spec));
  // Every chunk matches its index entry, so reads succeed until the layer is complete.
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(lie, 0, 3 * kChunk));
  EXPECT_EQ(got, blob.substr(0, 3 * kChunk));
  ASSERT_OK(cache->Prefetch(lie, PrefetchPolicy::kAll));
  ASSERT_TRUE(Idle(*cache));
  EXPECT_THAT(cache->Read(lie, 0, 10),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("quarantined")));
  EXPECT_EQ(cache->stats().quarantined_layers, 1u);
}

TEST_F(BlobCacheTest, ChunkModeLayerPassesTheFullCheckWhenComplete) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * 1024, 14);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, blob.size()));
  ASSERT_TRUE(Idle(*cache));
  ASSERT_OK_AND_ASSIGN(auto info, cache->GetLayerInfo(d));
  EXPECT_TRUE(info.whole_verified);
  EXPECT_TRUE(info.audited);
  EXPECT_FALSE(info.quarantined);
}

TEST_F(BlobCacheTest, InsecureStreamServesUnverifiedBytesThenQuarantinesOnMismatch) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * 1024, 15);
  Digest d = AddWhole(*cache, blob, VerifyMode::kInsecureStream);
  remote_.CorruptByte(d, 10);
  remote_.Hold(/*min_offset=*/kChunk);  // the rest of the layer waits, so no check runs yet
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, 20));
  remote_.Release();
  std::string want = blob.substr(0, 20);
  want[10] ^= 0xff;
  EXPECT_EQ(got, want);  // the opt-in: bytes served before verification
  ASSERT_TRUE(Idle(*cache));
  EXPECT_THAT(cache->Read(d, 0, 20),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("quarantined")));
}

// The whole-layer audit of a chunk-mode layer is a second SHA-256 pass; it waits until reads
// are idle. A read that is waiting on the network is a load in progress, not idleness.
TEST_F(BlobCacheTest, WholeLayerAuditWaitsWhileAReadIsBlockedOnTheNetwork) {
  CacheOptions o = Options();
  o.verify_when_idle = absl::Milliseconds(200);
  auto cache = Open(o);
  const std::string first = RandomBytes(3 * kChunk, 26);
  const std::string second = RandomBytes(3 * kChunk, 27);
  Digest a = AddChunked(*cache, first);
  Digest b = AddChunked(*cache, second);
  ASSERT_OK(cache->Read(a, 0, first.size()));  // every chunk of `a` verified: audit queued
  remote_.HoldOnly(b);
  remote_.Hold();
  std::thread blocked([&] { EXPECT_OK(cache->Read(b, 0, kChunk)); });
  ASSERT_TRUE(remote_.WaitForHeld(1));
  absl::SleepFor(absl::Milliseconds(600));  // three idle windows, with the read still waiting
  EXPECT_FALSE(cache->GetLayerInfo(a)->audited);
  remote_.Release();
  blocked.join();
  ASSERT_TRUE(Idle(*cache));
  EXPECT_TRUE(cache->GetLayerInfo(a)->audited);
}

TEST_F(BlobCacheTest, ALayerIsSealedForPassthroughAsSoonAsEveryChunkIsVerifiedBeforeItsAudit) {
  CacheOptions o = Options();
  o.verify_when_idle = absl::Milliseconds(200);
  auto cache = Open(o);
  const std::string first = RandomBytes(3 * kChunk, 28);
  const std::string second = RandomBytes(3 * kChunk, 29);
  Digest a = AddChunked(*cache, first);
  Digest b = AddChunked(*cache, second);
  ASSERT_OK(cache->Read(a, 0, first.size()));
  remote_.HoldOnly(b);
  remote_.Hold();
  std::thread blocked([&] { EXPECT_OK(cache->Read(b, 0, kChunk)); });
  ASSERT_TRUE(remote_.WaitForHeld(1));
  // The audit waits for the blocked read; the seal does not.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!cache->GetLayerInfo(a)->whole_verified && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_OK_AND_ASSIGN(auto info, cache->GetLayerInfo(a));
  EXPECT_TRUE(info.whole_verified);
  EXPECT_FALSE(info.audited);
  const int fd = cache->OpenVerifiedBlob(a, 0, first.size());
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
  remote_.Release();
  blocked.join();
  ASSERT_TRUE(Idle(*cache));
  EXPECT_TRUE(cache->GetLayerInfo(a)->audited);
}

TEST_F(BlobCacheTest, WithTheAuditOffALayerIsSealedAndNeverRehashed) {
  CacheOptions o = Options();
  o.audit = false;
  auto cache = Open(o);
  // A chunk index that matches every chunk of a layer whose digest it does not match: only
  // the audit could tell.
  const std::string blob = RandomBytes(4 * kChunk, 30);
  Digest lie = Digest::Of("not these bytes either");
  remote_.AddBlobAs(lie, blob);
  LayerSpec spec;
  spec.digest = lie;
  spec.size = blob.size();
  spec.index = MakeIndex(lie, blob, kChunk);
  spec.model_ref = "m";
  ASSERT_OK(cache->RegisterLayer(spec));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(lie, 0, blob.size()));
  EXPECT_EQ(got, blob);
  ASSERT_TRUE(Idle(*cache));
  ASSERT_OK_AND_ASSIGN(auto info, cache->GetLayerInfo(lie));
  EXPECT_TRUE(info.whole_verified);
  EXPECT_FALSE(info.audited);
  EXPECT_FALSE(info.quarantined);
  EXPECT_EQ(cache->stats().verification_failures, 0u);
}

}  // namespace
}  // namespace modelfs
