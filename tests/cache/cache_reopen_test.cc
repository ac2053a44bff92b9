// What a cache opened again trusts (BlobCache::LoadFromJournal): recorded chunks re-hashed,
// sealed layers served as they are, changed or stray files fetched again or dropped.
#include "tests/cache/blob_cache_fixture.h"

namespace modelfs {
namespace {

TEST_F(BlobCacheTest, RestartServesVerifiedChunksWithZeroRemoteBytes) {
  const std::string blob = RandomBytes(32 * 1024, 19);
  Digest d;
  {
    auto cache = Open();
    d = AddChunked(*cache, blob);
    ASSERT_OK(cache->Read(d, 0, 3 * 4096));
  }
  remote_.ResetCounters();
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  ASSERT_OK_AND_ASSIGN(auto info, cache->GetLayerInfo(d));
  EXPECT_EQ(info.cached_chunks, 3u);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 100, 3 * 4096 - 100));
  EXPECT_EQ(got, blob.substr(100, 3 * 4096 - 100));
  EXPECT_EQ(remote_.bytes_served(), 0u);
  EXPECT_EQ(remote_.requests(), 0);
}

TEST_F(BlobCacheTest, ASealedLayerIsServedAfterRestartWithoutReHashingOrFetching) {
  const std::string blob = RandomBytes(32 * 1024, 21);
  Digest d = CacheWholeAndClose(blob);
  remote_.ResetCounters();
  auto cache = Open();
  // Before registration nothing is handed out.
  EXPECT_EQ(cache->OpenVerifiedBlob(d, 0, blob.size()), -1);
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  ASSERT_OK_AND_ASSIGN(auto info, cache->GetLayerInfo(d));
  EXPECT_TRUE(info.whole_verified);
  EXPECT_EQ(info.cached_chunks, blob.size() / kChunk);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, blob.size()));
  EXPECT_EQ(got, blob);
  EXPECT_EQ(remote_.requests(), 0);
  EXPECT_EQ(cache->stats().verification_failures, 0u);
  EXPECT_THAT(Logged(), Not(HasSubstr("re-verification")));
}

TEST_F(BlobCacheTest, ASealedLayerWrittenToAfterwardsIsReHashedAfterRestart) {
  const std::string blob = RandomBytes(32 * 1024, 23);
  Digest d = CacheWholeAndClose(blob);
  {
    // The same byte written back: only the file's change time says something happened.
    WriteDataFile(d, 7, blob[7]);
  }
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  EXPECT_FALSE(cache->GetLayerInfo(d)->whole_verified);
  EXPECT_EQ(cache->OpenVerifiedBlob(d, 0, blob.size()), -1);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, blob.size()));
  EXPECT_EQ(got, blob);
  // Every chunk re-hashed (all still good), then the whole layer checked and sealed again.
  ASSERT_TRUE(Idle(*cache));
  EXPECT_TRUE(cache->GetLayerInfo(d)->whole_verified);
  const int fd = cache->OpenVerifiedBlob(d, 0, blob.size());
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
}

TEST_F(BlobCacheTest, ASealedFileTruncatedWhileClosedIsFetchedAgainNotServed) {
  const std::string blob = RandomBytes(16 * kChunk + 5, 60);
  const Digest d = CacheWholeAndClose(blob);
  ASSERT_EQ(truncate(DataPath(d).c_str(), 9 * kChunk), 0);
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  const int before = remote_.requests();
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, blob.size()));
  EXPECT_EQ(got, blob);
  EXPECT_GT(remote_.requests(), before);
}

TEST_F(BlobCacheTest, ASealedFileSwappedForAnotherOfTheSameSizeIsFetchedAgainNotServed) {
  const std::string blob = RandomBytes(16 * kChunk + 5, 61);
  const Digest d = CacheWholeAndClose(blob);
  {
    // Another file of the same size renamed over it: a new inode, so the seal no longer holds.
    const std::string other = DataPath(d) + ".other";
    std::ofstream(other, std::ios::binary) << RandomBytes(blob.size(), 62);
    ASSERT_EQ(rename(other.c_str(), DataPath(d).c_str()), 0);
  }
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, blob.size()));
  EXPECT_EQ(got, blob);
  EXPECT_FALSE(cache->GetLayerInfo(d)->quarantined);
}

TEST_F(BlobCacheTest, TamperedCacheFileIsRefetchedNotServedAfterRestart) {
  const std::string blob = RandomBytes(32 * 1024, 20);
  Digest d = CacheWholeAndClose(blob);
  { WriteDataFile(d, 4 * 4096 + 9, static_cast<char>(blob[4 * 4096 + 9] ^ 0x01)); }
  remote_.ResetCounters();
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, blob.size()));
  EXPECT_EQ(got, blob);
  EXPECT_EQ(remote_.bytes_served(), kChunk);  // only the tampered chunk
  EXPECT_EQ(cache->stats().verification_failures, 1u);
  EXPECT_THAT(Logged(), AllOf(HasSubstr("level=warn component=cache"), HasSubstr("re-verification"),
                              HasSubstr("digest=" + d.str()), HasSubstr("range=16384-20479")));
}

TEST_F(BlobCacheTest, WholeLayerVerifiedBeforeRestartIsServedWithZeroRemoteBytes) {
  const std::string blob = RandomBytes(20 * 1024, 21);
  Digest d;
  {
    auto cache = Open();
    d = AddWhole(*cache, blob, VerifyMode::kWholeLayer);
    ASSERT_OK(cache->Read(d, 0, 1));
  }
  remote_.ResetCounters();
  auto cache = Open();
  LayerSpec spec{d, blob.size(), std::nullopt, VerifyMode::kWholeLayer, "m1"};
  ASSERT_OK(cache->RegisterLayer(spec));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, blob.size()));
  EXPECT_EQ(got, blob);
  EXPECT_EQ(remote_.requests(), 0);
}

TEST_F(BlobCacheTest, LayersWithoutVerifiedDataAndStrayFilesAreDroppedOnOpen) {
  const std::string blob = RandomBytes(20 * 1024, 22);
  Digest d;
  {
    auto cache = Open();
    d = AddWhole(*cache, blob, VerifyMode::kWholeLayer);
  }
  const auto stray = dir_.WriteFile("cache/blobs/sha256/" + std::string(64, 'a') + ".data", "junk");
  auto cache = Open();
  EXPECT_THAT(cache->GetLayerInfo(d), StatusIs(absl::StatusCode::kNotFound, HasSubstr(d.str())));
  EXPECT_FALSE(std::filesystem::exists(stray));
}

}  // namespace
}  // namespace modelfs
