// The seek index format, its strict parser, thinning, and what every codec's one-pass builder
// shares (the builders themselves are the codecs', codec_gzip.cc and codec_zstd.cc).
#include "core/oci/seek_index.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/oci/index_fields.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

constexpr std::string_view kMagic("MFSSEEK\0", 8);

using index_fields::GetDigest;
using index_fields::GetLE;
using index_fields::PutDigest;
using index_fields::PutU16;
using index_fields::PutU32;
using index_fields::PutU64;
using index_fields::PutU8;

}  // namespace

absl::StatusOr<std::string> InflateSeekWindow(const SeekPoint& p) {
  std::string out(p.window_size, '\0');
  z_stream zs{};
  if (inflateInit2(&zs, -15) != Z_OK) {
    return absl::ResourceExhaustedError("seek index: cannot allocate an inflate state");
  }
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(p.window.data()));
  zs.avail_in = static_cast<uInt>(p.window.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  int r = inflate(&zs, Z_FINISH);
  // A stream that fills the buffer exactly may need one more call to see its end.
  if (r == Z_BUF_ERROR && zs.avail_out == 0 && zs.avail_in > 0) {
    char extra;
    zs.next_out = reinterpret_cast<Bytef*>(&extra);
    zs.avail_out = 1;
    r = inflate(&zs, Z_FINISH);
  }
  const bool exact = r == Z_STREAM_END && zs.avail_in == 0 && zs.total_out == p.window_size;
  inflateEnd(&zs);
  if (!exact) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seek index: the window of the point at uncompressed offset ", p.uncompressed_offset,
        " is not raw deflate of exactly ", p.window_size, " bytes"));
  }
  return out;
}

SeekIndex ThinSeekIndex(SeekIndex index, uint64_t max_bytes) {
  const size_t n = index.points.size();
  auto size_with_stride = [&](size_t stride) {
    uint64_t bytes = SeekIndex::kHeaderSize;
    for (size_t i = 0; i < n; i += stride) {
      bytes += SeekIndex::kPointFixedSize + index.points[i].window.size();
    }
    return bytes;
  };
  const uint64_t whole = size_with_stride(1);
  if (whole <= max_bytes || n <= 1) return index;
  // Windows are about the same size, so the ratio is close; step up from there (a few steps).
  size_t stride = std::max<uint64_t>(2, whole / std::max<uint64_t>(max_bytes, 1));
  while (stride < n && size_with_stride(stride) > max_bytes) ++stride;
  std::vector<SeekPoint> kept;
  kept.reserve(n / stride + 1);
  for (size_t i = 0; i < n; i += stride) kept.push_back(std::move(index.points[i]));
  index.points = std::move(kept);
  return index;
}

void ThinSeekIndexes(std::vector<SeekIndex>& indexes, uint64_t budget) {
  uint64_t bytes = 0;
  uint64_t total = 0;  // layers are at most 4 TiB (kMaxModelLayerBytes): no overflow
  for (const SeekIndex& s : indexes) {
    total += s.compressed_size;
    bytes += SeekIndex::kHeaderSize;
    for (const SeekPoint& p : s.points) bytes += SeekIndex::kPointFixedSize + p.window.size();
  }
  if (bytes <= budget) return;
  for (SeekIndex& s : indexes) {
    // A fraction in double: budget * size could pass 64 bits, and a share need not be exact.
    const auto share = static_cast<uint64_t>(
        total == 0 ? static_cast<double>(budget)
                   : static_cast<double>(budget) *
                         (static_cast<double>(s.compressed_size) / static_cast<double>(total)));
    s = ThinSeekIndex(std::move(s), std::max<uint64_t>(share, 64u << 10));
  }
}

size_t SeekIndex::PointFor(uint64_t uncompressed_offset) const {
  auto it = std::upper_bound(
      points.begin(), points.end(), uncompressed_offset,
      [](uint64_t off, const SeekPoint& p) { return off < p.uncompressed_offset; });
  return it == points.begin() ? 0 : static_cast<size_t>(it - points.begin()) - 1;
}

uint64_t SeekIndex::CompressedEndFor(uint64_t uncompressed_end) const {
  auto it = std::lower_bound(
      points.begin(), points.end(), uncompressed_end,
      [](const SeekPoint& p, uint64_t off) { return p.uncompressed_offset < off; });
  return it == points.end() ? compressed_size : it->compressed_offset;
}

std::string SerializeSeekIndex(const SeekIndex& index) {
  std::string out;
  out.append(kMagic);
  PutU32(out, SeekIndex::kVersion);
  PutU32(out, index.encoding.codec().seek_id);
  PutU64(out, index.compressed_size);
  PutU64(out, index.uncompressed_size);
  PutDigest(out, index.layer_digest);
  PutDigest(out, index.diff_id);
  PutU64(out, index.points.size());
  for (const SeekPoint& p : index.points) {
    PutU64(out, p.uncompressed_offset);
    PutU64(out, p.compressed_offset);
    PutU8(out, static_cast<uint8_t>(p.kind));
    PutU8(out, p.bits);
    PutU16(out, 0);
    PutU32(out, p.window_size);
    PutU32(out, static_cast<uint32_t>(p.window.size()));
    out.append(p.window);
  }
  return out;
}

absl::Status CheckSeekPoint(const SeekIndex& index, uint64_t kind, uint64_t reserved,
                            uint64_t window_len, const std::string& where, SeekPoint& p) {
  if (reserved != 0) return absl::InvalidArgumentError(absl::StrCat(where, ": reserved not 0"));
  if (kind > 1 || (kind == 1 && !index.encoding.codec().windowed_points)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": kind ", kind, " is not allowed in a ",
                                                   std::string(index.encoding.seek_name()),
                                                   " index"));
  }
  p.kind = static_cast<SeekPoint::Kind>(kind);
  if (index.points.empty()) {
    if (p.uncompressed_offset != 0 || p.compressed_offset != 0 ||
        p.kind != SeekPoint::Kind::kStreamStart) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the first point must be the start of the stream"));
    }
  } else {
    const SeekPoint& prev = index.points.back();
    if (p.uncompressed_offset <= prev.uncompressed_offset ||
        p.compressed_offset <= prev.compressed_offset) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": offsets do not increase from the point before"));
    }
    if (p.uncompressed_offset >= index.uncompressed_size ||
        p.compressed_offset >= index.compressed_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": past the end of the layer (", index.compressed_size,
                       " compressed, ", index.uncompressed_size, " uncompressed bytes)"));
    }
  }
  if (p.kind == SeekPoint::Kind::kStreamStart) {
    if (p.bits != 0 || p.window_size != 0 || window_len != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": a stream start has no bit offset and no window"));
    }
    return absl::OkStatus();
  }
  if (p.bits > 7) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": bits ", int{p.bits}, " > 7"));
  }
  if (p.window_size == 0 || p.window_size > SeekIndex::kWindowSize ||
      p.window_size > p.uncompressed_offset) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": window_size ", p.window_size,
                                                   " is not in 1..", SeekIndex::kWindowSize,
                                                   " and within the bytes before the point"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SeekIndex> ParseSeekIndex(std::string_view bytes) {
  RETURN_IF_ERROR(index_fields::ReadHeader(bytes, kMagic, "seek index", SeekIndex::kVersion,
                                           SeekIndex::kHeaderSize));
  SeekIndex index;
  const uint64_t encoding = GetLE(bytes, 12, 4);
  const LayerCodec* codec = FindLayerCodecBySeekId(static_cast<uint32_t>(encoding));
  if (codec == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("seek index: encoding ", encoding, " is not ",
                                                   CompressedCodecList(/*with_ids=*/true)));
  }
  index.encoding = LayerEncoding(*codec);
  index.compressed_size = GetLE(bytes, 16, 8);
  index.uncompressed_size = GetLE(bytes, 24, 8);
  index.layer_digest = GetDigest(bytes, 32);
  index.diff_id = GetDigest(bytes, 64);
  const uint64_t count = GetLE(bytes, 96, 8);
  const std::string name = absl::StrCat("seek index of ", index.layer_digest.str());
  if (index.compressed_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": compressed_size is 0"));
  }
  if (count == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": no points (the first is the start)"));
  }
  size_t at = SeekIndex::kHeaderSize;
  if ((bytes.size() - at) / SeekIndex::kPointFixedSize < count) {
    return absl::OutOfRangeError(absl::StrCat(
        name, ": truncated: ", count, " points need at least ", count * SeekIndex::kPointFixedSize,
        " bytes after the header, have ", bytes.size() - at));
  }
  index.points.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    if (bytes.size() - at < SeekIndex::kPointFixedSize) {
      return absl::OutOfRangeError(absl::StrCat(name, ": truncated at point ", i));
    }
    SeekPoint p;
    p.uncompressed_offset = GetLE(bytes, at, 8);
    p.compressed_offset = GetLE(bytes, at + 8, 8);
    const uint64_t kind = GetLE(bytes, at + 16, 1);
    p.bits = static_cast<uint8_t>(GetLE(bytes, at + 17, 1));
    const uint64_t reserved = GetLE(bytes, at + 18, 2);
    p.window_size = static_cast<uint32_t>(GetLE(bytes, at + 20, 4));
    const uint64_t window_len = GetLE(bytes, at + 24, 4);
    at += SeekIndex::kPointFixedSize;
    const std::string where =
        absl::StrCat(name, ": point ", i, " (uncompressed offset ", p.uncompressed_offset,
                     ", compressed offset ", p.compressed_offset, ")");
    RETURN_IF_ERROR(CheckSeekPoint(index, kind, reserved, window_len, where, p));
    if (p.kind == SeekPoint::Kind::kBlockBoundary) {
      if (window_len == 0 || window_len > bytes.size() - at) {
        return absl::OutOfRangeError(
            absl::StrCat(where, ": truncated: window of ", window_len, " bytes"));
      }
      // Stored as is: inflated where a decode starts at this point (SpanDecoder), which
      // refuses a window that is not raw deflate of window_size bytes. Inflating every window
      // here cost a 2 GiB layer's mount 512 inflates before its first file appeared.
      p.window.assign(bytes.data() + at, window_len);
      at += window_len;
    }
    index.points.push_back(std::move(p));
  }
  if (at != bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", bytes.size() - at, " trailing bytes after ", count, " points"));
  }
  return index;
}

SeekIndexBuilder::SeekIndexBuilder(std::string layer, LayerEncoding encoding)
    : layer_(std::move(layer)) {
  index_.encoding = encoding;
  index_.points.push_back(SeekPoint{});
}

SeekIndex SeekIndexBuilder::TakeIndex(uint64_t consumed, uint64_t produced) {
  // Frames or members at the end that add no bytes (zstd:chunked ends with skippable frames
  // holding its table of contents) leave a point at the end of the uncompressed bytes: it
  // covers nothing, and a reader refuses it.
  while (index_.points.size() > 1 && index_.points.back().uncompressed_offset >= produced) {
    index_.points.pop_back();
  }
  index_.compressed_size = consumed;
  index_.uncompressed_size = produced;
  index_.layer_digest = compressed_hash_.Finish();
  index_.diff_id = uncompressed_hash_.Finish();
  return std::move(index_);
}

absl::StatusOr<std::unique_ptr<SeekIndexBuilder>> SeekIndexBuilder::Create(LayerEncoding encoding,
                                                                           std::string layer,
                                                                           uint64_t gzip_spacing) {
  if (encoding.codec().new_seek_index_builder == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(layer, ": a ", std::string(encoding.name()), " layer has no seek index"));
  }
  return encoding.codec().new_seek_index_builder(std::move(layer),
                                                 std::max<uint64_t>(gzip_spacing, 1));
}

absl::StatusOr<SeekIndex> BuildSeekIndex(LayerEncoding encoding, std::string_view compressed,
                                         std::string* uncompressed, uint64_t gzip_spacing) {
  ASSIGN_OR_RETURN(std::unique_ptr<SeekIndexBuilder> b,
                   SeekIndexBuilder::Create(encoding, "layer", gzip_spacing));
  constexpr size_t kPiece = 4 << 20;
  for (size_t off = 0; off < compressed.size(); off += kPiece) {
    RETURN_IF_ERROR(b->Feed(compressed.substr(off, kPiece), [&](std::string_view piece) {
      if (uncompressed != nullptr) uncompressed->append(piece);
      return absl::OkStatus();
    }));
  }
  return b->Finish();
}

}  // namespace modelfs
