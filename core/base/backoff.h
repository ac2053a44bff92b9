// The retry policy of modelfs: which failures are worth another attempt (abseil's meaning of
// the canonical codes) and how long to wait between attempts. One policy, owned by whoever
// owns the deadline: the blob cache for reads (the registry client then does one attempt per
// call), the registry client for its own requests (manifests, pushes, whole-blob GETs).
//
// Thread safety: RetryableCode and the bad-answer mark are pure; a Backoff belongs to one retry
// loop (one thread).
#pragma once

#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/base/clock.h"

namespace modelfs {

// kUnavailable (refused/reset connections, 5xx), kDeadlineExceeded (one attempt ran out of
// time), kResourceExhausted (429) and kAborted (retry at a higher level) are worth retrying.
// Everything else is not: kInternal is a bug or a local I/O error, kNotFound, kPermissionDenied,
// kInvalidArgument, kFailedPrecondition, kOutOfRange, kDataLoss are answers that do not change.
bool RetryableCode(absl::StatusCode code);

// A wrong answer from one host (bytes that failed verification, a Content-Range for another
// range) is not retried like an outage: the chunk it carried is fetched once more, from the next
// host if there is one, and only a second wrong answer fails the read: one corrupt or misrouted
// answer (a proxy, a mirror) is not worth an EIO to the reader. The status
// keeps its code (kDataLoss, kFailedPrecondition) and carries this mark.
absl::Status MarkBadAnswer(absl::Status status);
bool IsBadAnswer(const absl::Status& status);

struct BackoffPolicy {
  int max_attempts = 0;  // attempts in all, including the first; 0: until the deadline
  absl::Duration initial_backoff = absl::Milliseconds(20);
  absl::Duration max_backoff = absl::Seconds(2);
  bool jitter = true;  // wait a random 50-100% of the step, so clients do not retry in lockstep
};

// Exponential backoff between attempts of one operation, bounded by a deadline.
class Backoff {
 public:
  Backoff(const BackoffPolicy& policy, Clock* clock, absl::Time deadline);

  // Call after a failed attempt. Sleeps (on the clock) before the next one and returns true;
  // returns false without sleeping when the attempts are used up or the wait would end past
  // the deadline. `hint` (a server's Retry-After) is a lower bound on the wait.
  bool Wait(absl::Duration hint = absl::ZeroDuration());
  // For loops that clamp the wait themselves: the wait before the next attempt (jittered, at
  // least `hint`), counting that attempt; nullopt when the attempts are used up. Does not sleep.
  std::optional<absl::Duration> Next(absl::Duration hint = absl::ZeroDuration());
  // Attempts made so far (1 before the first Wait).
  int attempts() const { return attempts_; }
  // The wait before the next attempt, without jitter (for tests and messages).
  absl::Duration NextStep() const;

 private:
  absl::Duration Jittered(absl::Duration hint) const;

  BackoffPolicy policy_;
  Clock* clock_;
  absl::Time deadline_;
  int attempts_ = 1;
};

}  // namespace modelfs
