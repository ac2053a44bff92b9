// LayerRoutingReader: one BlobReader over two, for a tree whose models are served from more
// than one place. Each layer goes to `preferred` when that holds it (in the daemon, the
// ContentStoreBlobReader of models containerd downloaded whole) and to `fallback` otherwise
// (the verified blob cache). It sits here, below fuse/ and the snapshotter, so that a read
// never climbs from the filesystem back into the daemon's code: the daemon hands both readers
// in through the interfaces below.
//
// Thread safety: as the readers it routes to (both are safe for concurrent calls).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/cache/blob_reader.h"
#include "core/oci/digest.h"

namespace modelfs {

// A BlobReader that serves only some layers, and says which.
class SelectiveBlobReader : public BlobReader {
 public:
  // True when this reader serves `digest`.
  virtual bool Has(const Digest& digest) const = 0;
};

// Routes each blob to `preferred` when it holds it, else to `fallback`. Neither is owned;
// `preferred` may be null.
class LayerRoutingReader final : public BlobReader {
 public:
  LayerRoutingReader(SelectiveBlobReader* preferred, BlobReader* fallback)
      : preferred_(preferred), fallback_(fallback) {}
  absl::StatusOr<std::string> Read(const Digest& digest, uint64_t offset,
                                   uint64_t length) override {
    return For(digest).Read(digest, offset, length);
  }
  absl::StatusOr<std::vector<BlobSpan>> ReadSpans(const Digest& digest, uint64_t offset,
                                                  uint64_t length) override {
    return For(digest).ReadSpans(digest, offset, length);
  }
  bool IsReady(const Digest& digest, uint64_t offset, uint64_t length) override {
    return For(digest).IsReady(digest, offset, length);
  }
  int OpenVerifiedBlob(const Digest& digest, uint64_t offset, uint64_t length) override {
    return For(digest).OpenVerifiedBlob(digest, offset, length);
  }
  absl::Status SetLayerMembers(const Digest& digest,
                               const std::vector<std::pair<uint64_t, uint64_t>>& files) override {
    return For(digest).SetLayerMembers(digest, files);
  }
  int OpenVerifiedFile(const Digest& digest, uint64_t offset, uint64_t length) override {
    return For(digest).OpenVerifiedFile(digest, offset, length);
  }

 private:
  BlobReader& For(const Digest& digest) {
    return preferred_ != nullptr && preferred_->Has(digest) ? *preferred_ : *fallback_;
  }
  SelectiveBlobReader* const preferred_;
  BlobReader* const fallback_;
};

}  // namespace modelfs
