// BlobCache's read path: single flight, coalesced requests, each chunk verified (and a wrong
// answer fetched once more), whole-layer and insecure reads, remote errors, readahead, streams,
// prefetch, concurrency, and the passthrough open of a sealed layer.
#include "tests/cache/blob_cache_fixture.h"

namespace modelfs {
namespace {

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

}  // namespace
}  // namespace modelfs
