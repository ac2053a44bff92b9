// Format (docs/volume-image.md, "Tar headers"), little-endian:
//   "MFSTARH\0", version u32 (1), reserved u32 (0), tar digest (32 raw bytes of SHA-256),
//   tar size u64, entries u64, extent count u64,
//   then per extent: offset u64, length u32, `length` bytes.
#include "core/oci/tar_headers.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/oci/index_fields.h"
#include "core/oci/tar.h"
#include "core/status/status_macros.h"

namespace modelfs {

namespace {

constexpr std::string_view kMagic("MFSTARH\0", 8);
using index_fields::GetDigest;
using index_fields::GetLE;
using index_fields::PutDigest;
using index_fields::PutU32;
using index_fields::PutU64;

// Reads as 0xff wherever nothing was recorded: a block of them has no valid checksum and is
// not the all-zero end-of-archive block, so a header that was not recorded fails the scan.
class TarHeadersReader final : public RangeReader {
 public:
  TarHeadersReader(std::shared_ptr<const TarHeaders> headers, std::string name)
      : headers_(std::move(headers)), name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  absl::StatusOr<uint64_t> Size() override { return headers_->tar_size; }
  absl::StatusOr<std::string> ReadAt(uint64_t offset, uint64_t length) override {
    if (offset > headers_->tar_size || length > headers_->tar_size - offset) {
      return absl::OutOfRangeError(absl::StrCat(name_, ": read of ", length, " bytes at offset ",
                                                offset, " passes the tar's end"));
    }
    std::string out(length, '\xff');
    const uint64_t end = offset + length;
    const std::vector<TarHeaders::Extent>& ex = headers_->extents;
    // The first extent that ends after `offset`.
    auto it = std::partition_point(ex.begin(), ex.end(), [&](const TarHeaders::Extent& e) {
      return e.offset + e.bytes.size() <= offset;
    });
    for (; it != ex.end() && it->offset < end; ++it) {
      const uint64_t from = std::max(offset, it->offset);
      const uint64_t to = std::min(end, it->offset + it->bytes.size());
      memcpy(out.data() + (from - offset), it->bytes.data() + (from - it->offset), to - from);
    }
    ++stats_.requests;
    stats_.bytes += length;
    return out;
  }
  RangeReadStats stats() const override { return stats_; }

 private:
  const std::shared_ptr<const TarHeaders> headers_;
  const std::string name_;
  RangeReadStats stats_;
};

}  // namespace

uint64_t TarHeaders::recorded_bytes() const {
  uint64_t n = 0;
  for (const Extent& e : extents) n += e.bytes.size();
  return n;
}

std::string SerializeTarHeaders(const TarHeaders& headers) {
  std::string out;
  out.reserve(TarHeaders::kHeaderSize + headers.extents.size() * TarHeaders::kExtentFixedSize +
              headers.recorded_bytes());
  out.append(kMagic);
  PutU32(out, TarHeaders::kVersion);
  PutU32(out, 0);
  PutDigest(out, headers.tar_digest);
  PutU64(out, headers.tar_size);
  PutU64(out, headers.entries);
  PutU64(out, headers.extents.size());
  for (const TarHeaders::Extent& e : headers.extents) {
    PutU64(out, e.offset);
    PutU32(out, static_cast<uint32_t>(e.bytes.size()));
    out.append(e.bytes);
  }
  return out;
}

absl::StatusOr<TarHeaders> ParseTarHeaders(std::string_view bytes) {
  RETURN_IF_ERROR(index_fields::ReadHeader(bytes, kMagic, "tar headers", TarHeaders::kVersion,
                                           TarHeaders::kHeaderSize));
  if (GetLE(bytes, 12, 4) != 0) {
    return absl::InvalidArgumentError("tar headers: reserved bytes are not 0");
  }
  TarHeaders h;
  h.tar_digest = GetDigest(bytes, 16);
  h.tar_size = GetLE(bytes, 48, 8);
  h.entries = GetLE(bytes, 56, 8);
  const uint64_t count = GetLE(bytes, 64, 8);
  const std::string name = absl::StrCat("tar headers of ", h.tar_digest.str());
  size_t at = TarHeaders::kHeaderSize;
  if ((bytes.size() - at) / TarHeaders::kExtentFixedSize < count) {
    return absl::OutOfRangeError(absl::StrCat(
        name, ": truncated: ", count, " extents need at least ",
        count * TarHeaders::kExtentFixedSize, " bytes after the header, have ", bytes.size() - at));
  }
  h.extents.reserve(count);
  uint64_t prev_end = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (bytes.size() - at < TarHeaders::kExtentFixedSize) {
      return absl::OutOfRangeError(absl::StrCat(name, ": truncated at extent ", i));
    }
    TarHeaders::Extent e;
    e.offset = GetLE(bytes, at, 8);
    const uint64_t length = GetLE(bytes, at + 8, 4);
    at += TarHeaders::kExtentFixedSize;
    const std::string where =
        absl::StrCat(name, ": extent ", i, " (offset ", e.offset, ", ", length, " bytes)");
    if (length == 0 || length > TarHeaders::kMaxExtentBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": length is not 1 to ", TarHeaders::kMaxExtentBytes));
    }
    if (i > 0 && e.offset < prev_end) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": starts inside the extent before it, which ends at ", prev_end));
    }
    if (e.offset > h.tar_size || length > h.tar_size - e.offset) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": passes the tar's end at ", h.tar_size));
    }
    if (bytes.size() - at < length) {
      return absl::OutOfRangeError(absl::StrCat(where, ": truncated"));
    }
    e.bytes.assign(bytes.substr(at, length));
    at += length;
    prev_end = e.offset + length;
    h.extents.push_back(std::move(e));
  }
  if (at != bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", bytes.size() - at, " trailing bytes"));
  }
  return h;
}

std::unique_ptr<RangeReader> MakeTarHeadersReader(std::shared_ptr<const TarHeaders> headers,
                                                  std::string name) {
  return std::make_unique<TarHeadersReader>(std::move(headers), std::move(name));
}

absl::Status TarHeaderRecorder::Keep(uint64_t offset, std::string_view bytes) {
  if (bytes.empty()) return absl::OkStatus();
  kept_ += bytes.size();
  if (kept_ > TarHeaders::kMaxBytes) {
    extents_.clear();
    return absl::ResourceExhaustedError(
        absl::StrCat("tar header records over ", TarHeaders::kMaxBytes, " bytes"));
  }
  if (!extents_.empty() && extents_.back().offset + extents_.back().bytes.size() == offset &&
      extents_.back().bytes.size() + bytes.size() <= TarHeaders::kMaxExtentBytes) {
    extents_.back().bytes.append(bytes);
  } else {
    extents_.push_back({offset, std::string(bytes)});
  }
  return absl::OkStatus();
}

absl::Status TarHeaderRecorder::OnHeaderBlock(uint64_t offset, std::string_view block) {
  return Keep(offset, block);
}

absl::Status TarHeaderRecorder::OnMetaPayload(uint64_t offset, char, std::string_view payload) {
  return Keep(offset, payload);
}

// An error (records over budget) stops the follower: Finish then gives nothing.
void TarHeaderRecorder::Feed(std::string_view bytes) { (void)follower_.Feed(bytes, *this); }

std::optional<TarHeaders> TarHeaderRecorder::Finish(const Digest& tar_digest,
                                                    const std::string& name) {
  if (!follower_.Finish().ok()) return std::nullopt;
  auto h = std::make_shared<TarHeaders>();
  h->tar_digest = tar_digest;
  h->tar_size = follower_.position();
  h->extents = std::move(extents_);
  extents_.clear();
  // The records stand for the tar only if the scan that indexes it from them succeeds.
  std::unique_ptr<RangeReader> reader = MakeTarHeadersReader(h, name);
  uint64_t entries = 0;
  absl::Status scan = ScanTarHeaders(*reader, [&](const TarEntry&) {
    ++entries;
    return absl::OkStatus();
  });
  if (!scan.ok()) return std::nullopt;
  h->entries = entries;
  return std::move(*h);
}

}  // namespace modelfs
