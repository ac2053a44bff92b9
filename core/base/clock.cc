#include "core/base/clock.h"

namespace modelfs {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration d) override {
    if (d > absl::ZeroDuration()) absl::SleepFor(d);
  }
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) override {
    return mu.AwaitWithDeadline(cond, deadline);
  }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();  // never destroyed: used from any thread
  return clock;
}

}  // namespace modelfs
