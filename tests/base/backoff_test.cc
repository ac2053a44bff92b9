// Backoff and RetryableCode on a FakeClock: waits are exact and nothing sleeps.
#include "core/base/backoff.h"

#include <gtest/gtest.h>

#include <thread>

#include "testsupport/fakes/fake_clock.h"

namespace modelfs {
namespace {

using ::modelfs::testing::FakeClock;

BackoffPolicy Exact(absl::Duration initial, absl::Duration max, int max_attempts = 0) {
  BackoffPolicy p;
  p.initial_backoff = initial;
  p.max_backoff = max;
  p.max_attempts = max_attempts;
  p.jitter = false;
  return p;
}

TEST(BackoffTest, WaitsDoubleFromTheInitialBackoffUpToTheMaximum) {
  FakeClock clock;
  Backoff b(Exact(absl::Milliseconds(100), absl::Seconds(1)), &clock, absl::InfiniteFuture());
  std::vector<absl::Duration> waits;
  for (int i = 0; i < 6; ++i) waits.push_back(*b.Next());
  EXPECT_EQ(waits, (std::vector<absl::Duration>{absl::Milliseconds(100), absl::Milliseconds(200),
                                                absl::Milliseconds(400), absl::Milliseconds(800),
                                                absl::Seconds(1), absl::Seconds(1)}));
  EXPECT_EQ(b.attempts(), 7);
}

TEST(BackoffTest, NoWaitIsOfferedOnceTheAttemptsAreUsedUp) {
  FakeClock clock;
  Backoff b(Exact(absl::Milliseconds(100), absl::Seconds(1), 3), &clock, absl::InfiniteFuture());
  EXPECT_TRUE(b.Next().has_value());
  EXPECT_TRUE(b.Next().has_value());
  EXPECT_FALSE(b.Next().has_value());
}

TEST(BackoffTest, AServersRetryAfterIsALowerBound) {
  FakeClock clock;
  Backoff b(Exact(absl::Milliseconds(100), absl::Seconds(1)), &clock, absl::InfiniteFuture());
  EXPECT_EQ(*b.Next(absl::Seconds(5)), absl::Seconds(5));
}

TEST(BackoffTest, WaitSleepsOnTheClockAndGivesUpWhenTheNextWaitWouldPassTheDeadline) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  Backoff b(Exact(absl::Milliseconds(100), absl::Seconds(1)), &clock,
            start + absl::Milliseconds(250));
  bool first = false;
  std::thread waiter([&] { first = b.Wait(); });
  ASSERT_TRUE(clock.WaitForSleepers(1));
  clock.Advance(absl::Milliseconds(100));
  waiter.join();
  EXPECT_TRUE(first);
  EXPECT_FALSE(b.Wait());  // 100 ms + 200 ms would end past 250 ms: no sleep at all
  EXPECT_EQ(clock.Now(), start + absl::Milliseconds(100));
  EXPECT_EQ(b.attempts(), 2);
}

TEST(RetryableCodeTest, TransientCodesRetryAndAnswersDoNot) {
  for (absl::StatusCode code : {absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded,
                                absl::StatusCode::kResourceExhausted, absl::StatusCode::kAborted}) {
    EXPECT_TRUE(RetryableCode(code)) << absl::StatusCodeToString(code);
  }
  for (absl::StatusCode code :
       {absl::StatusCode::kInternal, absl::StatusCode::kUnknown, absl::StatusCode::kNotFound,
        absl::StatusCode::kPermissionDenied, absl::StatusCode::kInvalidArgument,
        absl::StatusCode::kFailedPrecondition, absl::StatusCode::kOutOfRange,
        absl::StatusCode::kDataLoss}) {
    EXPECT_FALSE(RetryableCode(code)) << absl::StatusCodeToString(code);
  }
}

}  // namespace
}  // namespace modelfs
