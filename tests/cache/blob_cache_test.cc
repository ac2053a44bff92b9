// BlobCache: opening (one cache per directory), registration, and what `modelfs node` asks
// (stats, ListLayers, endpoint errors).
#include "tests/cache/blob_cache_fixture.h"

namespace modelfs {
namespace {

TEST_F(BlobCacheTest, ASecondCacheOnTheSameDirectoryIsRefusedNamingTheDirectoryAndHolder) {
  auto first = Open();
  ASSERT_NE(first, nullptr);
  auto second = BlobCache::Open(Options(), &remote_);
  EXPECT_THAT(second.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  const std::string dir = Options().dir;
  EXPECT_THAT(
      std::string(second.status().message()),
      HasSubstr(absl::StrCat("cache: ", dir, " is in use by ", program_invocation_short_name,
                             " (pid ", getpid(), ") (", dir, "/lock is locked)")));
}

TEST_F(BlobCacheTest, TheDirectoryIsFreeAgainOnceTheCacheIsClosed) {
  Open().reset();
  EXPECT_NE(Open(), nullptr);
}

TEST_F(BlobCacheTest, RandomReadsReturnExactBytes) {
  auto cache = Open();
  const std::string blob = RandomBytes(64 * 1024 + 123, 1);
  Digest d = AddChunked(*cache, blob);
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    uint64_t off = rng() % blob.size();
    uint64_t len = rng() % 20000;
    ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, off, len));
    ASSERT_EQ(got, blob.substr(off, len)) << "offset " << off << " length " << len;
  }
  EXPECT_LE(remote_.bytes_served(), blob.size());
}

TEST_F(BlobCacheTest, ReadIsClippedAtTheEndOfTheLayer) {
  auto cache = Open();
  const std::string blob = RandomBytes(10000, 2);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK_AND_ASSIGN(std::string tail, cache->Read(d, 9990, 100));
  EXPECT_EQ(tail, blob.substr(9990));
  ASSERT_OK_AND_ASSIGN(std::string past, cache->Read(d, 10000, 100));
  EXPECT_EQ(past, "");
}

TEST_F(BlobCacheTest, ReadOfAnUnregisteredLayerIsNotFound) {
  auto cache = Open();
  Digest d = Digest::Of("nothing");
  EXPECT_THAT(cache->Read(d, 0, 10), StatusIs(absl::StatusCode::kNotFound, HasSubstr(d.str())));
}

TEST_F(BlobCacheTest, ChunkModeWithoutIndexIsRejected) {
  auto cache = Open();
  LayerSpec spec;
  spec.digest = Digest::Of("x");
  spec.size = 1;
  spec.mode = VerifyMode::kChunk;
  spec.model_ref = "m";
  EXPECT_THAT(cache->RegisterLayer(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("without index")));
}

TEST_F(BlobCacheTest, IndexOfAnotherBlobIsRejected) {
  auto cache = Open();
  const std::string blob = RandomBytes(9000, 3);
  LayerSpec spec;
  spec.digest = Digest::Of(blob);
  spec.size = blob.size();
  spec.index = MakeIndex(Digest::Of("other"), blob, kChunk);
  spec.model_ref = "m";
  EXPECT_THAT(cache->RegisterLayer(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("chunk index describes")));
}

TEST_F(BlobCacheTest, StatsCountHitsMissesAndBytes) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * 1024, 33);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, 8192));
  ASSERT_OK(cache->Read(d, 0, 8192));
  CacheStats s = cache->stats();
  EXPECT_EQ(s.chunk_misses, 2u);
  EXPECT_EQ(s.chunk_hits, 2u);
  EXPECT_EQ(s.bytes_served, 16384u);
  EXPECT_EQ(s.requests, 1u);
  EXPECT_EQ(s.bytes_fetched, 8192u);
  EXPECT_EQ(s.cached_bytes, 8192u);
}

// --- What `modelfs node` asks of the cache: ListLayers, EvictLayers, endpoint errors ---

TEST_F(BlobCacheTest, ListLayersGivesEachLayersCachedAndVerifiedBytesAndItsModels) {
  auto cache = Open();
  const std::string blob = RandomBytes(10 * kChunk + 100, 41);
  Digest d = AddChunked(*cache, blob, "m1");
  ASSERT_OK(cache->Read(d, 0, blob.size()));
  ASSERT_TRUE(Idle(*cache));
  std::map<Digest, BlobCache::LayerInfo> layers = cache->ListLayers();
  ASSERT_EQ(layers.size(), 1u);
  const BlobCache::LayerInfo& info = layers.at(d);
  EXPECT_EQ(info.size, blob.size());
  EXPECT_EQ(info.cached_bytes, blob.size());
  EXPECT_EQ(info.verified_bytes, blob.size());
  EXPECT_TRUE(info.whole_verified);
  EXPECT_FALSE(info.quarantined);
  EXPECT_FALSE(info.scrubbing);
  EXPECT_EQ(info.models, std::vector<std::string>{"m1"});
}

TEST_F(BlobCacheTest, AFailedFetchIsKeptAsItsEndpointsLastError) {
  auto cache = Open();
  const std::string blob = RandomBytes(2 * kChunk, 44);
  Digest d = AddChunked(*cache, blob, "m1");
  remote_.Fail(absl::NotFoundError("registry says no such blob"));
  EXPECT_FALSE(cache->Read(d, 0, kChunk).ok());
  ASSERT_TRUE(Idle(*cache));
  auto errors = cache->endpoint_errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors.begin()->second.message, HasSubstr("registry says no such blob"));
  EXPECT_GE(errors.begin()->second.count, 1u);
  EXPECT_NE(errors.begin()->second.at, absl::InfinitePast());
}

}  // namespace
}  // namespace modelfs
