// Clock: the one source of "now" and of waiting for rules that depend on time (read deadlines,
// retry backoff, registry health, token expiry), so tests can drive them with a FakeClock
// (testsupport/fakes/fake_clock.h) instead of sleeping.
//
// Thread safety: implementations must be safe for concurrent calls.
#pragma once

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace modelfs {

class Clock {
 public:
  virtual ~Clock() = default;

  // The current time.
  virtual absl::Time Now() = 0;
  // Returns once `d` has passed on this clock (at once for d <= 0).
  virtual void SleepFor(absl::Duration d) = 0;
  // With `mu` held: waits until `cond` is true or this clock reaches `deadline`, releasing `mu`
  // while waiting (absl::Mutex::AwaitWithDeadline on this clock). Returns cond's value.
  virtual bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // The process's wall clock (absl::Now). Never null; lives forever.
  static Clock* Real();
};

}  // namespace modelfs
