// EndpointHealth: what the blob cache remembers about each registry endpoint it fetches from,
// so that a failure of one registry changes how reads of that registry behave and nothing else.
//
// The one rule: when a read that needed an endpoint waited its whole read deadline, the kernel
// retries the failed read at once (readahead, then a single page), and each retry waiting the
// whole deadline again would double the time to EIO. So for `retry_window` after such a
// timeout, reads that need that endpoint wait at most `fail_fast_wait` (their fetches still get
// the whole deadline, so a slow registry's answer lands and counts as a success). Only a read
// that waited its whole deadline opens the window; a read that failed fast does not extend it,
// and the first successful fetch from the endpoint closes it. A registry that answers within
// the read deadline therefore never sees a shortened read.
//
// Thread safety: all methods may be called concurrently (one internal leaf mutex). Time is
// passed in by the caller (from its Clock), so the rule is tested without a clock at all.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace modelfs {

struct EndpointHealthOptions {
  // 1 s: a registry restarting, or answering its first request on a new connection, still
  // makes it; the kernel's immediate retry of a failed read then costs 1 s, not a deadline.
  absl::Duration retry_window = absl::Seconds(2);
  absl::Duration fail_fast_wait = absl::Seconds(1);
};

class EndpointHealth {
 public:
  explicit EndpointHealth(EndpointHealthOptions options = {});

  // The deadline of a read that starts at `now` and may need `endpoint`: now + read_deadline,
  // or now + fail_fast_wait inside the window after a timeout (never later than the former).
  absl::Time ReadDeadline(const std::string& endpoint, absl::Time now,
                          absl::Duration read_deadline);

  // A read that needed `endpoint` and was not shortened waited its whole deadline, which ended
  // at `now`. Opens the window. Returns true when the endpoint was healthy before (log the
  // change once).
  bool RecordTimeout(const std::string& endpoint, absl::Time now);
  // A fetch from `endpoint` returned bytes. Closes the window. Returns true when the endpoint
  // was failing before (log the recovery once).
  bool RecordSuccess(const std::string& endpoint);

  // The last error of a fetch from an endpoint (`modelfs node ls` shows it): when, what, and
  // how many errors the endpoint has had in all.
  struct LastError {
    absl::Time at = absl::InfinitePast();
    std::string message;
    uint64_t count = 0;
  };
  // A fetch from `endpoint` failed at `now` with `message` (a chunk that failed verification,
  // or a request that failed after its retries).
  void RecordError(const std::string& endpoint, absl::Time now, const std::string& message);
  // Every endpoint that has had an error, by endpoint.
  std::map<std::string, LastError> Errors() const;

 private:
  struct State {
    bool failing = false;  // a timeout and no success since
    absl::Time fail_fast_until = absl::InfinitePast();
  };

  const EndpointHealthOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, State> endpoints_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, LastError> errors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace modelfs
