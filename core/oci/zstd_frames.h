// Writes a file as a zstd stream of independent frames, one per `frame_bytes` of its content,
// each with its content size and checksum: a standard stream (`zstd -d`, skopeo and modctl read
// it) whose frames can later be decoded one at a time, which is what `modelfs push --compress
// zstd` publishes as a .tar+zstd layer.
//
// Thread safety: a free function; it keeps no state.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/oci/digest.h"

namespace modelfs {

struct ZstdFramesResult {
  Digest digest;      // SHA-256 of the compressed stream (the layer digest)
  uint64_t size = 0;  // compressed bytes
  Digest diff_id;     // SHA-256 of the input (the uncompressed tar)
  uint64_t input_size = 0;
  uint64_t frames = 0;
};

inline constexpr int kZstdFramesLevel = 3;

// Compresses `in_path` into `out_path` (created or truncated), `frame_bytes` of input per frame
// (the last may be shorter; an empty input gives one empty frame), at `level`.
// Errors: kInvalidArgument (frame_bytes 0), kNotFound / kInternal naming the file (I/O),
// kInternal naming libzstd's error.
absl::StatusOr<ZstdFramesResult> WriteZstdFrames(const std::string& in_path,
                                                 const std::string& out_path, uint64_t frame_bytes,
                                                 int level = kZstdFramesLevel);

}  // namespace modelfs
