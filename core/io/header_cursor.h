// HeaderCursor: a sequential, bounds-checked little-endian reader over a RangeReader, used by
// the format parsers. It fetches in chunks that start at 64 KiB and double up to 8 MiB, so a
// safetensors header costs one request and a GGUF tokenizer of a few MiB a handful.
//
// Every read is checked against the bytes that remain in the source before anything is
// allocated, so a corrupt length field becomes kOutOfRange ("truncated"), not a huge allocation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/io/range_reader.h"

namespace modelfs {

class HeaderCursor {
 public:
  static constexpr uint64_t kInitialChunk = 64 * 1024;
  static constexpr uint64_t kMaxChunk = 8 * 1024 * 1024;

  // `size` is the source's total size (from RangeReader::Size()).
  HeaderCursor(RangeReader& reader, uint64_t size, uint64_t start = 0);

  uint64_t position() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t remaining() const { return size_ - pos_; }

  // Returns the next n bytes; the view is valid until the next call on this cursor.
  // Errors: kOutOfRange "truncated: wants N bytes at byte P but only R remain".
  absl::StatusOr<std::string_view> Read(uint64_t n);
  absl::Status Skip(uint64_t n);
  absl::Status Seek(uint64_t pos);

  absl::StatusOr<uint8_t> ReadU8();
  absl::StatusOr<uint16_t> ReadU16();
  absl::StatusOr<uint32_t> ReadU32();
  absl::StatusOr<uint64_t> ReadU64();

 private:
  absl::Status CheckAvailable(uint64_t n) const;

  RangeReader& reader_;
  uint64_t size_;
  uint64_t pos_;
  std::string buffer_;
  uint64_t buffer_start_ = 0;
  uint64_t chunk_ = kInitialChunk;
};

}  // namespace modelfs
