// BlobRangeReader: a RangeReader over one file's extent of a layer blob, read through
// BlobReader, so that format parsers (safetensors, GGUF, config.json) see exactly the verified
// bytes the filesystem serves.
//
// Thread safety: like every RangeReader, not safe for concurrent use (its stats are plain
// counters); the BlobReader underneath is.
#pragma once

#include <cstdint>
#include <string>

#include "core/cache/blob_reader.h"
#include "core/io/range_reader.h"
#include "core/oci/digest.h"

namespace modelfs {

class BlobRangeReader final : public RangeReader {
 public:
  // Reads bytes [offset_in_layer, offset_in_layer + size) of blob `layer`; `name` (the file's
  // path) is used in messages and for format sniffing. `reader` must outlive this object.
  BlobRangeReader(BlobReader* reader, Digest layer, uint64_t offset_in_layer, uint64_t size,
                  std::string name);

  const std::string& name() const override { return name_; }
  absl::StatusOr<uint64_t> Size() override { return size_; }
  // Errors: kOutOfRange past the file's end; the BlobReader's errors (kDataLoss, ...); a blob
  // that returns fewer bytes than the extent promises is kDataLoss.
  absl::StatusOr<std::string> ReadAt(uint64_t offset, uint64_t length) override;
  RangeReadStats stats() const override { return stats_; }

 private:
  BlobReader* const reader_;
  const Digest layer_;
  const uint64_t base_;
  const uint64_t size_;
  const std::string name_;
  RangeReadStats stats_;
};

}  // namespace modelfs
