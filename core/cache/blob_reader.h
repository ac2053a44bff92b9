// BlobReader: the one way the filesystem reads layer bytes. Implementations return only
// verified bytes (docs/design.md, "The trust chain"); the FUSE layer maps their errors to errno.
//
// Two cheaper ways to the same verified bytes, so that a cold load costs the reader no extra
// copy of the weights:
//  - ReadSpans names where the bytes are (a range of an open file, or memory) instead of
//    copying them, so the FUSE layer can splice them from the page cache to the kernel;
//  - OpenVerifiedBlob hands out a file that holds a whole blob, every byte verified and sealed
//    against change, so the kernel can read it directly (FUSE passthrough); OpenVerifiedFile
//    the same for one file inside a blob (a tar member), where SetLayerMembers said where the
//    blob's files are.
//
// Thread safety: implementations must be safe for concurrent calls.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/oci/digest.h"

namespace modelfs {

// A piece of verified bytes: `length` bytes at `offset` of file `fd`, or, when fd < 0, at
// `offset` of `*memory`. `keep_alive` keeps the fd (or the memory) valid for as long as the
// span is held.
struct BlobSpan {
  int fd = -1;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::shared_ptr<const std::string> memory;
  std::shared_ptr<const void> keep_alive;
};

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

  // The same bytes as Read, as spans in order (their lengths add up to what Read returns).
  // The default copies through Read. Errors as Read.
  virtual absl::StatusOr<std::vector<BlobSpan>> ReadSpans(const Digest& digest, uint64_t offset,
                                                          uint64_t length) {
    absl::StatusOr<std::string> bytes = Read(digest, offset, length);
    if (!bytes.ok()) return bytes.status();
    std::vector<BlobSpan> spans;
    if (bytes->empty()) return spans;
    BlobSpan span;
    span.length = bytes->size();
    span.memory = std::make_shared<const std::string>(*std::move(bytes));
    spans.push_back(std::move(span));
    return spans;
  }

  // Whether Read of [offset, offset + length) would be served from what is already here,
  // without waiting on the network: a hint (the answer may change at once), for callers that
  // keep blocking reads off threads that must stay free. The default says yes.
  virtual bool IsReady(const Digest& digest, uint64_t offset, uint64_t length) { return true; }

  // A new read-only fd (the caller closes it) of a local file whose bytes are exactly blob
  // `digest`, all verified, and which nothing will write again; -1 when there is none (the
  // blob is not fully cached and verified yet, or [offset, offset + length) is not the whole
  // blob). Never blocks on the network.
  virtual int OpenVerifiedBlob(const Digest& digest, uint64_t offset, uint64_t length) {
    return -1;
  }

  // Says that each (offset, length) of `files` is the data of one file of blob `digest` (a tar
  // layer's members, found by reading its headers), so that the implementation may keep each
  // in a file of its own and hand it out by OpenVerifiedFile. It changes where bytes are kept,
  // never which bytes are served or how they are verified. The default does nothing.
  // Errors: kNotFound (unknown blob), kInvalidArgument (ranges overlap or pass the blob's end);
  // any error leaves the blob served as before.
  virtual absl::Status SetLayerMembers(const Digest& digest,
                                       const std::vector<std::pair<uint64_t, uint64_t>>& files) {
    return absl::OkStatus();
  }

  // OpenVerifiedBlob for one file inside blob `digest`: a new read-only fd of a local file
  // whose bytes are exactly the blob's [offset, offset + length), all verified, and which
  // nothing will write again; -1 when there is none (not a file SetLayerMembers named, or not
  // all of it verified and sealed yet). Never blocks on the network.
  virtual int OpenVerifiedFile(const Digest& digest, uint64_t offset, uint64_t length) {
    return -1;
  }
};

}  // namespace modelfs
