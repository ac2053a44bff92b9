// The seek windows file (`.modelfs/seek/<layer hex>.win`, docs/seek-index.md "Windows file"):
// every gzip seek point of a layer, as in the seek index, but with its 32 KiB window stored
// apart from the point. The file is a small table (per point: offsets, kind, bits, window
// size, where its window lies in the file and the window's SHA-256) followed by the windows.
// A mount fetches the table only (pinned by its digest in model.json); a decode that first
// starts at point k fetches window k by range and checks it against the table's hash before
// the decoder sees it. So a model's ready time no longer grows with its size, and push and
// convert keep every 4 MiB point (no thinning: nothing of the windows is fetched at mount).
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/oci/digest.h"
#include "core/oci/seek_index.h"

namespace modelfs {

// Where a point's window lies in the windows file, and its hash.
struct SeekWindowRef {
  uint64_t offset = 0;  // from the start of the file; windows follow the table in point order
  uint32_t length = 0;  // stored (raw deflate) bytes; 0 for a stream start
  Digest hash;          // SHA-256 of the stored bytes; all zero for a stream start
  friend bool operator==(const SeekWindowRef&, const SeekWindowRef&) = default;
};

struct SeekWindowsTable {
  static constexpr uint32_t kVersion = 1;
  // magic 8, version 4, encoding 4, compressed and uncompressed size 2*8, layer digest and
  // diff ID 2*32, count 8, table size 8.
  static constexpr size_t kHeaderSize = 112;
  // uncompressed and compressed offset 2*8, kind 1, bits 1, reserved 2, window_size 4,
  // window offset 8, window length 4, reserved 4, window SHA-256 32.
  static constexpr size_t kEntrySize = 72;

  // Every point, with `window` empty: the windows are in the file, at `windows[i]`.
  SeekIndex index;
  std::vector<SeekWindowRef> windows;  // one per point

  // Bytes of the header and the entries: what a mount fetches.
  uint64_t table_size() const { return kHeaderSize + kEntrySize * windows.size(); }
  // The whole file: the table and every window after it.
  uint64_t file_size() const;
  friend bool operator==(const SeekWindowsTable&, const SeekWindowsTable&) = default;
};

// The windows file of a gzip seek index (every point kept): the table, then the stored windows
// in point order. Deterministic. `index` is what SeekIndexBuilder gave (windows inline).
std::string SerializeSeekWindows(const SeekIndex& index);
// The table alone, as SerializeSeekWindows writes it: table_size() bytes.
std::string SerializeSeekWindowsTable(const SeekWindowsTable& table);

// Parses the table at the start of `bytes` (the table alone, or the whole file: bytes after the
// table are not read). Strict, as ParseSeekIndex (seek-index.md, "Reading rules"), and:
// encoding must be gzip; the stored table size must be kHeaderSize + count * kEntrySize; each
// window must start where the one before ended (the first at the table's end), a stream start
// has no window and a zero hash, a block boundary a window of 1 byte or more.
// Errors: kOutOfRange (truncated: fewer bytes than the table needs; `count` is checked against
// the bytes given before anything is allocated); kInvalidArgument naming the field and the
// point at fault.
absl::StatusOr<SeekWindowsTable> ParseSeekWindowsTable(std::string_view bytes);

// Checks a window fetched for `point` against the table: its length and its SHA-256. `layer`
// names the layer in the error. Errors: kDataLoss naming the layer, the point, its offsets and
// the file offset of the window; kInvalidArgument for a point out of range or a stream start.
absl::Status CheckSeekWindow(const SeekWindowsTable& table, size_t point, std::string_view stored,
                             std::string_view layer);

}  // namespace modelfs
