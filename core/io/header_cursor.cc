#include "core/io/header_cursor.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs {

HeaderCursor::HeaderCursor(RangeReader& reader, uint64_t size, uint64_t start)
    : reader_(reader), size_(size), pos_(std::min(start, size)) {}

absl::Status HeaderCursor::CheckAvailable(uint64_t n) const {
  if (n > remaining()) {
    return absl::OutOfRangeError(absl::StrCat(reader_.name(), ": truncated or corrupt: wants ", n,
                                              " bytes at byte ", pos_, " but only ", remaining(),
                                              " remain"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string_view> HeaderCursor::Read(uint64_t n) {
  RETURN_IF_ERROR(CheckAvailable(n));
  const uint64_t end = pos_ + n;
  if (!(buffer_start_ <= pos_ && end <= buffer_start_ + buffer_.size())) {
    uint64_t want = std::min(std::max(n, chunk_), size_ - pos_);
    ASSIGN_OR_RETURN(buffer_, reader_.ReadAt(pos_, want));
    buffer_start_ = pos_;
    chunk_ = std::min(chunk_ * 2, kMaxChunk);
  }
  std::string_view out(buffer_.data() + (pos_ - buffer_start_), n);
  pos_ = end;
  return out;
}

absl::Status HeaderCursor::Skip(uint64_t n) {
  RETURN_IF_ERROR(CheckAvailable(n));
  pos_ += n;
  return absl::OkStatus();
}

absl::Status HeaderCursor::Seek(uint64_t pos) {
  if (pos > size_) {
    return absl::OutOfRangeError(
        absl::StrCat(reader_.name(), ": seek to byte ", pos, " past the end (", size_, ")"));
  }
  pos_ = pos;
  return absl::OkStatus();
}

namespace {
template <typename T>
absl::StatusOr<T> ReadLE(HeaderCursor& c) {
  ASSIGN_OR_RETURN(std::string_view b, c.Read(sizeof(T)));
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<uint8_t>(b[i])) << (8 * i);
  return v;
}
}  // namespace

absl::StatusOr<uint8_t> HeaderCursor::ReadU8() { return ReadLE<uint8_t>(*this); }
absl::StatusOr<uint16_t> HeaderCursor::ReadU16() { return ReadLE<uint16_t>(*this); }
absl::StatusOr<uint32_t> HeaderCursor::ReadU32() { return ReadLE<uint32_t>(*this); }
absl::StatusOr<uint64_t> HeaderCursor::ReadU64() { return ReadLE<uint64_t>(*this); }

}  // namespace modelfs
