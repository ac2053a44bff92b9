// The seek windows file: writer, strict table parser and the per-window check.
#include "core/oci/seek_windows.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "core/oci/index_fields.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

constexpr std::string_view kMagic("MFSSWIN\0", 8);

using index_fields::GetDigest;
using index_fields::GetLE;
using index_fields::PutDigest;
using index_fields::PutU16;
using index_fields::PutU32;
using index_fields::PutU64;
using index_fields::PutU8;

Digest ZeroDigest() { return Digest::FromRaw(std::array<uint8_t, 32>{}); }

void PutHeader(std::string& out, const SeekIndex& index, uint64_t count) {
  out.append(kMagic);
  PutU32(out, SeekWindowsTable::kVersion);
  PutU32(out, index.encoding.codec().seek_id);
  PutU64(out, index.compressed_size);
  PutU64(out, index.uncompressed_size);
  PutDigest(out, index.layer_digest);
  PutDigest(out, index.diff_id);
  PutU64(out, count);
  PutU64(out, SeekWindowsTable::kHeaderSize + SeekWindowsTable::kEntrySize * count);
}

void PutEntry(std::string& out, const SeekPoint& p, const SeekWindowRef& w) {
  PutU64(out, p.uncompressed_offset);
  PutU64(out, p.compressed_offset);
  PutU8(out, static_cast<uint8_t>(p.kind));
  PutU8(out, p.bits);
  PutU16(out, 0);
  PutU32(out, p.window_size);
  PutU64(out, w.offset);
  PutU32(out, w.length);
  PutU32(out, 0);
  PutDigest(out, w.length == 0 ? ZeroDigest() : w.hash);
}

}  // namespace

uint64_t SeekWindowsTable::file_size() const {
  uint64_t end = table_size();
  for (const SeekWindowRef& w : windows) end += w.length;
  return end;
}

std::string SerializeSeekWindows(const SeekIndex& index) {
  const uint64_t n = index.points.size();
  std::string out;
  PutHeader(out, index, n);
  uint64_t at = SeekWindowsTable::kHeaderSize + SeekWindowsTable::kEntrySize * n;
  for (const SeekPoint& p : index.points) {
    SeekWindowRef w;
    w.offset = at;
    w.length = static_cast<uint32_t>(p.window.size());
    if (w.length > 0) w.hash = Digest::Of(p.window);
    PutEntry(out, p, w);
    at += w.length;
  }
  for (const SeekPoint& p : index.points) out.append(p.window);
  return out;
}

std::string SerializeSeekWindowsTable(const SeekWindowsTable& table) {
  std::string out;
  PutHeader(out, table.index, table.windows.size());
  for (size_t i = 0; i < table.windows.size() && i < table.index.points.size(); ++i) {
    PutEntry(out, table.index.points[i], table.windows[i]);
  }
  return out;
}

absl::StatusOr<SeekWindowsTable> ParseSeekWindowsTable(std::string_view bytes) {
  RETURN_IF_ERROR(index_fields::ReadHeader(
      bytes, kMagic, "seek windows", SeekWindowsTable::kVersion, SeekWindowsTable::kHeaderSize));
  SeekWindowsTable t;
  SeekIndex& index = t.index;
  const uint64_t encoding = GetLE(bytes, 12, 4);
  // Only a codec whose points carry windows has a windows file (gzip).
  const LayerCodec* codec = FindLayerCodecBySeekId(static_cast<uint32_t>(encoding));
  if (codec == nullptr || !codec->windowed_points) {
    return absl::InvalidArgumentError(
        absl::StrCat("seek windows: encoding ", encoding, " is not 1 (gzip)"));
  }
  index.encoding = LayerEncoding(*codec);
  index.compressed_size = GetLE(bytes, 16, 8);
  index.uncompressed_size = GetLE(bytes, 24, 8);
  index.layer_digest = GetDigest(bytes, 32);
  index.diff_id = GetDigest(bytes, 64);
  const uint64_t count = GetLE(bytes, 96, 8);
  const uint64_t table_size = GetLE(bytes, 104, 8);
  const std::string name = absl::StrCat("seek windows of ", index.layer_digest.str());
  if (index.compressed_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": compressed_size is 0"));
  }
  if (count == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": no points (the first is the start)"));
  }
  const uint64_t room = bytes.size() - SeekWindowsTable::kHeaderSize;
  if (room / SeekWindowsTable::kEntrySize < count) {
    return absl::OutOfRangeError(absl::StrCat(name, ": truncated: ", count, " points need ", count,
                                              " entries of ", SeekWindowsTable::kEntrySize,
                                              " bytes after the header, have ", room));
  }
  if (table_size != SeekWindowsTable::kHeaderSize + SeekWindowsTable::kEntrySize * count) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": table size ", table_size, " is not ",
                                                   SeekWindowsTable::kHeaderSize, " + ", count,
                                                   " * ", SeekWindowsTable::kEntrySize));
  }
  index.points.reserve(count);
  t.windows.reserve(count);
  uint64_t next_window = table_size;
  for (uint64_t i = 0; i < count; ++i) {
    const size_t at = SeekWindowsTable::kHeaderSize + SeekWindowsTable::kEntrySize * i;
    SeekPoint p;
    p.uncompressed_offset = GetLE(bytes, at, 8);
    p.compressed_offset = GetLE(bytes, at + 8, 8);
    const uint64_t kind = GetLE(bytes, at + 16, 1);
    p.bits = static_cast<uint8_t>(GetLE(bytes, at + 17, 1));
    const uint64_t reserved = GetLE(bytes, at + 18, 2) | GetLE(bytes, at + 36, 4);
    p.window_size = static_cast<uint32_t>(GetLE(bytes, at + 20, 4));
    SeekWindowRef w;
    w.offset = GetLE(bytes, at + 24, 8);
    w.length = static_cast<uint32_t>(GetLE(bytes, at + 32, 4));
    w.hash = GetDigest(bytes, at + 40);
    const std::string where =
        absl::StrCat(name, ": point ", i, " (uncompressed offset ", p.uncompressed_offset,
                     ", compressed offset ", p.compressed_offset, ")");
    RETURN_IF_ERROR(CheckSeekPoint(index, kind, reserved, w.length, where, p));
    if (p.kind == SeekPoint::Kind::kBlockBoundary && w.length == 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": a block boundary has no window"));
    }
    if (w.length == 0 && w.hash != ZeroDigest()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": no window but a hash"));
    }
    if (w.offset != next_window) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": window at file offset ", w.offset,
                                                     ", the one before ended at ", next_window));
    }
    next_window += w.length;
    index.points.push_back(std::move(p));
    t.windows.push_back(w);
  }
  return t;
}

absl::Status CheckSeekWindow(const SeekWindowsTable& table, size_t point, std::string_view stored,
                             std::string_view layer) {
  if (point >= table.windows.size() || table.windows[point].length == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(layer), ": seek point ", point, " has no window to check"));
  }
  const SeekWindowRef& w = table.windows[point];
  const SeekPoint& p = table.index.points[point];
  const std::string where =
      absl::StrCat(std::string(layer), ": the window of seek point ", point,
                   " (uncompressed offset ", p.uncompressed_offset, ", compressed offset ",
                   p.compressed_offset, ") at offset ", w.offset, " of the windows file");
  if (stored.size() != w.length) {
    return absl::DataLossError(
        absl::StrCat(where, " has ", stored.size(), " bytes, the table says ", w.length));
  }
  const Digest got = Digest::Of(stored);
  if (got != w.hash) {
    return absl::DataLossError(
        absl::StrCat(where, " has ", got.str(), ", the table says ", w.hash.str()));
  }
  return absl::OkStatus();
}

}  // namespace modelfs
