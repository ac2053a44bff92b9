// ContentStoreBlobSource: one containerd namespace's content store as a RemoteBlobSource, so the
// cache's RegistryRoutingSource (core/registry) can route a layer there without knowing
// containerd: compressed layers of a model containerd downloaded itself (an image volume naming
// M), which the cache decodes through their seek index. Bytes are unverified, as a registry's:
// the cache verifies them.
//
// Thread safety: as ContentStore (safe for concurrent calls).
#pragma once

#include <string>
#include <utility>

#include "core/cache/remote_blob_source.h"
#include "snapshotter/content/content_store_client.h"

namespace modelfs::snapshotter {

class ContentStoreBlobSource final : public RemoteBlobSource {
 public:
  // `store` is not owned and must outlive the source.
  ContentStoreBlobSource(ContentStore* store, std::string ns) : store_(store), ns_(std::move(ns)) {}

  absl::StatusOr<std::string> FetchRange(const Digest& blob, uint64_t offset, uint64_t length,
                                         absl::Time deadline) override {
    std::string out;
    out.reserve(length);
    absl::Status st =
        store_->Read(ns_, blob, offset, length, deadline, [&](std::string_view piece) {
          out.append(piece);
          return absl::OkStatus();
        });
    if (!st.ok()) return st;
    return out;
  }

  absl::Status StreamRange(const Digest& blob, uint64_t offset, uint64_t length,
                           absl::Time deadline,
                           const std::function<absl::Status(absl::string_view)>& sink) override {
    return store_->Read(ns_, blob, offset, length, deadline, [&](std::string_view piece) {
      return sink(absl::string_view(piece.data(), piece.size()));
    });
  }

  std::string EndpointOf(const Digest& blob) override { return "containerd-content-store"; }

 private:
  ContentStore* const store_;
  const std::string ns_;
};

}  // namespace modelfs::snapshotter
