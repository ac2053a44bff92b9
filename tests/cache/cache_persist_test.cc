// Persistence and served pages: the batched fdatasync (persist_delay) and served chunks leaving
// the page cache (drop_served_pages).
#include "tests/cache/blob_cache_fixture.h"

namespace modelfs {
namespace {

// Pages of `d`'s data file in the page cache, per 4 KiB page of [offset, offset + length).
std::vector<bool> ResidentPages(const std::filesystem::path& cache_dir, const Digest& d,
                                uint64_t offset, uint64_t length) {
  const std::string path =
      (cache_dir / "blobs" / "sha256" / (std::string(d.hex()) + ".data")).string();
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  void* map = mmap(nullptr, offset + length, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  EXPECT_NE(map, MAP_FAILED) << path;
  const long page = sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> vec((offset + length + page - 1) / page);
  EXPECT_EQ(mincore(map, offset + length, vec.data()), 0);
  munmap(map, offset + length);
  std::vector<bool> out;
  for (uint64_t p = offset / page; p < vec.size(); ++p) out.push_back(vec[p] & 1);
  return out;
}

size_t CountResident(const std::vector<bool>& pages) {
  return static_cast<size_t>(std::count(pages.begin(), pages.end(), true));
}

// The node keeps one copy of the weights. A chunk whose bytes all went to readers
// and which is on disk leaves the page cache (the FUSE file's pages hold the reader's copy);
// the pages stay while the reply is still being sent (a span is held).
TEST_F(BlobCacheTest, ServedChunksLeaveThePageCacheOnceOnDiskButNotWhileTheReplyIsSent) {
  auto cache = Open();
  const std::string blob = RandomBytes(32 * kChunk, 51);
  Digest d = AddChunked(*cache, blob);
  auto spans = cache->ReadSpans(d, 0, blob.size());
  ASSERT_OK(spans);
  ASSERT_TRUE(Idle(*cache));  // fetched, flushed, recorded, audited
  EXPECT_EQ(CountResident(ResidentPages(dir_.Join("cache"), d, 0, blob.size())), 32u)
      << "pages dropped while the reply still needs them";
  EXPECT_EQ(cache->stats().page_cache_bytes_dropped, 0u);
  spans->clear();  // the reply is sent
  EXPECT_EQ(CountResident(ResidentPages(dir_.Join("cache"), d, 0, blob.size())), 0u);
  EXPECT_EQ(cache->stats().page_cache_bytes_dropped, blob.size());
  // Served again, from the disk.
  auto again = cache->Read(d, 0, blob.size());
  ASSERT_OK(again);
  EXPECT_EQ(*again, blob);
}

// persist_delay: while reads are served, fetched chunks are not flushed (nor recorded, nor
// dropped from the page cache) until the reads pause for verify_when_idle.
TEST_F(BlobCacheTest, WithAPersistDelayChunksAreFlushedOnlyOnceReadsPause) {
  CacheOptions o = Options();
  o.persist_delay = absl::Seconds(30);
  o.verify_when_idle = absl::Milliseconds(200);
  const std::string first = RandomBytes(8 * kChunk, 54);
  const std::string second = RandomBytes(2 * kChunk, 55);
  Digest a, b;
  {
    auto cache = Open(o);
    a = AddChunked(*cache, first);
    b = AddChunked(*cache, second);
    ASSERT_OK(cache->Read(a, 0, 3 * kChunk));  // 3 of 8 chunks: no seal flushes them
    remote_.HoldOnly(b);
    remote_.Hold();
    std::thread blocked([&] { EXPECT_OK(cache->Read(b, 0, kChunk)); });
    ASSERT_TRUE(remote_.WaitForHeld(1));
    absl::SleepFor(absl::Milliseconds(600));  // three idle windows, a read still in progress
    EXPECT_EQ(cache->stats().page_cache_bytes_dropped, 0u) << "flushed while reads go on";
    EXPECT_EQ(CountResident(ResidentPages(dir_.Join("cache"), a, 0, 3 * kChunk)), 3u);
    remote_.Release();
    blocked.join();
    ASSERT_TRUE(Idle(*cache));  // the reads paused: flushed, recorded, pages dropped
    EXPECT_EQ(cache->stats().page_cache_bytes_dropped, 4 * kChunk);  // a's 3 and b's 1
    EXPECT_EQ(CountResident(ResidentPages(dir_.Join("cache"), a, 0, 3 * kChunk)), 0u);
  }
  remote_.ResetCounters();
  auto cache = Open(o);
  ASSERT_OK(RegisterChunked(*cache, a, first));
  EXPECT_EQ(cache->GetLayerInfo(a)->cached_chunks, 3u);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(a, 0, 3 * kChunk));
  EXPECT_EQ(got, first.substr(0, 3 * kChunk));
  EXPECT_EQ(remote_.requests(), 0);
}

TEST_F(BlobCacheTest, WithAPersistDelayChunksWaitNoLongerThanTheDelay) {
  CacheOptions o = Options();
  o.persist_delay = absl::Milliseconds(300);
  o.verify_when_idle = absl::Seconds(30);  // never idle within the test
  auto cache = Open(o);
  const std::string blob = RandomBytes(8 * kChunk, 56);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, 2 * kChunk));
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (cache->stats().page_cache_bytes_dropped < 2 * kChunk && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(cache->stats().page_cache_bytes_dropped, 2 * kChunk);
}

TEST_F(BlobCacheTest, ClosingTheCacheFlushesChunksStillWaitingForAPause) {
  CacheOptions o = Options();
  o.persist_delay = absl::Seconds(30);
  o.verify_when_idle = absl::Seconds(30);
  const std::string blob = RandomBytes(8 * kChunk, 57);
  Digest d;
  const absl::Time start = absl::Now();
  {
    auto cache = Open(o);
    d = AddChunked(*cache, blob);
    ASSERT_OK(cache->Read(d, kChunk, 3 * kChunk));
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "the close waited for the delay";
  remote_.ResetCounters();
  auto cache = Open(o);
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  EXPECT_EQ(cache->GetLayerInfo(d)->cached_chunks, 3u);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, kChunk, 3 * kChunk));
  EXPECT_EQ(got, blob.substr(kChunk, 3 * kChunk));
  EXPECT_EQ(remote_.requests(), 0);
}

TEST_F(BlobCacheTest, AChunkServedOnlyInPartKeepsItsPages) {
  auto cache = Open();
  const std::string blob = RandomBytes(8 * kChunk, 52);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, kChunk + kChunk / 2));  // chunk 0 whole, half of chunk 1
  ASSERT_TRUE(Idle(*cache));
  const std::vector<bool> pages = ResidentPages(dir_.Join("cache"), d, 0, 2 * kChunk);
  EXPECT_FALSE(pages[0]);
  EXPECT_TRUE(pages[1]);
  ASSERT_OK(cache->Read(d, kChunk + kChunk / 2, kChunk / 2));  // the rest of chunk 1
  EXPECT_FALSE(ResidentPages(dir_.Join("cache"), d, kChunk, kChunk)[0]);
}

TEST_F(BlobCacheTest, WithDropServedPagesOffServedChunksStayInThePageCache) {
  CacheOptions o = Options();
  o.drop_served_pages = false;
  auto cache = Open(o);
  const std::string blob = RandomBytes(16 * kChunk, 53);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, blob.size()));
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(CountResident(ResidentPages(dir_.Join("cache"), d, 0, blob.size())), 16u);
  EXPECT_EQ(cache->stats().page_cache_bytes_dropped, 0u);
}

// The whole-layer audit reads every chunk again after the load: those it finds dropped leave
// the page cache behind it, so the audit does not bring the second copy back.
TEST_F(BlobCacheTest, TheAuditAfterTheLoadLeavesNoSecondCopyBehind) {
  CacheOptions o = Options();
  o.verify_when_idle = absl::Milliseconds(300);
  auto cache = Open(o);
  const std::string blob = RandomBytes(24 * kChunk, 54);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, blob.size()));
  ASSERT_TRUE(Idle(*cache));
  ASSERT_TRUE(cache->GetLayerInfo(d)->audited);
  EXPECT_EQ(CountResident(ResidentPages(dir_.Join("cache"), d, 0, blob.size())), 0u);
}

}  // namespace
}  // namespace modelfs
