// BlobReader: the one way the filesystem reads layer bytes. Implementations return only
// verified bytes (see DESIGN.md "Trust chain"); the FUSE layer maps their errors to errno.
//
// Thread safety: implementations must be safe for concurrent calls.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/oci/digest.h"

namespace modelfs {

class BlobReader {
 public:
  virtual ~BlobReader() = default;

  // Returns the verified bytes [offset, offset + length) of blob `digest`, clipped at the
  // blob's end (an empty string at or past the end).
  // Errors: kNotFound (unknown blob), kDataLoss (bytes failed verification; the chunk or layer
  // is quarantined), kDeadlineExceeded (could not fetch within the read deadline),
  // kUnavailable (registry unreachable).
  virtual absl::StatusOr<std::string> Read(const Digest& digest, uint64_t offset,
                                           uint64_t length) = 0;
};

}  // namespace modelfs
