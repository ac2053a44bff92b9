// The ThreadSanitizer tree's check on itself: counters incremented by four threads, under an
// absl::Mutex (the slow paths too: contention, reader locks, CondVar, Await, Notification).
// Built twice (tests/tsan/CMakeLists.txt). As is, TSan must report nothing: that holds only when
// abseil itself is instrumented, so a tree that linked Debian's libabsl fails here, once, instead
// of with false races all over the unit tests. With MODELFS_UNGUARDED the first loop drops its
// lock, and TSan must report the race: the suppressions must not hide a race in our code.
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

absl::Mutex mu;
long counter = 0;   // guarded by mu (but for MODELFS_UNGUARDED)
long produced = 0;  // guarded by mu
absl::CondVar produced_cv;

constexpr int kThreads = 4;
constexpr int kIncrements = 20000;
constexpr int kProducers = 3;
constexpr int kProduced = 2000;

void Count() {
  for (int i = 0; i < kIncrements; ++i) {
#ifndef MODELFS_UNGUARDED
    absl::MutexLock lock(&mu);
#endif
    ++counter;
  }
}

void Produce() {
  for (int i = 0; i < kProduced; ++i) {
    {
      absl::ReaderMutexLock lock(&mu);
      (void)counter;
    }
    absl::MutexLock lock(&mu);
    ++produced;
    produced_cv.SignalAll();
  }
}

}  // namespace

int main() {
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(Count);
  for (auto& t : threads) t.join();
  threads.clear();

  for (int t = 0; t < kProducers; ++t) threads.emplace_back(Produce);
  threads.emplace_back([] {
    absl::MutexLock lock(&mu);
    while (produced < kProducers * kProduced)
      produced_cv.WaitWithTimeout(&mu, absl::Milliseconds(50));
  });
  threads.emplace_back([] {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](long* p) { return *p >= kProducers * kProduced; }, &produced));
  });
  for (auto& t : threads) t.join();

  // Plain data handed over by a Notification.
  for (int round = 0; round < 200; ++round) {
    int data = 0;
    absl::Notification ready;
    std::thread writer([&] {
      data = round;
      ready.Notify();
    });
    ready.WaitForNotification();
    const int seen = data;
    writer.join();
    if (seen != round) return 2;
  }
  absl::MutexLock lock(&mu);
  return counter == kThreads * kIncrements ? 0 : 3;
}
