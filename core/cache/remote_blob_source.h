// RemoteBlobSource: where the blob cache gets bytes it does not have yet (in production, a
// registry client doing HTTP range GETs; in tests, tests/cache/fake_remote.h). The source
// returns raw, UNVERIFIED bytes: verification is the cache's job.
//
// Thread safety: implementations must be safe for concurrent calls from the cache's fetch
// threads.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/oci/digest.h"

namespace modelfs {

class RemoteBlobSource {
 public:
  virtual ~RemoteBlobSource() = default;

  // Returns exactly bytes [offset, offset + length) of `blob` (the cache never asks past the
  // blob's end). Must give up by `deadline`.
  // Errors: kDeadlineExceeded (deadline passed), kUnavailable / kInternal / kResourceExhausted /
  // kAborted (transient: the cache retries with backoff until its own deadline), kNotFound /
  // kPermissionDenied / kInvalidArgument (permanent: not retried).
  virtual absl::StatusOr<std::string> FetchRange(const Digest& blob, uint64_t offset,
                                                 uint64_t length, absl::Time deadline) = 0;
};

}  // namespace modelfs
