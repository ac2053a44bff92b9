// LayerEviction: unreferenced layers evicted least recently used first, and on request
// (EvictLayers).
#include "tests/cache/blob_cache_fixture.h"

namespace modelfs {
namespace {

TEST_F(BlobCacheTest, EvictsLeastRecentlyUsedUnreferencedLayers) {
  CacheOptions o = Options();
  o.max_bytes = 40 * 1024;
  auto cache = Open(o);
  const std::string a = RandomBytes(16 * 1024, 23), b = RandomBytes(16 * 1024, 24),
                    c = RandomBytes(16 * 1024, 25);
  Digest da = AddChunked(*cache, a, "ma"), db = AddChunked(*cache, b, "mb"),
         dc = AddChunked(*cache, c, "mc");
  ASSERT_OK(cache->Read(da, 0, a.size()));
  ASSERT_OK(cache->Read(db, 0, b.size()));
  ASSERT_TRUE(Idle(*cache));
  cache->UnregisterModel("ma");
  cache->UnregisterModel("mb");
  ASSERT_OK(cache->Read(dc, 0, c.size()));
  ASSERT_TRUE(Idle(*cache));
  EXPECT_THAT(cache->GetLayerInfo(da), StatusIs(absl::StatusCode::kNotFound, HasSubstr(da.str())));
  ASSERT_OK_AND_ASSIGN(auto info_b, cache->GetLayerInfo(db));
  EXPECT_EQ(info_b.cached_chunks, 4u);
  EXPECT_EQ(info_b.references, 0);
  EXPECT_EQ(cache->stats().evicted_layers, 1u);
  EXPECT_EQ(cache->stats().cached_bytes, 32 * 1024u);
  EXPECT_FALSE(std::filesystem::exists(dir_.Join("cache") / "blobs" / "sha256" /
                                       (std::string(da.hex()) + ".data")));
}

TEST_F(BlobCacheTest, ReferencedLayersAreNeverEvicted) {
  CacheOptions o = Options();
  o.max_bytes = 8 * 1024;
  auto cache = Open(o);
  const std::string a = RandomBytes(16 * 1024, 26);
  Digest da = AddChunked(*cache, a, "ma");
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(da, 0, a.size()));
  EXPECT_EQ(got, a);
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(cache->stats().evicted_layers, 0u);
  EXPECT_EQ(cache->stats().cached_bytes, 16 * 1024u);
}

TEST_F(BlobCacheTest, LayerSharedByTwoModelsStaysReferencedUntilBothLetGo) {
  CacheOptions o = Options();
  o.max_bytes = 1;
  auto cache = Open(o);
  const std::string a = RandomBytes(8 * 1024, 27);
  Digest da = AddChunked(*cache, a, "m1");
  LayerSpec again{da, a.size(), MakeIndex(da, a, kChunk), VerifyMode::kChunk, "m2"};
  ASSERT_OK(cache->RegisterLayer(again));
  ASSERT_OK(cache->Read(da, 0, a.size()));
  ASSERT_TRUE(Idle(*cache));
  cache->UnregisterModel("m1");
  ASSERT_OK_AND_ASSIGN(auto info, cache->GetLayerInfo(da));
  EXPECT_EQ(info.references, 1);
  cache->UnregisterModel("m2");
  EXPECT_THAT(cache->GetLayerInfo(da), StatusIs(absl::StatusCode::kNotFound, HasSubstr(da.str())));
}

TEST_F(BlobCacheTest, EvictLayersDropsAnUnreferencedLayerAndKeepsAReferencedOne) {
  auto cache = Open();
  const std::string one = RandomBytes(3 * kChunk, 42);
  const std::string two = RandomBytes(2 * kChunk, 43);
  Digest d1 = AddChunked(*cache, one, "m1");
  Digest d2 = AddChunked(*cache, two, "m2");
  ASSERT_OK(cache->Read(d1, 0, one.size()));
  ASSERT_OK(cache->Read(d2, 0, two.size()));
  ASSERT_TRUE(Idle(*cache));
  cache->UnregisterModel("m1");
  BlobCache::EvictResult r = cache->EvictLayers({d1, d2, remote_.AddBlob("unknown")});
  EXPECT_EQ(r.layers, 1u);
  EXPECT_EQ(r.bytes, one.size());
  EXPECT_EQ(r.busy, std::vector<Digest>{d2});
  EXPECT_THAT(cache->GetLayerInfo(d1).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(cache->stats().cached_bytes, two.size());
  EXPECT_FALSE(std::filesystem::exists(DataPath(d1)));
  // Registered again, it is fetched and verified afresh.
  const uint64_t fetched = cache->stats().bytes_fetched;
  ASSERT_OK(RegisterChunked(*cache, d1, one));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d1, 0, one.size()));
  EXPECT_EQ(got, one);
  EXPECT_EQ(cache->stats().bytes_fetched - fetched, one.size());
}

}  // namespace
}  // namespace modelfs
