#include "core/cache/blob_cache.h"
#include "core/cache/fs_verity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "testsupport/fakes/fake_remote.h"
#include "testsupport/fakes/fake_clock.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::FakeClock;
using ::modelfs::testing::FakeRemote;
using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kChunk = 4096;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

ChunkIndex MakeIndex(const Digest& digest, const std::string& blob, uint64_t chunk_size,
                     ChunkDigestAlgorithm algorithm = ChunkDigestAlgorithm::kSha256) {
  ChunkIndex idx;
  idx.blob_digest = digest;
  idx.blob_size = blob.size();
  idx.chunk_size = chunk_size;
  idx.algorithm = algorithm;
  for (uint64_t off = 0; off < blob.size(); off += chunk_size) {
    idx.chunks.push_back(HashChunkBytes(algorithm, std::string_view(blob).substr(off, chunk_size)));
  }
  return idx;
}

class BlobCacheTest : public ::testing::Test {
 protected:
  CacheOptions Options() {
    CacheOptions o;
    o.dir = dir_.Join("cache").string();
    o.fetch_threads = 4;
    o.read_deadline = absl::Seconds(20);
    o.whole_chunk_size = kChunk;
    o.verify_when_idle = absl::ZeroDuration();
    o.retry.initial_backoff = absl::Milliseconds(5);
    o.retry.max_backoff = absl::Milliseconds(20);
    o.verity = verity_;
    o.log = [this](const log::Event& e) {
      absl::MutexLock lock(&log_mu_);
      log_.push_back(log::FormatLine(e, absl::UnixEpoch(), log::Format::kLogfmt));
    };
    return o;
  }

  // Caches all of `blob` (chunk mode) in a cache that is then closed: the layer is verified
  // whole and sealed on disk.
  Digest CacheWholeAndClose(const std::string& blob) {
    auto cache = Open();
    Digest d = AddChunked(*cache, blob);
    EXPECT_OK(cache->Read(d, 0, blob.size()));
    EXPECT_TRUE(Idle(*cache));
    EXPECT_TRUE(cache->GetLayerInfo(d)->whole_verified);
    return d;
  }
  // Registers `blob` again, as a model would after a restart.
  absl::Status RegisterChunked(BlobCache& cache, const Digest& d, const std::string& blob) {
    return cache.RegisterLayer(
        LayerSpec{d, blob.size(), MakeIndex(d, blob, kChunk), VerifyMode::kChunk, "m1"});
  }
  // The cache's data file of `d`.
  std::string DataPath(const Digest& d) {
    return (dir_.Join("cache") / "blobs" / "sha256" / (std::string(d.hex()) + ".data")).string();
  }
  // Writes one byte into the cache's data file of `d`, as a disk error or a person would.
  void WriteDataFile(const Digest& d, uint64_t offset, char byte) {
    std::fstream f(dir_.Join("cache") / "blobs" / "sha256" / (std::string(d.hex()) + ".data"),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&byte, 1);
  }

  std::unique_ptr<BlobCache> Open(CacheOptions o) {
    auto cache = BlobCache::Open(std::move(o), &remote_);
    EXPECT_THAT(cache, IsOk());
    return cache.ok() ? std::move(*cache) : nullptr;
  }
  std::unique_ptr<BlobCache> Open() { return Open(Options()); }

  // Adds a blob to the fake remote and registers it with a chunk index.
  Digest AddChunked(BlobCache& cache, const std::string& blob, const std::string& model = "m1") {
    Digest d = remote_.AddBlob(blob);
    LayerSpec spec;
    spec.digest = d;
    spec.size = blob.size();
    spec.index = MakeIndex(d, blob, kChunk);
    spec.mode = VerifyMode::kChunk;
    spec.model_ref = model;
    EXPECT_OK(cache.RegisterLayer(spec));
    return d;
  }
  Digest AddWhole(BlobCache& cache, const std::string& blob, VerifyMode mode,
                  const std::string& model = "m1") {
    Digest d = remote_.AddBlob(blob);
    LayerSpec spec;
    spec.digest = d;
    spec.size = blob.size();
    spec.mode = mode;
    spec.model_ref = model;
    EXPECT_OK(cache.RegisterLayer(spec));
    return d;
  }

  std::string Logged() {
    absl::MutexLock lock(&log_mu_);
    std::string all;
    for (const auto& l : log_) absl::StrAppend(&all, l, "\n");
    return all;
  }

  static bool Idle(BlobCache& cache) { return cache.WaitIdle(absl::Now() + absl::Seconds(20)); }

  modelfs::testing::TempDir dir_;
  VerityOps* verity_ = nullptr;  // null: the kernel's
  FakeRemote remote_;
  absl::Mutex log_mu_;
  std::vector<std::string> log_;
};

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

TEST_F(BlobCacheTest, TwoReadersOfOneChunkShareOneFetch) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * 1024, 4);
  Digest d = AddChunked(*cache, blob);
  remote_.Hold();
  absl::StatusOr<std::string> a, b;
  std::thread ta([&] { a = cache->Read(d, 100, 50); });
  ASSERT_TRUE(remote_.WaitForHeld(1));
  std::thread tb([&] { b = cache->Read(d, 1000, 500); });
  // The second reader has joined the flight once it has counted its miss.
  while (cache->stats().chunk_misses < 2) absl::SleepFor(absl::Milliseconds(1));
  remote_.Release();
  ta.join();
  tb.join();
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(*a, blob.substr(100, 50));
  EXPECT_EQ(*b, blob.substr(1000, 500));
  EXPECT_EQ(remote_.requests(), 1);
  EXPECT_EQ(remote_.bytes_served(), kChunk);
}

TEST_F(BlobCacheTest, AdjacentMissingChunksAreFetchedInOneRequest) {
  auto cache = Open();
  const std::string blob = RandomBytes(64 * 1024, 5);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 4096 + 10, 4 * 4096));
  EXPECT_EQ(got, blob.substr(4096 + 10, 4 * 4096));
  auto log = remote_.log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].offset, 4096u);
  EXPECT_EQ(log[0].length, 5 * 4096u);
}

TEST_F(BlobCacheTest, CachedChunksSplitACoalescedRequestIntoMissingRuns) {
  auto cache = Open();
  const std::string blob = RandomBytes(64 * 1024, 6);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 2 * 4096, 1));  // chunk 2 cached
  remote_.ResetCounters();
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, 5 * 4096));
  EXPECT_EQ(got, blob.substr(0, 5 * 4096));
  auto log = remote_.log();
  ASSERT_EQ(log.size(), 2u);
  std::sort(log.begin(), log.end(),
            [](const auto& a, const auto& b) { return a.offset < b.offset; });
  EXPECT_EQ(log[0].offset, 0u);
  EXPECT_EQ(log[0].length, 2 * 4096u);
  EXPECT_EQ(log[1].offset, 3 * 4096u);
  EXPECT_EQ(log[1].length, 2 * 4096u);
}

TEST_F(BlobCacheTest, CoalescedRequestsAreCappedAtMaxRequestBytes) {
  CacheOptions o = Options();
  o.max_request_bytes = 8192;
  auto cache = Open(o);
  const std::string blob = RandomBytes(64 * 1024, 7);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, 6 * 4096));
  EXPECT_EQ(got, blob.substr(0, 6 * 4096));
  auto log = remote_.log();
  ASSERT_EQ(log.size(), 3u);
  for (const auto& r : log) EXPECT_EQ(r.length, 8192u);
}

TEST_F(BlobCacheTest, CorruptChunkIsDataLossWhileNeighboursReadFine) {
  auto cache = Open();
  const std::string blob = RandomBytes(64 * 1024, 8);
  Digest d = AddChunked(*cache, blob);
  remote_.CorruptByte(d, 2 * 4096 + 77);
  EXPECT_THAT(cache->Read(d, 2 * 4096, 100),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("chunk 2 "), HasSubstr(d.str()),
                                                          HasSubstr("[8192, 12288)"))));
  EXPECT_THAT(Logged(), AllOf(HasSubstr("chunk 2 "), HasSubstr(d.str()), HasSubstr("8192")));
  ASSERT_OK_AND_ASSIGN(std::string before, cache->Read(d, 4096, 4096));
  EXPECT_EQ(before, blob.substr(4096, 4096));
  ASSERT_OK_AND_ASSIGN(std::string after, cache->Read(d, 3 * 4096, 4096));
  EXPECT_EQ(after, blob.substr(3 * 4096, 4096));
  // The chunk was fetched twice (one refetch after a wrong answer), wrong both times.
  EXPECT_EQ(cache->stats().verification_failures, 2u);
}

TEST_F(BlobCacheTest, ABlake3IndexedLayerServesExactBytesAndRefusesACorruptChunk) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * 4096 + 77, 40);
  const Digest d = remote_.AddBlob(blob);
  ASSERT_OK(cache->RegisterLayer(
      LayerSpec{d, blob.size(), MakeIndex(d, blob, kChunk, ChunkDigestAlgorithm::kBlake3),
                VerifyMode::kChunk, "m1"}));
  remote_.CorruptByte(d, 3 * 4096 + 1);
  EXPECT_THAT(cache->Read(d, 3 * 4096, 10),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("chunk 3 ")));
  remote_.Heal();
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, blob.size()));
  EXPECT_EQ(got, blob);
  // Complete and every chunk verified: the audit's SHA-256 of the layer digest agrees too.
  EXPECT_TRUE(Idle(*cache));
  EXPECT_TRUE(cache->GetLayerInfo(d)->whole_verified);
}

TEST_F(BlobCacheTest, ABlake3LayerRecordedByAnEarlierProcessIsRecheckedWithBlake3) {
  const std::string blob = RandomBytes(8 * 4096, 41);
  Digest d;
  {
    auto cache = Open();
    d = remote_.AddBlob(blob);
    ASSERT_OK(cache->RegisterLayer(
        LayerSpec{d, blob.size(), MakeIndex(d, blob, kChunk, ChunkDigestAlgorithm::kBlake3),
                  VerifyMode::kChunk, "m1"}));
    ASSERT_OK(cache->Read(d, 0, 4096));  // one chunk recorded, the layer not sealed
    EXPECT_TRUE(Idle(*cache));
  }
  WriteDataFile(d, 0, static_cast<char>(blob[0] ^ 1));  // changes the recorded chunk
  auto cache = Open();
  ASSERT_OK(cache->RegisterLayer(
      LayerSpec{d, blob.size(), MakeIndex(d, blob, kChunk, ChunkDigestAlgorithm::kBlake3),
                VerifyMode::kChunk, "m1"}));
  const int before = remote_.requests();
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, 4096));
  EXPECT_EQ(got, blob.substr(0, 4096));
  EXPECT_EQ(remote_.requests(), before + 1);  // refetched: the rehash found the change
}

TEST_F(BlobCacheTest, ReadSpanningACorruptChunkIsDataLoss) {
  auto cache = Open();
  const std::string blob = RandomBytes(64 * 1024, 9);
  Digest d = AddChunked(*cache, blob);
  remote_.CorruptByte(d, 2 * 4096);
  EXPECT_THAT(cache->Read(d, 4096, 3 * 4096),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("chunk 2 ")));
}

TEST_F(BlobCacheTest, CorruptChunkIsNotCachedAndRereadsCorrectlyOnceTheRemoteIsFixed) {
  auto cache = Open();
  const std::string blob = RandomBytes(64 * 1024, 10);
  Digest d = AddChunked(*cache, blob);
  remote_.CorruptByte(d, 5 * 4096 + 1);
  ASSERT_THAT(cache->Read(d, 5 * 4096, 10),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("chunk 5 ")));
  ASSERT_OK_AND_ASSIGN(auto info, cache->GetLayerInfo(d));
  EXPECT_EQ(info.cached_chunks, 0u);
  remote_.Heal();
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 5 * 4096, 4096));
  EXPECT_EQ(got, blob.substr(5 * 4096, 4096));
  EXPECT_EQ(remote_.requests(), 3);  // the failed read fetched it twice (one refetch)
}

// One wrong answer (a flaky middlebox, a bad mirror) is not an EIO.
TEST_F(BlobCacheTest, AChunkThatFailsVerificationOnceIsFetchedAgainAndReadRight) {
  auto cache = Open();
  const std::string blob = RandomBytes(64 * 1024, 31);
  Digest d = AddChunked(*cache, blob);
  remote_.CorruptByte(d, 2 * 4096 + 5, /*answers=*/1);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 2 * 4096, 4096));
  EXPECT_EQ(got, blob.substr(2 * 4096, 4096));
  EXPECT_EQ(cache->stats().verification_failures, 1u);
  EXPECT_EQ(remote_.requests(), 2);
  EXPECT_THAT(Logged(), AllOf(HasSubstr("chunk 2 "), HasSubstr("fetching it once more")));
}

TEST_F(BlobCacheTest, ARefetchThatBringsTheRightBytesCountsOneRecoveryAndOneFailure) {
  auto cache = Open();
  const std::string blob = RandomBytes(64 * 1024, 34);
  Digest d = AddChunked(*cache, blob);
  remote_.CorruptByte(d, 2 * 4096 + 5, /*answers=*/1);
  ASSERT_OK(cache->Read(d, 2 * 4096, 4096).status());
  CacheStats s = cache->stats();
  EXPECT_EQ(s.verification_failures, 1u);
  EXPECT_EQ(s.refetch_recoveries, 1u);
}

// Each refusal is counted by the time the reader gets its error, not only when a later
// snapshot of the counters happens to be taken.
TEST_F(BlobCacheTest, AChunkRefusedAfterItsRefetchIsCountedBeforeTheReadReturns) {
  auto cache = Open();
  const std::string blob = RandomBytes(64 * 1024, 35);
  Digest d = AddChunked(*cache, blob);
  remote_.CorruptByte(d, 6 * 4096 + 1);
  ASSERT_THAT(cache->Read(d, 6 * 4096, 4096), StatusIs(absl::StatusCode::kDataLoss));
  CacheStats s = cache->stats();
  EXPECT_EQ(s.verification_failures, 2u);  // the answer and the refetch's
  EXPECT_EQ(s.refetch_recoveries, 0u);
}

TEST_F(BlobCacheTest, AChunkRightAtTheFirstAnswerCountsNoRecovery) {
  auto cache = Open();
  const std::string blob = RandomBytes(64 * 1024, 36);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, 64 * 1024).status());
  CacheStats s = cache->stats();
  EXPECT_EQ(s.verification_failures, 0u);
  EXPECT_EQ(s.refetch_recoveries, 0u);
}

// The refetch starts at the chunk that was wrong: the chunks before it landed and are not
// fetched again.
TEST_F(BlobCacheTest, TheRefetchAfterAWrongChunkStartsAtThatChunk) {
  auto cache = Open();
  const std::string blob = RandomBytes(64 * 1024, 32);
  Digest d = AddChunked(*cache, blob);
  remote_.CorruptByte(d, 3 * 4096 + 9, /*answers=*/1);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, 6 * 4096));
  EXPECT_EQ(got, blob.substr(0, 6 * 4096));
  ASSERT_EQ(remote_.requests(), 2);
  EXPECT_EQ(remote_.log()[1].offset, 3u * 4096);
}

// Two wrong answers for the same chunk: the read fails (EIO at the FUSE boundary), and no
// byte of it was served or cached.
TEST_F(BlobCacheTest, AChunkWrongTwiceIsDataLossAndNotCached) {
  auto cache = Open();
  const std::string blob = RandomBytes(64 * 1024, 33);
  Digest d = AddChunked(*cache, blob);
  remote_.CorruptByte(d, 4 * 4096 + 1, /*answers=*/2);
  EXPECT_THAT(cache->Read(d, 4 * 4096, 4096),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("chunk 4 ")));
  ASSERT_OK_AND_ASSIGN(auto info, cache->GetLayerInfo(d));
  EXPECT_EQ(info.cached_chunks, 0u);
  EXPECT_EQ(cache->stats().verification_failures, 2u);
  // The remote is right again: the next read fetches it anew.
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 4 * 4096, 4096));
  EXPECT_EQ(got, blob.substr(4 * 4096, 4096));
}

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

TEST_F(BlobCacheTest, FailingRemoteGivesDeadlineExceededThenReadsRecover) {
  CacheOptions o = Options();
  o.read_deadline = absl::Seconds(1);
  auto cache = Open(o);
  const std::string blob = RandomBytes(16 * 1024, 16);
  Digest d = AddChunked(*cache, blob);
  remote_.Fail(absl::UnavailableError("registry down"));
  EXPECT_THAT(cache->Read(d, 0, 100),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr(d.str())));
  EXPECT_GT(remote_.requests(), 1);  // retried with backoff
  remote_.Heal();
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, 100));
  EXPECT_EQ(got, blob.substr(0, 100));
}

TEST_F(BlobCacheTest, HungRemoteGivesDeadlineExceededNotAHang) {
  CacheOptions o = Options();
  o.read_deadline = absl::Seconds(1);
  auto cache = Open(o);
  const std::string blob = RandomBytes(16 * 1024, 17);
  Digest d = AddChunked(*cache, blob);
  remote_.Hold();
  EXPECT_THAT(cache->Read(d, 0, 100),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr(d.str())));
  remote_.Release();
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, 100));
  EXPECT_EQ(got, blob.substr(0, 100));
}

TEST_F(BlobCacheTest, PermanentRemoteErrorIsReturnedWithoutRetrying) {
  auto cache = Open();
  const std::string blob = RandomBytes(8 * 1024, 18);
  Digest d = AddChunked(*cache, blob);
  remote_.Fail(absl::PermissionDeniedError("denied"));
  EXPECT_THAT(cache->Read(d, 0, 100),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("denied")));
  EXPECT_EQ(remote_.requests(), 1);
}

TEST_F(BlobCacheTest, InternalErrorFromTheRemoteIsReturnedWithoutRetrying) {
  auto cache = Open();
  const std::string blob = RandomBytes(8 * 1024, 48);
  Digest d = AddChunked(*cache, blob);
  remote_.Fail(absl::InternalError("remote bug"));
  EXPECT_THAT(cache->Read(d, 0, 100),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("remote bug")));
  EXPECT_EQ(remote_.requests(), 1);
}

TEST_F(BlobCacheTest, TooManyRequestsFromTheRemoteIsRetried) {
  auto cache = Open();
  const std::string blob = RandomBytes(8 * 1024, 49);
  Digest d = AddChunked(*cache, blob);
  remote_.Fail(absl::ResourceExhaustedError("HTTP 429"));
  absl::StatusOr<std::string> got;
  std::thread reader([&] { got = cache->Read(d, 0, 100); });
  EXPECT_TRUE(remote_.WaitForRequests(d, 2));
  remote_.Heal();
  reader.join();
  ASSERT_OK(got.status());
  EXPECT_EQ(*got, blob.substr(0, 100));
}

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

TEST_F(BlobCacheTest, OpenVerifiedBlobGivesAReadOnlyFileOfTheWholeSealedLayerOnly) {
  auto cache = Open();
  const std::string blob = RandomBytes(16 * 1024, 22);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, 4096));
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(cache->OpenVerifiedBlob(d, 0, blob.size()), -1);  // not all verified yet
  ASSERT_OK(cache->Read(d, 0, blob.size()));
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(cache->OpenVerifiedBlob(d, 0, blob.size() - 1), -1);  // a part of the layer
  EXPECT_EQ(cache->OpenVerifiedBlob(d, 1, blob.size() - 1), -1);
  const int fd = cache->OpenVerifiedBlob(d, 0, blob.size());
  ASSERT_GE(fd, 0);
  std::string got(blob.size(), '\0');
  EXPECT_EQ(pread(fd, got.data(), got.size(), 0), static_cast<ssize_t>(blob.size()));
  EXPECT_EQ(got, blob);
  EXPECT_EQ(fcntl(fd, F_GETFL) & O_ACCMODE, O_RDONLY);
  close(fd);
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

TEST_F(BlobCacheTest, AReaderStreamingALayerGetsTheRestFetchedInLargeRequests) {
  CacheOptions o = Options();
  o.readahead_min = 8 * 1024;
  o.readahead_max = 8 * 1024;
  o.stream_after = 16 * 1024;
  o.stream_segments = 4;
  o.max_request_bytes = 4 * kChunk;
  auto cache = Open(o);
  const std::string blob = RandomBytes(256 * 1024, 24);
  Digest d = AddChunked(*cache, blob);
  for (uint64_t off = 0; off < 16 * 1024; off += 4096) {
    ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, off, 4096));
    ASSERT_EQ(got, blob.substr(off, 4096));
  }
  ASSERT_TRUE(Idle(*cache));
  ASSERT_OK_AND_ASSIGN(auto info, cache->GetLayerInfo(d));
  EXPECT_EQ(info.cached_chunks, info.chunk_count);  // the rest came without being read
  EXPECT_EQ(remote_.bytes_served(), blob.size());   // each byte once
  // The rest (240 KiB, 60 chunks) came in stream_request_bytes (64 MiB) requests, not in
  // max_request_bytes pieces: a request costs the registry more than its bytes. The first
  // 16 KiB took at most one request per 4 KiB read.
  EXPECT_LE(remote_.requests(), 4 + 4);
}

// What the stream fetches waits in the page cache until the reader takes it: it runs at most
// stream_segments requests ahead of the reader, and follows it.
TEST_F(BlobCacheTest, TheStreamStaysWithinItsRequestsAheadOfTheReader) {
  CacheOptions o = Options();
  o.readahead_min = 8 * 1024;
  o.readahead_max = 8 * 1024;
  o.stream_after = 16 * 1024;
  o.stream_segments = 2;
  o.stream_request_bytes = 4 * kChunk;
  auto cache = Open(o);
  const std::string blob = RandomBytes(256 * 1024, 28);
  Digest d = AddChunked(*cache, blob);
  for (uint64_t off = 0; off < 16 * 1024; off += 4096) ASSERT_OK(cache->Read(d, off, 4096));
  ASSERT_TRUE(Idle(*cache));
  // The reader is at 16 KiB: the stream asked for at most 2 requests of 16 KiB beyond it.
  EXPECT_LE(cache->GetLayerInfo(d)->cached_chunks, (16 + 2 * 16) * 1024 / kChunk);
  EXPECT_GT(cache->GetLayerInfo(d)->cached_chunks, 16 * 1024 / kChunk);
  for (uint64_t off = 16 * 1024; off < blob.size(); off += 4096) {
    ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, off, 4096));
    ASSERT_EQ(got, blob.substr(off, 4096));
  }
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(remote_.bytes_served(), blob.size());  // each byte once
}

// Tensor-parallel ranks: each reads its quarter of every tensor, so no read continues the run
// of the one before it; once stream_after bytes were read that way, the rest of the layer is
// streamed, each byte fetched once.
TEST_F(BlobCacheTest, RanksReadingSlicesOfEveryTensorGetTheLayerStreamed) {
  CacheOptions o = Options();
  o.readahead_min = 8 * 1024;
  o.readahead_max = 8 * 1024;
  o.stream_after = 16 * 1024;
  o.stream_segments = 4;
  o.max_request_bytes = 4 * kChunk;
  auto cache = Open(o);
  const std::string blob = RandomBytes(1024 * 1024, 29);
  Digest d = AddChunked(*cache, blob);
  // The quarters of 256 KiB tensors, one 4 KiB read per rank in turn: each quarter starts
  // farther past the other ranks' runs than the 8 chunks a run may skip.
  for (uint64_t tensor = 0; tensor < 2; ++tensor) {
    for (uint64_t step = 0; step < 2; ++step) {
      for (uint64_t rank = 0; rank < 4; ++rank) {
        const uint64_t off = tensor * 256 * 1024 + rank * 64 * 1024 + step * 4096;
        ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, off, 4096));
        ASSERT_EQ(got, blob.substr(off, 4096));
      }
    }
  }
  ASSERT_TRUE(Idle(*cache));
  ASSERT_OK_AND_ASSIGN(auto info, cache->GetLayerInfo(d));
  EXPECT_EQ(info.cached_chunks, info.chunk_count);  // the rest came without being read
  EXPECT_EQ(remote_.bytes_served(), blob.size());   // each byte once
}

// A loader reads a model's files one after another: once the stream of the file it reads has
// asked for its last chunk, the next file's stream starts, ahead of the loader.
TEST_F(BlobCacheTest, AStreamedLayerStartsTheStreamOfItsSuccessor) {
  CacheOptions o = Options();
  o.readahead_min = 8 * 1024;
  o.readahead_max = 8 * 1024;
  o.stream_after = 16 * 1024;
  o.stream_segments = 2;
  o.stream_request_bytes = 8 * kChunk;
  auto cache = Open(o);
  const std::string first = RandomBytes(64 * 1024, 30);
  const std::string second = RandomBytes(256 * 1024, 31);
  Digest a = AddChunked(*cache, first);
  Digest b = AddChunked(*cache, second);
  cache->SetStreamSuccessor(a, b);
  for (uint64_t off = 0; off < first.size(); off += 4096) {
    ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(a, off, 4096));
    ASSERT_EQ(got, first.substr(off, 4096));
  }
  ASSERT_TRUE(Idle(*cache));
  // Its first stream_segments requests, no more: the loader is not there yet.
  EXPECT_EQ(cache->GetLayerInfo(b)->cached_chunks, 2 * 8u);
  for (uint64_t off = 0; off < second.size(); off += 4096) {
    ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(b, off, 4096));
    ASSERT_EQ(got, second.substr(off, 4096));
  }
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(remote_.bytes_served(), first.size() + second.size());  // each byte once
}

TEST_F(BlobCacheTest, WithoutASuccessorTheNextLayerIsNotFetched) {
  CacheOptions o = Options();
  o.readahead_min = 8 * 1024;
  o.readahead_max = 8 * 1024;
  o.stream_after = 16 * 1024;
  auto cache = Open(o);
  const std::string first = RandomBytes(64 * 1024, 32);
  Digest a = AddChunked(*cache, first);
  Digest b = AddChunked(*cache, RandomBytes(64 * 1024, 33));
  for (uint64_t off = 0; off < first.size(); off += 4096) ASSERT_OK(cache->Read(a, off, 4096));
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(cache->GetLayerInfo(b)->cached_chunks, 0u);
}

TEST_F(BlobCacheTest, ALoneReadFetchesNoStream) {
  CacheOptions o = Options();
  o.readahead_min = 8 * 1024;
  o.stream_after = 16 * 1024;
  auto cache = Open(o);
  const std::string blob = RandomBytes(256 * 1024, 25);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 100 * 1024, 12 * 1024));
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(remote_.bytes_served(), 3 * kChunk);  // the chunks it touched, nothing more
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

// Bodies arrive in pieces of any size; each chunk is hashed piece by piece and written to the
// data file in page-aligned writes, the unaligned tail of a piece waiting for the next.
TEST_F(BlobCacheTest, ChunksArrivingInUnalignedPiecesAreServedAndStoredExactly) {
  constexpr uint64_t kBig = 64 * 1024;
  const std::string blob = RandomBytes(5 * kBig + 777, 31);
  Digest d = Digest::Of(blob);
  remote_.AddBlob(blob);
  remote_.SetPieceSizes({1000, 4096, 5000, 70000, 1, 12288, 3});
  const LayerSpec spec{d, blob.size(), MakeIndex(d, blob, kBig), VerifyMode::kChunk, "m1"};
  {
    auto cache = Open();
    ASSERT_OK(cache->RegisterLayer(spec));
    ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, blob.size()));
    EXPECT_TRUE(got == blob);
    ASSERT_TRUE(Idle(*cache));
    EXPECT_TRUE(cache->GetLayerInfo(d)->audited);  // the file hashes to the layer digest
  }
  remote_.ResetCounters();
  auto cache = Open();  // the data file is what a restart serves
  ASSERT_OK(cache->RegisterLayer(spec));
  ASSERT_OK_AND_ASSIGN(std::string again, cache->Read(d, 0, blob.size()));
  EXPECT_TRUE(again == blob);
  EXPECT_EQ(remote_.bytes_served(), 0u);
}

TEST_F(BlobCacheTest, AChunkThatFailsVerificationAfterArrivingInPiecesIsNeverServed) {
  constexpr uint64_t kBig = 64 * 1024;
  const std::string blob = RandomBytes(3 * kBig, 32);
  Digest d = Digest::Of(blob);
  remote_.AddBlob(blob);
  remote_.SetPieceSizes({3000, 65536, 777});
  remote_.CorruptByte(d, kBig + 5);
  auto cache = Open();
  ASSERT_OK(cache->RegisterLayer(
      LayerSpec{d, blob.size(), MakeIndex(d, blob, kBig), VerifyMode::kChunk, "m1"}));
  EXPECT_THAT(cache->Read(d, kBig, 10),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("chunk 1 of layer")));
  ASSERT_OK_AND_ASSIGN(std::string first, cache->Read(d, 0, kBig));
  EXPECT_TRUE(first == blob.substr(0, kBig));
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

TEST_F(BlobCacheTest, SequentialReadaheadWindowIsHalfTheRunUpToTheMaximum) {
  CacheOptions o = Options();
  o.readahead_min = 8 * 1024;
  o.readahead_max = 32 * 1024;
  auto cache = Open(o);
  const std::string blob = RandomBytes(256 * 1024, 28);
  Digest d = AddChunked(*cache, blob);
  std::vector<uint64_t> windows;
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, i * 8192, 8192));
    ASSERT_EQ(got, blob.substr(i * 8192, 8192));
    windows.push_back(cache->GetLayerInfo(d)->readahead_window);
  }
  // A first read starts a run; runs of 16 ... 80 KiB then get half their length.
  EXPECT_EQ(windows, (std::vector<uint64_t>{0, 8192, 12288, 16384, 20480, 24576, 28672, 32768,
                                            32768, 32768}));
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(cache->GetLayerInfo(d)->cached_chunks, 28u);  // 80 KiB read, 32 KiB ahead
  // Far past the run (more than 8 chunks): a new run, no readahead.
  ASSERT_OK(cache->Read(d, 200 * 1024, 10));
  EXPECT_EQ(cache->GetLayerInfo(d)->readahead_window, 0u);
}

TEST_F(BlobCacheTest, ReadsArrivingOutOfOrderStillExtendTheRun) {
  CacheOptions o = Options();
  o.readahead_min = 8 * 1024;
  o.readahead_max = 32 * 1024;
  auto cache = Open(o);
  const std::string blob = RandomBytes(256 * 1024, 29);
  Digest d = AddChunked(*cache, blob);
  // The kernel's parallel readahead requests: chunk 0, then 3, 1, 2 (within 8 chunks).
  for (uint64_t c : {0, 3, 1, 2}) {
    ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, c * kChunk, kChunk));
    ASSERT_EQ(got, blob.substr(c * kChunk, kChunk));
  }
  EXPECT_EQ(cache->GetLayerInfo(d)->readahead_window, 8192u);
}

TEST_F(BlobCacheTest, PrefetchAllFetchesTheWholeLayerInTheBackground) {
  auto cache = Open();
  const std::string blob = RandomBytes(64 * 1024, 29);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Prefetch(d, PrefetchPolicy::kAll));
  ASSERT_TRUE(Idle(*cache));
  ASSERT_OK_AND_ASSIGN(auto info, cache->GetLayerInfo(d));
  EXPECT_EQ(info.cached_chunks, 16u);
  EXPECT_TRUE(info.whole_verified);
  const int requests = remote_.requests();
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 0, blob.size()));
  EXPECT_EQ(got, blob);
  EXPECT_EQ(remote_.requests(), requests);
}

TEST_F(BlobCacheTest, PrefetchHeadersOnlyFetchesJustTheHeaderRanges) {
  auto cache = Open();
  const std::string blob = RandomBytes(64 * 1024, 30);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Prefetch(d, PrefetchPolicy::kHeadersOnly, {{0, 8}, {8, 5000}}));
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(cache->GetLayerInfo(d)->cached_chunks, 2u);
  EXPECT_EQ(remote_.bytes_served(), 2 * kChunk);
}

TEST_F(BlobCacheTest, ForegroundReadGoesAheadOfQueuedPrefetch) {
  CacheOptions o = Options();
  o.fetch_threads = 1;
  o.prefetch_concurrency = 2;
  o.max_request_bytes = kChunk;
  auto cache = Open(o);
  const std::string blob = RandomBytes(32 * 1024, 31);
  Digest d = AddChunked(*cache, blob);
  remote_.Hold();
  ASSERT_OK(cache->Prefetch(d, PrefetchPolicy::kAll));
  ASSERT_TRUE(remote_.WaitForHeld(1));  // bulk chunk 0 running, chunk 1 queued
  absl::StatusOr<std::string> got;
  std::thread reader([&] { got = cache->Read(d, 7 * 4096, 10); });
  while (cache->stats().chunk_misses < 1) absl::SleepFor(absl::Milliseconds(1));
  remote_.Release();
  reader.join();
  ASSERT_OK(got);
  EXPECT_EQ(*got, blob.substr(7 * 4096, 10));
  ASSERT_TRUE(Idle(*cache));
  auto log = remote_.log();
  ASSERT_GE(log.size(), 2u);
  EXPECT_EQ(log[0].offset, 0u);
  EXPECT_EQ(log[1].offset, 7 * 4096u);
  EXPECT_EQ(log.size(), 8u);  // every chunk exactly once
}

TEST_F(BlobCacheTest, SixteenConcurrentReadersGetExactBytesAndEachChunkIsFetchedOnce) {
  CacheOptions o = Options();
  o.readahead_min = 0;
  auto cache = Open(o);
  const std::string blob = RandomBytes(256 * 1024 + 17, 32);
  Digest d = AddChunked(*cache, blob);
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      for (int i = 0; i < 60; ++i) {
        uint64_t off = rng() % blob.size();
        uint64_t len = 1 + rng() % 12000;
        auto got = cache->Read(d, off, len);
        if (!got.ok()) {
          errors++;
        } else if (*got != blob.substr(off, len)) {
          mismatches++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_LE(remote_.bytes_served(), blob.size());
  EXPECT_EQ(cache->stats().bytes_fetched, remote_.bytes_served());
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

namespace modelfs {
namespace {

// Registry health: reads run on a FakeClock, so deadlines and windows are exact
// and nothing sleeps. The read deadline is 5 s; a timed-out read opens a 2 s window in which
// reads of that registry wait at most 1 s.
class RegistryHealthTest : public BlobCacheTest {
 protected:
  static constexpr absl::Duration kDeadline = absl::Seconds(5);

  void SetUp() override { remote_.set_clock(&clock_); }

  std::unique_ptr<BlobCache> OpenOnFakeClock() {
    CacheOptions o = Options();
    o.clock = &clock_;
    o.read_deadline = kDeadline;
    return Open(o);
  }

  // Runs cache.Read on another thread; the test moves the clock and then joins it.
  struct PendingRead {
    std::thread thread;
    absl::StatusOr<std::string> result = absl::UnknownError("not run");
    absl::StatusOr<std::string> Join() {
      thread.join();
      return result;
    }
  };
  std::unique_ptr<PendingRead> StartRead(BlobCache& cache, const Digest& d, uint64_t offset,
                                         uint64_t length) {
    auto p = std::make_unique<PendingRead>();
    PendingRead* raw = p.get();
    p->thread = std::thread(
        [&cache, raw, d, offset, length] { raw->result = cache.Read(d, offset, length); });
    return p;
  }

  // A read of chunk 0 of `d` against a hung registry, waited out: the registry's first timeout.
  void TimeOut(BlobCache& cache, const Digest& d) {
    remote_.HoldOnly(d);
    remote_.Hold();
    auto read = StartRead(cache, d, 0, 100);
    ASSERT_TRUE(remote_.WaitForHeld(1));
    clock_.Advance(kDeadline);
    EXPECT_THAT(read->Join(), StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr(d.str())));
    // The held fetch gives up on its own (same deadline); later WaitForHeld counts start at 0.
    ASSERT_TRUE(remote_.WaitForNoneHeld());
    remote_.Release();
  }

  FakeClock clock_;
};

TEST_F(RegistryHealthTest, ASlowRegistryServesAReaderThatRetriesASecondAfterATimeout) {
  auto cache = OpenOnFakeClock();
  const std::string blob = RandomBytes(8 * kChunk, 40);
  Digest d = AddChunked(*cache, blob);
  TimeOut(*cache, d);
  clock_.Advance(absl::Seconds(1));
  remote_.SetLatency(absl::Milliseconds(800));
  auto read = StartRead(*cache, d, 2 * kChunk, 100);
  ASSERT_TRUE(remote_.WaitForRequests(d, 2));
  clock_.Advance(absl::Milliseconds(800));
  ASSERT_OK_AND_ASSIGN(std::string got, read->Join());
  EXPECT_EQ(got, blob.substr(2 * kChunk, 100));
}

TEST_F(RegistryHealthTest, OneRegistrysTimeoutDoesNotShortenReadsFromAnother) {
  auto cache = OpenOnFakeClock();
  const std::string a = RandomBytes(4 * kChunk, 41), b = RandomBytes(4 * kChunk, 42);
  remote_.SetEndpoint(Digest::Of(a), "registry-a");  // before registering: the cache asks then
  Digest da = AddChunked(*cache, a, "model-a");
  remote_.SetEndpoint(Digest::Of(b), "registry-b");  // before registering: the cache asks then
  Digest db = AddChunked(*cache, b, "model-b");
  TimeOut(*cache, da);
  remote_.SetLatency(absl::Milliseconds(800));
  auto read = StartRead(*cache, db, 0, 100);
  ASSERT_TRUE(remote_.WaitForRequests(db, 1));
  clock_.Advance(absl::Milliseconds(800));
  ASSERT_OK_AND_ASSIGN(std::string got, read->Join());
  EXPECT_EQ(got, b.substr(0, 100));
}

TEST_F(RegistryHealthTest, TheFirstSuccessRestoresTheFullDeadline) {
  auto cache = OpenOnFakeClock();
  const std::string blob = RandomBytes(8 * kChunk, 43);
  Digest d = AddChunked(*cache, blob);
  TimeOut(*cache, d);
  ASSERT_OK(cache->Read(d, kChunk, 100));  // the registry is back and answers at once
  remote_.SetLatency(absl::Milliseconds(800));
  auto read = StartRead(*cache, d, 2 * kChunk, 100);
  ASSERT_TRUE(remote_.WaitForRequests(d, 3));
  clock_.Advance(absl::Milliseconds(800));
  ASSERT_OK_AND_ASSIGN(std::string got, read->Join());
  EXPECT_EQ(got, blob.substr(2 * kChunk, 100));
}

TEST_F(RegistryHealthTest, AReadRightAfterATimeoutWaitsOnlyTheShortDeadline) {
  auto cache = OpenOnFakeClock();
  const std::string blob = RandomBytes(8 * kChunk, 44);
  Digest d = AddChunked(*cache, blob);
  TimeOut(*cache, d);
  remote_.Hold();
  auto read = StartRead(*cache, d, 2 * kChunk, 100);
  ASSERT_TRUE(remote_.WaitForHeld(1));
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(read->Join(), StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr(d.str())));
  remote_.Release();
}

TEST_F(RegistryHealthTest, AShortenedReadThatFailsDoesNotExtendTheWindow) {
  auto cache = OpenOnFakeClock();
  const std::string blob = RandomBytes(8 * kChunk, 45);
  Digest d = AddChunked(*cache, blob);
  TimeOut(*cache, d);
  remote_.Hold();
  auto short_read = StartRead(*cache, d, 2 * kChunk, 100);
  ASSERT_TRUE(remote_.WaitForHeld(1));
  clock_.Advance(absl::Milliseconds(1900));  // fails 1 s in, 100 ms before the window ends
  EXPECT_THAT(short_read->Join(), StatusIs(absl::StatusCode::kDeadlineExceeded));
  clock_.Advance(absl::Milliseconds(100));
  remote_.Release();
  ASSERT_TRUE(remote_.WaitForNoneHeld());        // before the latency applies to it too
  remote_.SetLatency(absl::Milliseconds(1500));  // longer than a shortened read waits
  auto read = StartRead(*cache, d, 4 * kChunk, 100);
  ASSERT_TRUE(remote_.WaitForRequests(d, 3));
  clock_.Advance(absl::Milliseconds(1500));
  ASSERT_OK_AND_ASSIGN(std::string got, read->Join());
  EXPECT_EQ(got, blob.substr(4 * kChunk, 100));
}

TEST_F(RegistryHealthTest, AHungRegistryCannotTakeTheFetchThreadsOfAnother) {
  auto cache = OpenOnFakeClock();  // 4 fetch threads
  const std::string a = RandomBytes(16 * kChunk, 46), b = RandomBytes(4 * kChunk, 47);
  remote_.SetEndpoint(Digest::Of(a), "registry-a");  // before registering: the cache asks then
  Digest da = AddChunked(*cache, a, "model-a");
  remote_.SetEndpoint(Digest::Of(b), "registry-b");  // before registering: the cache asks then
  Digest db = AddChunked(*cache, b, "model-b");
  remote_.HoldOnly(da);
  remote_.Hold();
  std::vector<std::unique_ptr<PendingRead>> stuck;
  for (uint64_t c = 0; c < 8; c += 2) stuck.push_back(StartRead(*cache, da, c * kChunk, 100));
  ASSERT_TRUE(remote_.WaitForHeld(4));
  auto read = StartRead(*cache, db, 0, 100);
  const bool fetched = remote_.WaitForRequests(db, 1);
  remote_.Release();
  for (auto& r : stuck) EXPECT_OK(r->Join());
  EXPECT_TRUE(fetched) << "registry-b was not asked while registry-a held every fetch thread";
  if (!fetched) clock_.Advance(kDeadline);
  ASSERT_OK_AND_ASSIGN(std::string got, read->Join());
  EXPECT_EQ(got, b.substr(0, 100));
}

}  // namespace
}  // namespace modelfs

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

// This kernel has no CONFIG_FS_VERITY: the cache says so once, and the scrub is still on.
TEST_F(BlobCacheTest, AFilesystemWithoutFsVerityIsDetectedAndReported) {
  CacheOptions o = Options();
  std::filesystem::create_directories(o.dir);
  const absl::Status probe = ProbeFsVerity(o.dir);
  if (probe.ok()) GTEST_SKIP() << "the filesystem of " << o.dir << " supports fs-verity";
  EXPECT_THAT(probe, StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("CONFIG_FS_VERITY")));
  auto cache = Open(o);
  EXPECT_FALSE(cache->stats().fs_verity);
  EXPECT_THAT(Logged(),
              HasSubstr("fs-verity: the filesystem of " + o.dir + " does not support fs-verity"));
}

TEST_F(BlobCacheTest, TheProbeLeavesNoFileInTheCacheDirectory) {
  CacheOptions o = Options();
  std::filesystem::create_directories(o.dir);
  (void)ProbeFsVerity(o.dir);
  EXPECT_TRUE(std::filesystem::is_empty(o.dir));
}

// --- fs-verity, with a fake kernel (this one has no CONFIG_FS_VERITY) ---

// Files are known by inode: Enable gives one a digest, which tests may change or take away.
class FakeVerity : public VerityOps {
 public:
  absl::Status Probe(const std::string&) override { return probe_; }
  absl::Status Enable(const std::string& path) override {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return absl::InternalError("stat " + path);
    // As the kernel: no fs-verity for a file open for writing (here, by this process).
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      const int fd = std::atoi(entry.path().filename().c_str());
      struct stat fst;
      const int flags = fcntl(fd, F_GETFL);
      if (flags >= 0 && (flags & O_ACCMODE) != O_RDONLY && fstat(fd, &fst) == 0 &&
          fst.st_ino == st.st_ino && fst.st_dev == st.st_dev) {
        return absl::FailedPreconditionError("ETXTBSY");
      }
    }
    absl::MutexLock lock(&mu_);
    enabled_++;
    digests_.emplace(st.st_ino, absl::StrCat("sha256:fake-", st.st_ino));
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Measure(int fd) override {
    struct stat st;
    if (fstat(fd, &st) != 0) return absl::InternalError("fstat");
    absl::MutexLock lock(&mu_);
    auto it = digests_.find(st.st_ino);
    if (it == digests_.end()) return absl::NotFoundError("ENODATA");
    return it->second;
  }
  void set_probe(absl::Status s) { probe_ = std::move(s); }
  int enabled() {
    absl::MutexLock lock(&mu_);
    return enabled_;
  }
  // The file at `path` now measures `digest` ("" : it has no fs-verity).
  void SetDigest(const std::filesystem::path& path, const std::string& digest) {
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    absl::MutexLock lock(&mu_);
    if (digest.empty()) {
      digests_.erase(st.st_ino);
    } else {
      digests_[st.st_ino] = digest;
    }
  }

 private:
  absl::Status probe_;
  absl::Mutex mu_;
  int enabled_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<ino_t, std::string> digests_ ABSL_GUARDED_BY(mu_);
};

class FsVerityTest : public BlobCacheTest {
 protected:
  FsVerityTest() { verity_ = &fake_; }
  std::filesystem::path DataFile(const Digest& d) {
    return dir_.Join("cache") / "blobs" / "sha256" / (std::string(d.hex()) + ".data");
  }
  FakeVerity fake_;
};

// A cache written before the verity column: its sealed layers stay trusted and the column is
// added.
TEST_F(BlobCacheTest, ACacheFromBeforeFsVerityGainsTheColumnAndKeepsItsSealedLayers) {
  const std::string blob = RandomBytes(8 * kChunk, 66);
  Digest d = CacheWholeAndClose(blob);
  const std::string db_path = (dir_.Join("cache") / "cache.db").string();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, "ALTER TABLE layers DROP COLUMN verity", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  {
    auto cache = Open();
    ASSERT_OK(RegisterChunked(*cache, d, blob));
    EXPECT_TRUE(cache->GetLayerInfo(d)->whole_verified);
  }
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, "SELECT verity FROM layers", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
}

TEST_F(FsVerityTest, ASealedLayerGetsFsVerityWhenTheCacheIsNextOpened) {
  const std::string blob = RandomBytes(8 * kChunk, 60);
  Digest d = CacheWholeAndClose(blob);
  EXPECT_EQ(fake_.enabled(), 0);  // the daemon held it open for writing until now
  auto cache = Open();
  EXPECT_EQ(fake_.enabled(), 1);
}

TEST_F(FsVerityTest, ALayerWhoseFsVerityDigestIsUnchangedIsTrustedWithoutARehash) {
  const std::string blob = RandomBytes(8 * kChunk, 61);
  Digest d = CacheWholeAndClose(blob);
  { auto cache = Open(); }  // enables and records it
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  EXPECT_EQ(fake_.enabled(), 1);
  EXPECT_TRUE(cache->GetLayerInfo(d)->whole_verified);
  const int fd = cache->OpenVerifiedBlob(d, 0, blob.size());
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
}

TEST_F(FsVerityTest, ASealedLayerWhoseFsVerityDigestDiffersIsNotTrusted) {
  const std::string blob = RandomBytes(8 * kChunk, 62);
  Digest d = CacheWholeAndClose(blob);
  { auto cache = Open(); }
  fake_.SetDigest(DataFile(d), "sha256:someone-else");
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  EXPECT_FALSE(cache->GetLayerInfo(d)->whole_verified);
  EXPECT_EQ(cache->OpenVerifiedBlob(d, 0, blob.size()), -1);
  EXPECT_THAT(Logged(), AllOf(HasSubstr("digest=" + d.str()),
                              HasSubstr("fs-verity digest sha256:someone-else, recorded")));
}

TEST_F(FsVerityTest, ASealedLayerThatLostItsFsVerityIsNotTrusted) {
  const std::string blob = RandomBytes(8 * kChunk, 63);
  Digest d = CacheWholeAndClose(blob);
  { auto cache = Open(); }
  fake_.SetDigest(DataFile(d), "");
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  EXPECT_FALSE(cache->GetLayerInfo(d)->whole_verified);
  EXPECT_THAT(Logged(), HasSubstr("lost its fs-verity"));
}

TEST_F(FsVerityTest, ALayerNoLongerTrustedIsStillServedWithItsRightBytes) {
  const std::string blob = RandomBytes(8 * kChunk, 64);
  Digest d = CacheWholeAndClose(blob);
  { auto cache = Open(); }
  fake_.SetDigest(DataFile(d), "sha256:someone-else");
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 2 * kChunk, kChunk));
  EXPECT_EQ(got, blob.substr(2 * kChunk, kChunk));
}

// Sealed in this process, the layer's file is held open for writing: the scrub moves the layer
// to a read-only fd and enables fs-verity then.
TEST_F(FsVerityTest, ALayerSealedInThisProcessGetsFsVerityFromTheNextScrub) {
  auto cache = Open();
  const std::string blob = RandomBytes(8 * kChunk, 67);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, blob.size()).status());
  ASSERT_TRUE(Idle(*cache));
  EXPECT_EQ(cache->ScrubOnce(), 1);
  EXPECT_EQ(fake_.enabled(), 1);
}

TEST_F(FsVerityTest, ALayerMovedToAReadOnlyFdStillServesAndPassesThrough) {
  auto cache = Open();
  const std::string blob = RandomBytes(8 * kChunk, 68);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, blob.size()).status());
  ASSERT_TRUE(Idle(*cache));
  cache->ScrubOnce();
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d, 3 * kChunk, 100));
  EXPECT_EQ(got, blob.substr(3 * kChunk, 100));
  const int fd = cache->OpenVerifiedBlob(d, 0, blob.size());
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
  EXPECT_EQ(cache->stats().cached_bytes, blob.size());
}

TEST_F(FsVerityTest, TheDigestTheScrubEnabledIsTrustedAfterARestart) {
  const std::string blob = RandomBytes(8 * kChunk, 69);
  Digest d;
  {
    auto cache = Open();
    d = AddChunked(*cache, blob);
    ASSERT_OK(cache->Read(d, 0, blob.size()).status());
    ASSERT_TRUE(Idle(*cache));
    cache->ScrubOnce();
  }
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  EXPECT_TRUE(cache->GetLayerInfo(d)->whole_verified);
  EXPECT_EQ(fake_.enabled(), 1);
}

// A read's span still holds the read-write fd: fs-verity waits for the next pass.
TEST_F(FsVerityTest, AReaderHoldingTheOldFdPutsFsVerityOffToTheNextScrub) {
  auto cache = Open();
  const std::string blob = RandomBytes(8 * kChunk, 70);
  Digest d = AddChunked(*cache, blob);
  ASSERT_OK(cache->Read(d, 0, blob.size()).status());
  ASSERT_TRUE(Idle(*cache));
  {
    ASSERT_OK_AND_ASSIGN(std::vector<BlobSpan> spans, cache->ReadSpans(d, 0, 100));
    cache->ScrubOnce();
    EXPECT_EQ(fake_.enabled(), 0);
  }
  cache->ScrubOnce();
  EXPECT_EQ(fake_.enabled(), 1);
}

TEST_F(FsVerityTest, WhereTheFilesystemHasNoFsVerityNoneIsEnabled) {
  fake_.set_probe(absl::UnimplementedError("no fs-verity here"));
  const std::string blob = RandomBytes(8 * kChunk, 65);
  Digest d = CacheWholeAndClose(blob);
  auto cache = Open();
  ASSERT_OK(RegisterChunked(*cache, d, blob));
  EXPECT_EQ(fake_.enabled(), 0);
  EXPECT_TRUE(cache->GetLayerInfo(d)->whole_verified);
}

}  // namespace
}  // namespace modelfs
