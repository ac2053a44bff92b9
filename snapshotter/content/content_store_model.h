// A ModelPack artifact M from containerd's content store: what an image volume that names M
// itself (not its volume image V) gives the snapshotter. containerd 2.1 has downloaded M, its
// config and every layer before it asks for the volume's snapshot (the pull is eager; V is the
// lazy path), so the model is resolved from those blobs, each checked against its digest, with
// no registry call.
//
// Thread safety: ContentStoreModelFetcher belongs to one caller; the ContentStore is shared.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/resolve/model_ref.h"
#include "snapshotter/content/content_store_client.h"
#include "snapshotter/content/image_volume_key.h"

namespace modelfs::snapshotter {

// The most a manifest read from the content store may be.
inline constexpr uint64_t kMaxContentManifestBytes = 4u << 20;

// ModelFetcher over one containerd namespace of the content store. Repositories are ignored
// (content is addressed by digest); manifests must be asked for by digest. Every blob is read
// whole and checked against its digest (and the descriptor's size) before it is returned.
// Errors: kInvalidArgument (a tag, or more than the bound), kDataLoss (bytes that do not match),
// the content store's errors.
class ContentStoreModelFetcher final : public ModelFetcher {
 public:
  // Read deadlines are measured on `clock` (not owned; never null).
  ContentStoreModelFetcher(ContentStore& store, std::string ns, Clock* clock = Clock::Real())
      : store_(store), ns_(std::move(ns)), clock_(clock) {}
  absl::StatusOr<ManifestResult> GetManifest(const std::string& repository,
                                             const std::string& reference) override;
  absl::StatusOr<std::string> GetBlob(const std::string& repository, const Descriptor& d,
                                      uint64_t max_bytes) override;

 private:
  absl::StatusOr<std::string> ReadVerified(const Digest& digest, uint64_t size);
  ContentStore& store_;
  const std::string ns_;
  Clock* const clock_;
};

// The reference a content-store model is known by (in logs and `.modelinfo.json`):
// "containerd.invalid/content@sha256:<hex>"; `.invalid` so it can never name a real registry.
std::string ContentStoreReference(const Digest& manifest);

// Resolves M (key.image) from the content store of key.ns: its manifest, config and layer
// list, as ResolveModel does from a registry. Errors: kInvalidArgument when the blob is not a
// ModelPack (or Docker model) manifest, kNotFound when containerd does not hold it, kDataLoss
// on a digest mismatch, the content store's errors.
absl::StatusOr<ResolvedModel> ResolveContentStoreModel(ContentStore& store,
                                                       const ImageVolumeKey& key,
                                                       Clock* clock = Clock::Real());

}  // namespace modelfs::snapshotter
