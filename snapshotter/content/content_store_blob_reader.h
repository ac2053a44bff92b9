// ContentStoreBlobReader: a BlobReader over layers held in containerd's content store (an
// image volume naming a plain ModelPack artifact, which containerd downloaded whole). Bytes are
// read from containerd on demand; nothing is copied to disk, so the node keeps one copy of the
// weights (containerd's).
//
// Verification: every byte served must chain to the digests of M's verified manifest, as a
// registry model's bytes do. M carries no chunk index (those live in the volume image V, which
// this pod did not name), so a layer is verified whole before any of its bytes is served: its first
// use streams it once through the content API, checking its SHA-256 and size against the digest in
// M's verified manifest, and builds a chunk index of it in memory on the way (32 bytes per MiB).
// Every later read then checks the chunks it touches against that index before returning them, so
// bytes that change in the content store after the check (they never should: content is committed
// by digest) are refused too. A mismatch quarantines the layer (kDataLoss, sticky until the layer
// is registered again); a failure to reach containerd is retried by the next read. The last few
// verified chunks are kept in memory, so sequential reads smaller than a chunk hash each chunk
// once.
//
// LayerRoutingReader (core/model/layer_routing_reader.h) sends each layer to this reader when it
// holds it and to another BlobReader (the verified blob cache) otherwise, so the daemon's one
// ModelTree serves both.
//
// Thread safety: every method is safe to call concurrently. Locks: mu_ (the layer table) and
// recent_mu_ are leaves; a layer's own verify_mu serializes its whole-layer check and is taken
// before, never under, mu_. verify_mu is the one lock held across calls to containerd: it is
// held for the whole check so that a second caller waits for the check in progress rather than
// reading the layer again; the readiness probe only tries it, so it never waits on containerd.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/cache/blob_reader.h"
#include "core/model/layer_routing_reader.h"
#include "core/oci/chunk_index.h"
#include "core/oci/digest.h"
#include "snapshotter/content/content_store_client.h"

namespace modelfs::snapshotter {

struct ContentStoreReaderOptions {
  uint64_t chunk_size = ChunkIndex::kDefaultChunkSize;  // of the in-memory index
  size_t recent_chunks = 16;                            // verified chunks kept in memory
  // Per content API call: a whole-layer check reads in pieces of `piece_bytes`, each within
  // `call_deadline`.
  uint64_t piece_bytes = 64ull << 20;
  absl::Duration call_deadline = absl::Seconds(120);
  // What the deadlines are measured on. Never null; not owned.
  Clock* clock = Clock::Real();
};

class ContentStoreBlobReader final : public SelectiveBlobReader {
 public:
  // `store` is not owned and must outlive the reader.
  explicit ContentStoreBlobReader(ContentStore* store, ContentStoreReaderOptions options = {});
  ~ContentStoreBlobReader() override;

  // Serves layer `digest` of `size` bytes from namespace `ns` for model `model_ref` (a layer
  // may be shared by several models; it is dropped with the last). Nothing is read yet.
  // Errors: kInvalidArgument when the same digest is already registered with another size.
  absl::Status AddLayer(const std::string& model_ref, const std::string& ns, const Digest& digest,
                        uint64_t size);
  // Drops model_ref's references.
  void RemoveModel(const std::string& model_ref);
  bool Has(const Digest& digest) const override;

  // Verifies layer `digest` whole unless that was done (waits for a check in progress).
  // Errors: kNotFound (not registered), kDataLoss (bytes do not match the digest), the content
  // store's errors.
  absl::Status VerifyLayer(const Digest& digest);

  // BlobReader. Read verifies the layer first (VerifyLayer) and each chunk it returns.
  absl::StatusOr<std::string> Read(const Digest& digest, uint64_t offset, uint64_t length) override;
  // True once the layer is verified (reads are then one local content API call).
  bool IsReady(const Digest& digest, uint64_t offset, uint64_t length) override;

  // Whole-layer checks done so far and bytes read from containerd (for logs and tests).
  uint64_t layers_verified() const;
  uint64_t bytes_read() const;

 private:
  struct Layer;
  std::shared_ptr<Layer> Find(const Digest& digest) const;
  absl::StatusOr<std::shared_ptr<const std::string>> VerifiedChunk(const Layer& layer,
                                                                   uint64_t chunk);

  ContentStore* const store_;
  const ContentStoreReaderOptions options_;

  mutable absl::Mutex mu_;
  std::map<Digest, std::shared_ptr<Layer>> layers_ ABSL_GUARDED_BY(mu_);
  uint64_t layers_verified_ ABSL_GUARDED_BY(mu_) = 0;

  mutable absl::Mutex recent_mu_;
  struct Recent {
    Digest digest;
    uint64_t chunk = 0;
    std::shared_ptr<const std::string> bytes;
  };
  std::deque<Recent> recent_ ABSL_GUARDED_BY(recent_mu_);  // most recent first
  uint64_t bytes_read_ ABSL_GUARDED_BY(recent_mu_) = 0;
};

}  // namespace modelfs::snapshotter
