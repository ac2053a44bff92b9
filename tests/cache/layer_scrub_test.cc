// LayerScrub: sealed layers hashed again in the background, a changed layer renewed (fetched
// again into a new data file), the audit of layers never audited.
#include "tests/cache/blob_cache_fixture.h"

namespace modelfs {
namespace {

// --- The scrub: sealed layers re-verified in the background ---

// A sealed layer whose data file changed after every chunk was verified (bit rot, a bad disk,
// a process writing to the cache): nothing re-hashes it until the scrub, which renews it.
class ScrubTest : public BlobCacheTest {
 protected:
  // A chunk-mode layer of 16 chunks, read whole, sealed, then byte 5 * kChunk + 3 of its data
  // file flipped.
  Digest SealedAndChanged(BlobCache& cache, const std::string& blob) {
    Digest d = AddChunked(cache, blob);
    EXPECT_OK(cache.Read(d, 0, blob.size()).status());
    EXPECT_TRUE(Idle(cache));
    EXPECT_TRUE(cache.GetLayerInfo(d)->whole_verified);
    WriteDataFile(d, kAt, static_cast<char>(blob[kAt] ^ 0x01));
    return d;
  }
  static constexpr uint64_t kAt = 5 * kChunk + 3;
};

TEST_F(ScrubTest, TheScrubCountsASealedLayerWhoseFileChangedAsFoundAndRenewed) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * kChunk, 40);
  Digest d = SealedAndChanged(*cache, blob);
  EXPECT_EQ(cache->ScrubOnce(), 1);
  EXPECT_EQ(cache->stats().scrub_failures, 1u);
  EXPECT_EQ(cache->stats().scrub_repairs, 1u);
  EXPECT_EQ(cache->stats().quarantined_layers, 0u);
  EXPECT_FALSE(cache->GetLayerInfo(d)->quarantined);
}

TEST_F(ScrubTest, TheScrubLogsTheDigestAndByteRangeOfAChange) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * kChunk, 41);
  Digest d = SealedAndChanged(*cache, blob);
  cache->ScrubOnce();
  EXPECT_THAT(Logged(), AllOf(HasSubstr("level=error component=cache msg=\"the scrub found the "
                                        "layer changed on disk"),
                              HasSubstr("digest=" + d.str() + " range=20480-24575"),
                              HasSubstr("chunk 5 "), HasSubstr("(bytes [20480, 24576))"),
                              HasSubstr("fetched again into a new data file")));
}

TEST_F(ScrubTest, AfterTheScrubFoundAChangeAReadGetsTheRightBytesFetchedAgain) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * kChunk, 42);
  Digest d = SealedAndChanged(*cache, blob);
  const int before = remote_.requests();
  cache->ScrubOnce();
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 5 * kChunk, kChunk));
  EXPECT_EQ(got, blob.substr(5 * kChunk, kChunk));
  EXPECT_GT(remote_.requests(), before);
}

TEST_F(ScrubTest, ASealedFileTruncatedWhileMountedIsFoundAndReadRightAfterwards) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * kChunk, 47);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, blob.size()).status());
  ASSERT_TRUE(Idle(*cache));
  ASSERT_EQ(truncate(DataPath(d).c_str(), 7 * kChunk), 0);
  cache->ScrubOnce();
  EXPECT_EQ(cache->stats().scrub_failures, 1u);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, blob.size()));
  EXPECT_EQ(got, blob);
}

TEST_F(ScrubTest, TheChangedFileIsUnlinkedAndANewOneTakesItsPlace) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * kChunk, 50);
  Digest d = SealedAndChanged(*cache, blob);
  const std::filesystem::path data =
      dir_.Join("cache") / "blobs" / "sha256" / (std::string(d.hex()) + ".data");
  const int old_fd = open(data.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(old_fd, 0);
  cache->ScrubOnce();
  ASSERT_TRUE(Idle(*cache));
  // The old inode, as a passthrough open made before the finding sees it: still changed.
  char byte = 0;
  ASSERT_EQ(pread(old_fd, &byte, 1, kAt), 1);
  close(old_fd);
  EXPECT_EQ(byte, static_cast<char>(blob[kAt] ^ 0x01));
  std::ifstream fresh(data, std::ios::binary);
  std::string now((std::istreambuf_iterator<char>(fresh)), std::istreambuf_iterator<char>());
  EXPECT_EQ(now, blob);
}

TEST_F(ScrubTest, WhileTheChangedLayerIsFetchedAgainNoOpenGetsThePassthroughFd) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * kChunk, 43);
  Digest d = SealedAndChanged(*cache, blob);
  remote_.Hold();
  cache->ScrubOnce();
  EXPECT_EQ(cache->OpenVerifiedBlob(d, 0, blob.size()), -1);
  remote_.Release();
}

TEST_F(ScrubTest, OnceFetchedAgainTheLayerIsSealedAndPassedThroughWithTheRightBytes) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * kChunk, 51);
  Digest d = SealedAndChanged(*cache, blob);
  cache->ScrubOnce();
  ASSERT_TRUE(Idle(*cache));
  EXPECT_TRUE(cache->GetLayerInfo(d)->whole_verified);
  const int fd = cache->OpenVerifiedBlob(d, 0, blob.size());
  ASSERT_GE(fd, 0);
  char byte = 0;
  ASSERT_EQ(pread(fd, &byte, 1, kAt), 1);
  close(fd);
  EXPECT_EQ(byte, blob[kAt]);
}

TEST_F(ScrubTest, AReadAfterTheFindingWaitsForTheRefetchInsteadOfReadingTheChangedFile) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * kChunk, 52);
  Digest d = SealedAndChanged(*cache, blob);
  remote_.Hold();
  cache->ScrubOnce();
  std::atomic<bool> returned{false};
  absl::StatusOr<std::string> got;
  std::thread reader([&] {
    got = cache->Read(d, 5 * kChunk, kChunk);
    returned = true;
  });
  ASSERT_TRUE(remote_.WaitForHeld(1));
  EXPECT_FALSE(returned.load());
  remote_.Release();
  reader.join();
  ASSERT_OK(got.status());
  EXPECT_EQ(*got, blob.substr(5 * kChunk, kChunk));
}

// Readers hammer the changed chunk while the scrub finds it: every read that began once the
// layer was renewed returns the right bytes (the ones before may have read the changed file,
// which nothing had found yet).
TEST_F(ScrubTest, NoReadRacingTheFindingReturnsTheChangedBytesOnceTheLayerIsRenewed) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * kChunk, 53);
  Digest d = SealedAndChanged(*cache, blob);
  const std::string want = blob.substr(5 * kChunk, kChunk);
  std::atomic<int> wrong_after{0}, right_after{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        const bool after = cache->stats().scrub_repairs > 0;
        absl::StatusOr<std::string> got = cache->Read(d, 5 * kChunk, kChunk);
        if (!after) continue;
        if (got.ok() && *got == want) {
          right_after++;
        } else if (got.ok()) {
          wrong_after++;
        }
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(20));
  cache->ScrubOnce();
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (right_after.load() < 50 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  stop = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(wrong_after.load(), 0);
  EXPECT_GE(right_after.load(), 50);
}

TEST_F(ScrubTest, AWholeLayerModeLayerFoundChangedServesItsRightBytesAgain) {
  auto cache = Open();
  const std::string blob = RandomBytes(8 * kChunk, 54);
  Digest d = AddWhole(*cache, blob, VerifyMode::kWholeLayer);
  ASSERT_OK(cache->Read(d, 0, blob.size()).status());
  ASSERT_TRUE(Idle(*cache));
  WriteDataFile(d, 3 * kChunk, static_cast<char>(blob[3 * kChunk] ^ 0x40));
  const int before = remote_.requests();
  cache->ScrubOnce();
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 3 * kChunk, kChunk));
  EXPECT_EQ(got, blob.substr(3 * kChunk, kChunk));
  EXPECT_GT(remote_.requests(), before);
  EXPECT_EQ(cache->stats().scrub_repairs, 1u);
}

TEST_F(BlobCacheTest, AnUntouchedSealedLayerPassesTheScrubAndCountsItsBytes) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * kChunk + 100, 44);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, blob.size()).status());
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(cache->ScrubOnce(), 1);
  EXPECT_FALSE(cache->GetLayerInfo(d)->quarantined);
  EXPECT_EQ(cache->stats().scrubbed_bytes, blob.size());
  EXPECT_EQ(cache->stats().scrub_failures, 0u);
}

// Version 2 chunk indexes (the default of push and convert) hash with BLAKE3: the scrub
// checks each chunk with the index's own algorithm.
TEST_F(BlobCacheTest, AnUntouchedLayerWithABlake3IndexPassesTheScrub) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * kChunk, 56);
  Digest d = remote_.AddBlob(blob);
  ASSERT_OK(cache->RegisterLayer(
      LayerSpec{d, blob.size(), MakeIndex(d, blob, kChunk, ChunkDigestAlgorithm::kBlake3),
                VerifyMode::kChunk, "m1"}));
  ASSERT_OK(cache->Read(d, 0, blob.size()).status());
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(cache->ScrubOnce(), 1);
  EXPECT_EQ(cache->stats().scrub_failures, 0u);
  EXPECT_EQ(cache->stats().scrubbed_bytes, blob.size());
}

TEST_F(BlobCacheTest, AChangedLayerWithABlake3IndexIsFoundByTheScrub) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * kChunk, 57);
  Digest d = remote_.AddBlob(blob);
  ASSERT_OK(cache->RegisterLayer(
      LayerSpec{d, blob.size(), MakeIndex(d, blob, kChunk, ChunkDigestAlgorithm::kBlake3),
                VerifyMode::kChunk, "m1"}));
  ASSERT_OK(cache->Read(d, 0, blob.size()).status());
  ASSERT_TRUE(Idle(*cache));
  WriteDataFile(d, 11 * kChunk, static_cast<char>(blob[11 * kChunk] ^ 0x04));
  cache->ScrubOnce();
  EXPECT_EQ(cache->stats().scrub_failures, 1u);
  EXPECT_THAT(Logged(), HasSubstr("chunk 11 "));
}

TEST_F(BlobCacheTest, TheScrubLeavesALayerNotYetSealedAlone) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * kChunk, 45);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, kChunk).status());
  EXPECT_EQ(cache->ScrubOnce(), 0);
  EXPECT_EQ(cache->stats().scrubbed_bytes, 0u);
}

// A layer sealed but never audited (here the audit is off; or its process stopped first) is
// audited by the scrub, and the journal says so after a restart.
TEST_F(BlobCacheTest, TheScrubAuditsALayerSealedButNeverAudited) {
  CacheOptions o = Options();
  o.audit = false;
  auto cache = Open(o);
  const std::string blob = RandomBytes(16 * kChunk, 46);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, blob.size()).status());
  ASSERT_TRUE(Idle(*cache));
  ASSERT_FALSE(cache->GetLayerInfo(d)->audited);
  cache->ScrubOnce();
  EXPECT_TRUE(cache->GetLayerInfo(d)->audited);
  EXPECT_EQ(cache->stats().audited_layers, 1u);
}

TEST_F(BlobCacheTest, ALayerTheScrubAuditedIsRecordedAuditedForTheNextProcess) {
  CacheOptions o = Options();
  o.audit = false;
  const std::string blob = RandomBytes(16 * kChunk, 47);
  Digest d;
  {
    auto cache = Open(o);
    d = AddChunked(*cache, blob);
    ASSERT_OK(cache->Read(d, 0, blob.size()).status());
    ASSERT_TRUE(Idle(*cache));
    cache->ScrubOnce();
  }
  auto cache = Open(o);
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  EXPECT_TRUE(cache->GetLayerInfo(d)->audited);
}

// A chunk index that matches every chunk of a layer whose digest it does not match: only the
// audit's whole-layer hash tells, and the scrub does it for a layer never audited.
TEST_F(BlobCacheTest, TheScrubsAuditQuarantinesALayerWhoseIndexDisagreesWithItsDigest) {
  CacheOptions o = Options();
  o.audit = false;
  auto cache = Open(o);
  const std::string blob = RandomBytes(4 * kChunk, 48);
  Digest lie = Digest::Of("not these bytes");
  remote_.AddBlobAs(lie, blob);
  ASSERT_OK(cache->RegisterLayer(
      LayerSpec{lie, blob.size(), MakeIndex(lie, blob, kChunk), VerifyMode::kChunk, "m"}));
  ASSERT_OK(cache->Read(lie, 0, blob.size()).status());
  ASSERT_TRUE(Idle(*cache));
  cache->ScrubOnce();
  EXPECT_TRUE(cache->GetLayerInfo(lie)->quarantined);
}

// The scrub thread, with the real clock: within one interval of a change, the layer is renewed.
TEST_F(BlobCacheTest, TheScrubThreadFindsAChangeWithinAnInterval) {
  CacheOptions o = Options();
  o.scrub_interval = absl::Milliseconds(50);
  auto cache = Open(o);
  const std::string blob = RandomBytes(16 * kChunk, 49);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, blob.size()).status());
  ASSERT_TRUE(Idle(*cache));
  WriteDataFile(d, 9 * kChunk, static_cast<char>(blob[9 * kChunk] ^ 0x80));
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (cache->stats().scrub_repairs == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(cache->stats().scrub_failures, 1u);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 9 * kChunk, kChunk));
  EXPECT_EQ(got, blob.substr(9 * kChunk, kChunk));
}

}  // namespace
}  // namespace modelfs
