// RemoteBlobSource: where the blob cache gets bytes it does not have yet (in production, a
// registry client doing HTTP range GETs; in tests, testsupport/fakes/fake_remote.h). The source
// returns raw, UNVERIFIED bytes: verification is the cache's job.
//
// Thread safety: implementations must be safe for concurrent calls from the cache's fetch
// threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/oci/digest.h"

namespace modelfs {

class RemoteBlobSource {
 public:
  virtual ~RemoteBlobSource() = default;

  // Returns exactly bytes [offset, offset + length) of `blob` (the cache never asks past the
  // blob's end). Must give up by `deadline`.
  // One attempt: the cache owns the read deadline and so the only retry loop (RetryableCode in
  // core/base/backoff.h says which codes it retries).
  // Errors: kDeadlineExceeded (deadline passed), kUnavailable / kResourceExhausted / kAborted
  // (transient: retried with backoff until the cache's own deadline); anything else, kInternal
  // included, is not retried.
  virtual absl::StatusOr<std::string> FetchRange(const Digest& blob, uint64_t offset,
                                                 uint64_t length, absl::Time deadline) = 0;

  // Delivers bytes [offset, offset + length) of `blob` to `sink` in order, piece by piece as
  // they arrive, so the cache verifies and serves each chunk as soon as it is whole and never
  // holds a whole range in memory. Returns when all were delivered, or with the error that
  // stopped the transfer (the bytes delivered so far stand; a sink error is returned as is).
  // Same contract as FetchRange otherwise. The default fetches with FetchRange and delivers
  // once.
  virtual absl::Status StreamRange(const Digest& blob, uint64_t offset, uint64_t length,
                                   absl::Time deadline,
                                   const std::function<absl::Status(absl::string_view)>& sink) {
    absl::StatusOr<std::string> bytes = FetchRange(blob, offset, length, deadline);
    if (!bytes.ok()) return bytes.status();
    return sink(*bytes);
  }

  // The registry endpoint that serves `blob` ("" when there is one source), asked when the
  // layer is registered. The cache keeps health and fetch threads per endpoint, so one
  // registry's outage never changes reads of another's layers.
  virtual std::string EndpointOf(const Digest& blob) { return std::string(); }
};

}  // namespace modelfs
