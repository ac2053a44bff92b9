// TarTensorIndexer: the tensor indexes of the weight files inside a tar layer (a modelcar's, a
// `push --tar` layer, the tar inside a tar+gzip or tar+zstd layer), built from the same single
// pass over the tar that hashes it for its chunk index and records its headers
// (docs/tensor-index.md, "Tar layers"). It follows the tar's members as the bytes pass (a
// TarFollower, core/oci/tar_follower.h); for each
// regular member named *.safetensors or *.gguf it keeps the member's first bytes until the
// file's header parses (at most kMaxHeaderBytes), then hashes every tensor as its bytes pass,
// so a tensor of any size is hashed streaming and nothing else is buffered.
//
// Member paths come from the tar headers (ustar prefix, pax `path`, GNU 'L' long names) and are
// normalized and checked like every tar path (path_safety.h). A later member of the same path
// replaces an earlier one, as when the tar is unpacked.
//
// Thread safety: a TarTensorIndexer belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/oci/digest.h"
#include "core/oci/tar_follower.h"
#include "core/oci/tensor_index.h"

namespace modelfs {

class TarTensorIndexer : private TarFollower::Listener {
 public:
  // The most bytes kept of one member before its header must have parsed: the safetensors
  // header limit (kSafetensorsMaxHeaderSize) and its 8-byte length, for GGUF too.
  static const uint64_t kMaxHeaderBytes;

  // `name` names the layer in errors ("layer sha256:...").
  explicit TarTensorIndexer(std::string name);
  ~TarTensorIndexer() override;
  TarTensorIndexer(TarTensorIndexer&&);
  TarTensorIndexer& operator=(TarTensorIndexer&&);

  // The tar's next bytes, in pieces of any size. Errors (the layer cannot get an index that
  // tells the truth, so push and convert stop): kPermissionDenied for a weight member whose
  // path is unsafe; the parser's kInvalidArgument / kOutOfRange naming the member for a
  // malformed safetensors or GGUF header, kInvalidArgument for one over kMaxHeaderBytes.
  // A tar that cannot be followed (a bad header block, sparse or multi-volume members, an
  // extended header over 1 MiB) is no error: its members past that point get no index
  // (stopped()).
  absl::Status Feed(std::string_view bytes);

  // The indexes of the weight files fed, in tar order, once the whole tar was: each index's
  // layer digest and size are `tar_digest` and the bytes fed, its file_offset the member's data
  // offset in the tar. nullopt when the tar could not be followed to its end (stopped() says
  // why).
  std::optional<TarTensorIndexes> Finish(const Digest& tar_digest);

  // Why the tar stopped being followed ("" while it is).
  const std::string& stopped() const { return stopped_; }

 private:
  struct Member;
  void Stop();
  absl::Status OnEntry(const TarEntry& entry) override;
  absl::Status OnData(const TarEntry& entry, uint64_t offset, std::string_view bytes) override;
  absl::Status TryParse();
  absl::Status EndMember();

  std::string name_;
  TarFollower follower_;
  std::unique_ptr<Member> member_;  // the weight member whose data is passing
  std::vector<TarTensorIndex> done_;
  std::string stopped_;
};

}  // namespace modelfs
