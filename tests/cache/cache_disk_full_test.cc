// A full cache disk: verified bytes served from memory, eviction, prefetch paused, and a
// database that cannot be opened.
#include "tests/cache/blob_cache_fixture.h"

namespace modelfs {
namespace {

// A full cache disk, injected at the data-file writer: every write fails with
// ENOSPC while `full` is set.
class DiskFullTest : public BlobCacheTest {
 protected:
  CacheOptions FullDiskOptions() {
    CacheOptions o = Options();
    o.write_data = [this](int fd, const char* data, uint64_t n, uint64_t offset) {
      if (full_.load()) return ENOSPC;
      return pwrite(fd, data, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n) ? 0 : EIO;
    };
    return o;
  }
  std::atomic<bool> full_{true};
};

// Chunks arrive in pieces and the disk refuses every chunk's write (a write that reaches past
// the middle of a chunk fails): each is served from memory, whole and exact.
TEST_F(DiskFullTest, ChunksArrivingInPiecesOnAFullDiskAreServedWholeFromMemory) {
  constexpr uint64_t kBig = 64 * 1024;
  CacheOptions o = FullDiskOptions();
  o.write_data = [](int fd, const char* data, uint64_t n, uint64_t offset) {
    if (offset % kBig + n > kBig / 2) return ENOSPC;  // the second half of every chunk
    return pwrite(fd, data, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n) ? 0 : EIO;
  };
  auto cache = Open(o);
  const std::string blob = RandomBytes(4 * kBig, 61);
  Digest d = Digest::Of(blob);
  remote_.AddBlob(blob);
  remote_.SetPieceSizes({5000, 12288, 999});
  ASSERT_OK(cache->RegisterLayer(
      LayerSpec{d, blob.size(), MakeIndex(d, blob, kBig), VerifyMode::kChunk, "m1"}));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, blob.size()));
  EXPECT_TRUE(got == blob);
  EXPECT_TRUE(cache->disk_full());
}

TEST_F(DiskFullTest, VerifiedBytesAreServedWithoutBeingCached) {
  auto cache = Open(FullDiskOptions());
  const std::string blob = RandomBytes(16 * kChunk, 60);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, kChunk - 10, 2 * kChunk));
  EXPECT_EQ(got, blob.substr(kChunk - 10, 2 * kChunk));
  ASSERT_OK_AND_ASSIGN(auto info, cache->GetLayerInfo(d));
  EXPECT_EQ(info.cached_chunks, 0u);
  EXPECT_EQ(cache->stats().cached_bytes, 0u);
  EXPECT_TRUE(cache->disk_full());
}

TEST_F(DiskFullTest, ASequentialReaderFetchesEachByteOnce) {
  auto cache = Open(FullDiskOptions());
  const std::string blob = RandomBytes(16 * kChunk, 61);
  Digest d = AddChunked(*cache, blob);
  std::string all;
  for (uint64_t off = 0; off < blob.size(); off += 1000) {
    ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, off, 1000));
    all += got;
  }
  EXPECT_EQ(all, blob);
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(remote_.bytes_served(), blob.size());
}

TEST_F(DiskFullTest, PrefetchWaitsForSpace) {
  auto cache = Open(FullDiskOptions());
  const std::string blob = RandomBytes(16 * kChunk, 62);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, 100));
  remote_.ResetCounters();
  ASSERT_OK(cache->Prefetch(d, PrefetchPolicy::kAll));
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(remote_.requests(), 0);
}

TEST_F(DiskFullTest, UnreferencedLayersAreEvictedAndTheLogSaysWhy) {
  full_ = false;
  auto cache = Open(FullDiskOptions());
  const std::string old_blob = RandomBytes(8 * kChunk, 63), blob = RandomBytes(8 * kChunk, 64);
  Digest old_layer = AddChunked(*cache, old_blob, "old-model");
  ASSERT_OK(cache->Read(old_layer, 0, old_blob.size()));
  ASSERT_TRUE(Idle(*cache));
  cache->UnregisterModel("old-model");
  ASSERT_OK(cache->GetLayerInfo(old_layer).status());  // no size limit: kept until needed
  full_ = true;
  Digest d = AddChunked(*cache, blob, "new-model");
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, 100));
  EXPECT_EQ(got, blob.substr(0, 100));
  ASSERT_TRUE(Idle(*cache));  // the fetch logs and evicts after handing the bytes over
  EXPECT_THAT(cache->GetLayerInfo(old_layer), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(cache->stats().cached_bytes, 0u);
  EXPECT_THAT(Logged(), HasSubstr("cache directory is full (no space left on device): serving "
                                  "verified bytes from the network without caching"));
  EXPECT_THAT(Logged(), HasSubstr(absl::StrCat("dir=", Options().dir,
                                               " evicted_layers=1 evicted_bytes=32768")));
}

TEST_F(DiskFullTest, CachingResumesOnceAWriteSucceeds) {
  auto cache = Open(FullDiskOptions());
  const std::string blob = RandomBytes(8 * kChunk, 65);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, 100));
  full_ = false;
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 4 * kChunk, 100));
  EXPECT_EQ(got, blob.substr(4 * kChunk, 100));
  EXPECT_FALSE(cache->disk_full());
  ASSERT_OK_AND_ASSIGN(auto info, cache->GetLayerInfo(d));
  EXPECT_EQ(info.cached_chunks, 1u);
}

TEST_F(DiskFullTest, ALayerWithoutAChunkIndexFailsAtOnceNamingTheFullDisk) {
  auto cache = Open(FullDiskOptions());
  const std::string blob = RandomBytes(8 * kChunk, 66);
  Digest d = AddWhole(*cache, blob, VerifyMode::kWholeLayer);
  EXPECT_THAT(cache->Read(d, 0, 100), StatusIs(absl::StatusCode::kResourceExhausted,
                                               AllOf(HasSubstr("is full"), HasSubstr(d.str()))));
}

// The real thing: the cache directory on a tmpfs that is full. Needs root (mount).
TEST_F(DiskFullTest, OnAFullTmpfsReadsAreServedOnceEachAndTheCacheReopens) {
  SKIP_OR_FAIL_IF_UNAVAILABLE(geteuid() == 0 ? "" : "mounting a tmpfs needs root");
  const std::filesystem::path mnt = dir_.Join("tmpfs");
  std::filesystem::create_directories(mnt);
  ASSERT_EQ(mount("tmpfs", mnt.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=512k"), 0)
      << strerror(errno);
  struct Unmount {
    std::filesystem::path dir;
    ~Unmount() { umount2(dir.c_str(), MNT_DETACH); }
  } unmount{mnt};
  CacheOptions o = Options();
  o.dir = (mnt / "cache").string();
  const std::string blob = RandomBytes(64 * kChunk, 68);
  Digest d;
  {
    auto cache = Open(o);
    ASSERT_NE(cache, nullptr);
    {
      // Fill what is left, as other files on the disk would.
      std::ofstream filler(mnt / "filler", std::ios::binary);
      const std::string mib(1 << 20, 'x');
      for (int i = 0; i < 4 && filler; ++i) filler.write(mib.data(), mib.size());
    }
    d = AddChunked(*cache, blob);
    std::string all;
    for (uint64_t off = 0; off < blob.size(); off += 16 * 1024) {
      ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, off, 16 * 1024));
      all += got;
    }
    EXPECT_EQ(all, blob);
    ASSERT_TRUE(Idle(*cache));
    EXPECT_LE(remote_.bytes_served(), 2 * blob.size());
  }
  auto cache = Open(o);  // a remount on the full disk
  ASSERT_NE(cache, nullptr);
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 5 * kChunk, 100));
  EXPECT_EQ(got, blob.substr(5 * kChunk, 100));
}

TEST_F(DiskFullTest, ACacheWhoseDatabaseCannotBeOpenedStillServes) {
  // What a full disk does to SQLite ("database or disk is full") stood in for by a database
  // path that cannot be a database at all.
  std::filesystem::create_directories(std::filesystem::path(Options().dir) / "cache.db");
  auto cache = Open(Options());
  ASSERT_NE(cache, nullptr);
  const std::string blob = RandomBytes(4 * kChunk, 67);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, 100));
  EXPECT_EQ(got, blob.substr(0, 100));
  EXPECT_THAT(Logged(), HasSubstr("without a persistent record"));
}

}  // namespace
}  // namespace modelfs
