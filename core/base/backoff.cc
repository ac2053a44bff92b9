#include "core/base/backoff.h"

#include <algorithm>
#include <random>

#include "absl/strings/cord.h"

namespace modelfs {

bool RetryableCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kAborted:
      return true;
    default:
      return false;
  }
}

namespace {
constexpr char kBadAnswerPayload[] = "modelfs.dev/bad-answer";
}  // namespace

absl::Status MarkBadAnswer(absl::Status status) {
  status.SetPayload(kBadAnswerPayload, absl::Cord("1"));
  return status;
}

bool IsBadAnswer(const absl::Status& status) {
  return status.GetPayload(kBadAnswerPayload).has_value();
}

Backoff::Backoff(const BackoffPolicy& policy, Clock* clock, absl::Time deadline)
    : policy_(policy), clock_(clock), deadline_(deadline) {}

absl::Duration Backoff::NextStep() const {
  absl::Duration step =
      policy_.initial_backoff * static_cast<double>(uint64_t{1} << std::min(attempts_ - 1, 30));
  return std::min(step, policy_.max_backoff);
}

absl::Duration Backoff::Jittered(absl::Duration hint) const {
  absl::Duration d = NextStep();
  if (policy_.jitter) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uniform_real_distribution<double> fraction(0.5, 1.0);
    d = d * fraction(rng);
  }
  return std::max(d, hint);
}

std::optional<absl::Duration> Backoff::Next(absl::Duration hint) {
  if (policy_.max_attempts > 0 && attempts_ >= policy_.max_attempts) return std::nullopt;
  absl::Duration d = Jittered(hint);
  ++attempts_;
  return d;
}

bool Backoff::Wait(absl::Duration hint) {
  if (policy_.max_attempts > 0 && attempts_ >= policy_.max_attempts) return false;
  absl::Duration d = Jittered(hint);
  if (clock_->Now() + d > deadline_) return false;
  clock_->SleepFor(d);
  ++attempts_;
  return true;
}

}  // namespace modelfs
