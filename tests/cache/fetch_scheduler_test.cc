// FetchScheduler: priority order, promotion, one pool per endpoint, and a stop that hands back
// what never ran.
#include "core/cache/fetch_scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace modelfs {
namespace {

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

TEST(FetchSchedulerTest, RunsByPriorityThenInSubmissionOrder) {
  FetchScheduler s(1);
  absl::Notification gate;
  s.Submit("r", 0, [&] { gate.WaitForNotification(); });  // holds the only thread
  absl::Mutex mu;
  std::vector<std::string> order;
  auto note = [&](std::string what) {
    return [&, what] {
      absl::MutexLock lock(&mu);
      order.push_back(what);
    };
  };
  s.Submit("r", 3, note("bulk"));
  s.Submit("r", 1, note("readahead-1"));
  s.Submit("r", 1, note("readahead-2"));
  s.Submit("r", 0, note("foreground"));
  gate.Notify();
  ASSERT_TRUE(s.WaitIdle(Soon()));
  EXPECT_EQ(order, (std::vector<std::string>{"foreground", "readahead-1", "readahead-2", "bulk"}));
}

TEST(FetchSchedulerTest, APromotedJobRunsBeforeThoseItNowOutranks) {
  FetchScheduler s(1);
  absl::Notification gate;
  s.Submit("r", 0, [&] { gate.WaitForNotification(); });
  std::vector<std::string> order;
  s.Submit("r", 2, [&] { order.push_back("header"); });
  auto bulk = s.Submit("r", 4, [&] { order.push_back("bulk"); });
  s.Promote(bulk, 0);
  s.Promote(bulk, 3);  // never demotes
  gate.Notify();
  ASSERT_TRUE(s.WaitIdle(Soon()));
  EXPECT_EQ(order, (std::vector<std::string>{"bulk", "header"}));
}

TEST(FetchSchedulerTest, AHungEndpointDoesNotHoldUpAnother) {
  FetchScheduler s(2);
  absl::Notification release;
  for (int i = 0; i < 4; ++i) s.Submit("hung", 0, [&] { release.WaitForNotification(); });
  absl::Notification ran;
  s.Submit("other", 0, [&] { ran.Notify(); });
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(s.WaitIdle(absl::Now() + absl::Milliseconds(50)));
  release.Notify();
  EXPECT_TRUE(s.WaitIdle(Soon()));
}

TEST(FetchSchedulerTest, StopLetsRunningJobsFinishAndHandsBackTheQueuedOnes) {
  FetchScheduler s(1);
  absl::Notification started, release;
  std::atomic<bool> finished{false};
  s.Submit("r", 0, [&] {
    started.Notify();
    release.WaitForNotification();
    finished = true;
  });
  std::atomic<int> ran{0};
  s.Submit(
      "r", 1, [&] { ran++; }, [] {});
  s.Submit("r", 1, [&] { ran++; });  // no drop callback: nothing to hand back
  started.WaitForNotification();
  std::thread stopper([&] {
    std::vector<std::function<void()>> dropped = s.Stop();
    EXPECT_EQ(dropped.size(), 1u);
  });
  absl::SleepFor(absl::Milliseconds(20));
  release.Notify();
  stopper.join();
  EXPECT_TRUE(finished);
  EXPECT_EQ(ran, 0);
  EXPECT_TRUE(s.Stop().empty());  // idempotent
}

}  // namespace
}  // namespace modelfs
