// Registry health (EndpointHealth) as the read path applies it: a timed-out registry's reads
// wait less for a while, others' not.
#include "tests/cache/blob_cache_fixture.h"

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
