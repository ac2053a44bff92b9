// FakeClock: a Clock whose time moves only when a test calls Advance() (envoy's simulated
// time). SleepFor blocks until the test has advanced past the wake-up time; AwaitWithDeadline
// returns when its condition holds or the fake time reaches the deadline. Tests of deadlines,
// backoff and health therefore never sleep and never depend on how fast the machine is.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/clock.h"

namespace modelfs::testing {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}

  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }

  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

  void SleepFor(absl::Duration d) override {
    absl::MutexLock lock(&mu_);
    const absl::Time wake = now_ + d;
    ++sleepers_;
    auto due = [this, wake]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return now_ >= wake; };
    mu_.Await(absl::Condition(&due));
    --sleepers_;
  }

  // Threads blocked in SleepFor right now.
  int sleepers() {
    absl::MutexLock lock(&mu_);
    return sleepers_;
  }
  // Waits (in real time, at most `timeout`) until `n` threads sleep in SleepFor.
  bool WaitForSleepers(int n, absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return sleepers_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  // Polls `cond` under `mu` (the caller's mutex, which a waker signals) and the fake time: the
  // fake time moves under another mutex, so there is nothing to wake on but a short real wait.
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) override {
    while (true) {
      if (mu.AwaitWithTimeout(cond, absl::Milliseconds(1))) return true;
      if (Now() >= deadline) return cond.Eval();
    }
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace modelfs::testing
