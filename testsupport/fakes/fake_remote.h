// FakeRemote: an in-memory RemoteBlobSource for cache tests (after EdenFS's FakeBackingStore).
// It serves blobs added with AddBlob, counts requests and bytes, and injects faults: a
// corrupted byte, a failure status, and a hold that blocks every fetch until Release() (or the
// fetch's deadline), so tests can pile readers onto one in-flight fetch. Blobs can be put
// behind named endpoints (registries) and a latency, both on an injectable Clock, so health
// rules are tested with a FakeClock.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/cache/remote_blob_source.h"
#include "core/oci/digest.h"

namespace modelfs::testing {

class FakeRemote : public RemoteBlobSource {
 public:
  struct Request {
    Digest blob;
    uint64_t offset;
    uint64_t length;
    absl::Time deadline;
  };

  // The clock that holds and latency wait on (default: the real one). Set before fetching.
  void set_clock(Clock* clock) { clock_ = clock; }

  // `blob` is served by registry `endpoint` (default "").
  void SetEndpoint(const Digest& blob, const std::string& endpoint) {
    absl::MutexLock lock(&mu_);
    endpoints_[blob] = endpoint;
  }
  std::string EndpointOf(const Digest& blob) override {
    absl::MutexLock lock(&mu_);
    auto it = endpoints_.find(blob);
    return it == endpoints_.end() ? "" : it->second;
  }
  // Every fetch answers `latency` after it starts (on the clock), or fails at its deadline.
  void SetLatency(absl::Duration latency) {
    absl::MutexLock lock(&mu_);
    latency_ = latency;
  }
  // Only fetches of `blob` block on Hold() (default: all).
  void HoldOnly(const Digest& blob) {
    absl::MutexLock lock(&mu_);
    hold_blob_ = blob;
  }
  // Waits (real time, at most `timeout`) until `n` fetches of `blob` were made.
  bool WaitForRequests(const Digest& blob, int n, absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, &blob, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      int got = 0;
      for (const Request& r : log_) got += r.blob == blob;
      return got >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  Digest AddBlob(const std::string& bytes) {
    Digest d = Digest::Of(bytes);
    absl::MutexLock lock(&mu_);
    blobs_[d] = bytes;
    return d;
  }

  // Serves `bytes` under a digest that need not be theirs (a lying registry).
  void AddBlobAs(const Digest& digest, const std::string& bytes) {
    absl::MutexLock lock(&mu_);
    blobs_[digest] = bytes;
  }

  // Served bytes of `blob` at `offset` are flipped (XOR 0xff) until Heal(), or in the next
  // `answers` answers that carry it only (0: every one).
  void CorruptByte(const Digest& blob, uint64_t offset, int answers = 0) {
    absl::MutexLock lock(&mu_);
    corrupt_[{blob, offset}] = answers;
  }
  // Every fetch fails with `status` until Heal().
  void Fail(absl::Status status) {
    absl::MutexLock lock(&mu_);
    failure_ = std::move(status);
  }
  void Heal() {
    absl::MutexLock lock(&mu_);
    corrupt_.clear();
    failure_.reset();
  }

  // From now on, fetches starting at or after `min_offset` block (after being counted) until
  // Release() or their deadline.
  void Hold(uint64_t min_offset = 0) {
    absl::MutexLock lock(&mu_);
    holding_ = true;
    hold_from_ = min_offset;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    holding_ = false;
  }
  // Waits until `n` fetches are blocked by Hold(); false after `timeout`.
  bool WaitForHeld(int n, absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return held_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  // Waits until no fetch is blocked by Hold(); false after `timeout`.
  bool WaitForNoneHeld(absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto none = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return held_ == 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&none), timeout);
  }

  int requests() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(log_.size());
  }
  uint64_t bytes_served() const {
    absl::MutexLock lock(&mu_);
    return bytes_;
  }
  std::vector<Request> log() const {
    absl::MutexLock lock(&mu_);
    return log_;
  }
  void ResetCounters() {
    absl::MutexLock lock(&mu_);
    log_.clear();
    bytes_ = 0;
  }

  // StreamRange hands bodies to the cache in pieces of these sizes, in turn, as a socket does
  // (empty: all at once).
  void SetPieceSizes(std::vector<size_t> sizes) {
    absl::MutexLock lock(&mu_);
    piece_sizes_ = std::move(sizes);
  }

  // The next `streams` StreamRange calls deliver at most `bytes` of their body, then fail as a
  // reset connection does (kUnavailable).
  void CutStreams(uint64_t bytes, int streams) {
    absl::MutexLock lock(&mu_);
    cut_bytes_ = bytes;
    cuts_ = streams;
  }

  absl::Status StreamRange(const Digest& blob, uint64_t offset, uint64_t length,
                           absl::Time deadline,
                           const std::function<absl::Status(absl::string_view)>& sink) override {
    absl::StatusOr<std::string> bytes = FetchRange(blob, offset, length, deadline);
    if (!bytes.ok()) return bytes.status();
    std::vector<size_t> sizes;
    bool cut = false;
    {
      absl::MutexLock lock(&mu_);
      sizes = piece_sizes_;
      if (cuts_ > 0 && bytes->size() > cut_bytes_) {
        cuts_--;
        bytes->resize(cut_bytes_);
        cut = true;
      }
    }
    if (cut) {
      if (absl::Status s = sink(*bytes); !s.ok()) return s;
      return absl::UnavailableError("fake remote: connection reset");
    }
    if (sizes.empty()) return sink(*bytes);
    absl::string_view rest(*bytes);
    for (size_t i = 0; !rest.empty(); ++i) {
      const size_t n = std::min(rest.size(), std::max<size_t>(1, sizes[i % sizes.size()]));
      if (absl::Status s = sink(rest.substr(0, n)); !s.ok()) return s;
      rest.remove_prefix(n);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> FetchRange(const Digest& blob, uint64_t offset, uint64_t length,
                                         absl::Time deadline) override {
    absl::MutexLock lock(&mu_);
    log_.push_back({blob, offset, length, deadline});
    if (holding_ && offset >= hold_from_ && (hold_blob_.empty() || hold_blob_ == blob)) {
      held_++;
      auto released = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !holding_; };
      bool ok = clock_->AwaitWithDeadline(mu_, absl::Condition(&released), deadline);
      held_--;
      if (!ok) return absl::DeadlineExceededError("fake remote: held past the deadline");
    }
    if (latency_ > absl::ZeroDuration()) {
      const absl::Time answer = clock_->Now() + latency_;
      auto never = []() { return false; };
      clock_->AwaitWithDeadline(mu_, absl::Condition(&never), std::min(answer, deadline));
      if (answer > deadline) {
        return absl::DeadlineExceededError("fake remote: would answer after the deadline");
      }
    }
    if (failure_) return *failure_;
    auto it = blobs_.find(blob);
    if (it == blobs_.end()) {
      return absl::NotFoundError(absl::StrCat("fake remote: no blob ", blob.str()));
    }
    if (offset > it->second.size() || length > it->second.size() - offset) {
      return absl::InvalidArgumentError("fake remote: range past the end of the blob");
    }
    std::string out = it->second.substr(offset, length);
    for (auto it = corrupt_.begin(); it != corrupt_.end();) {
      const auto& [d, pos] = it->first;
      if (d == blob && pos >= offset && pos < offset + length) {
        out[pos - offset] ^= 0xff;
        if (it->second > 0 && --it->second == 0) {
          it = corrupt_.erase(it);
          continue;
        }
      }
      ++it;
    }
    bytes_ += out.size();
    return out;
  }

 private:
  Clock* clock_ = Clock::Real();
  mutable absl::Mutex mu_;
  std::map<Digest, std::string> endpoints_ ABSL_GUARDED_BY(mu_);
  absl::Duration latency_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  Digest hold_blob_ ABSL_GUARDED_BY(mu_);
  std::map<Digest, std::string> blobs_ ABSL_GUARDED_BY(mu_);
  // (blob, offset) -> answers left to corrupt (0: all).
  std::map<std::pair<Digest, uint64_t>, int> corrupt_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> failure_ ABSL_GUARDED_BY(mu_);
  bool holding_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t hold_from_ ABSL_GUARDED_BY(mu_) = 0;
  int held_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Request> log_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cut_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int cuts_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<size_t> piece_sizes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace modelfs::testing
