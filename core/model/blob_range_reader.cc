// BlobRangeReader: bounds checks, then one BlobReader call per read.
#include "core/model/blob_range_reader.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace modelfs {

BlobRangeReader::BlobRangeReader(BlobReader* reader, Digest layer, uint64_t offset_in_layer,
                                 uint64_t size, std::string name)
    : reader_(reader),
      layer_(std::move(layer)),
      base_(offset_in_layer),
      size_(size),
      name_(std::move(name)) {}

absl::StatusOr<std::string> BlobRangeReader::ReadAt(uint64_t offset, uint64_t length) {
  if (offset > size_ || length > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat(name_, ": truncated: wants ", length,
                                              " bytes at byte ", offset, " but the file has ",
                                              size_));
  }
  if (length == 0) return std::string();
  ++stats_.requests;
  absl::StatusOr<std::string> got = reader_->Read(layer_, base_ + offset, length);
  if (!got.ok()) {
    return absl::Status(got.status().code(),
                        absl::StrCat(name_, ": reading ", length, " bytes at byte ", offset, ": ",
                                     got.status().message()));
  }
  if (got->size() != length) {
    return absl::DataLossError(absl::StrCat(name_, ": layer ", layer_.str(), " returned ",
                                            got->size(), " bytes at byte ", base_ + offset,
                                            " where the file needs ", length));
  }
  stats_.bytes += length;
  return got;
}

}  // namespace modelfs
