// ContentStore: read access to containerd's content store (committed blobs by digest, per
// containerd namespace), and GrpcContentStore, the client of containerd's
// containerd.services.content.v1.Content API (Info, Read) on containerd's own socket, and the
// image names pointing at a manifest (containerd.services.images.v1.Images List).
//
// The snapshotter needs it for one case: a pod whose image volume names a plain ModelPack
// artifact M. containerd 2.1 has then downloaded M, its config and its layers into its content
// store and asks for an empty snapshot; modelfs serves the model from those blobs
// (content_store_model.h) instead of fetching them again.
//
// Nothing read here is trusted: containerd commits content by digest, but callers verify every
// byte they serve (content_store_blob_reader.h).
//
// Thread safety: implementations are safe for concurrent calls.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/oci/digest.h"

namespace modelfs::snapshotter {

class ContentStore {
 public:
  virtual ~ContentStore() = default;

  // The size of committed blob `digest` in containerd namespace `ns`. Errors: kNotFound (no
  // such blob in that namespace), kUnavailable (containerd unreachable), other gRPC errors as
  // their canonical codes; messages name the digest and namespace.
  virtual absl::StatusOr<uint64_t> Size(const std::string& ns, const Digest& digest) = 0;

  // The names of the images in `ns` whose target is manifest `digest` (containerd's image
  // store: "host/repo:tag", "host/repo@sha256:..."), as CRI pulled them. Errors as Size.
  // Default: none.
  virtual absl::StatusOr<std::vector<std::string>> ImageNames(const std::string& ns,
                                                              const Digest& digest) {
    return std::vector<std::string>{};
  }

  // Streams bytes [offset, offset + length) of blob `digest` to `sink` in order, in pieces;
  // `length` > 0. Fewer bytes than asked (the blob ends early) is kOutOfRange; a sink error
  // stops the read and is returned. Errors as Size, and kDeadlineExceeded past `deadline`.
  virtual absl::Status Read(const std::string& ns, const Digest& digest, uint64_t offset,
                            uint64_t length, absl::Time deadline,
                            const std::function<absl::Status(std::string_view)>& sink) = 0;

  // OK when containerd answers within `timeout`. Errors: kUnavailable naming the socket and the
  // containerd_address setting, so a misconfigured daemon says so at once rather than after a
  // call's full deadline. The default (an in-memory store) is always reachable.
  virtual absl::Status CheckReachable(absl::Duration timeout) { return absl::OkStatus(); }
};

// A client of containerd's content API on the unix socket `socket_path` (containerd's
// [grpc] address, /run/containerd/containerd.sock by default). Connects on first use, so
// containerd may start after the snapshotter. Call deadlines are measured on `clock` (not owned;
// never null). Errors: kInvalidArgument for an empty path.
absl::StatusOr<std::unique_ptr<ContentStore>> ConnectContentStore(const std::string& socket_path,
                                                                  Clock* clock = Clock::Real());

}  // namespace modelfs::snapshotter
