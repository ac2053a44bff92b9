// tar: a deterministic writer for the small layers modelfs builds (the volume image's layer A),
// and a header-only reader that indexes a tar through a RangeReader, so the lazy filesystem can
// list a remote, uncompressed tar layer with a few range reads and later serve each file as a
// (data_offset, size) slice of the blob.
//
// The reader is the TarFollower (tar_follower.h, which also holds TarEntry and the block and
// pax record parsers) driven header by header. Formats: ustar (with the 155-byte prefix), pax
// extended headers ('x'; 'g' is read and not applied) with `path`, `linkpath`, `size`, `uid`,
// `gid`, `mtime` and `SCHILY.xattr.*` records, GNU long names ('L', 'K') and GNU base-256
// numbers. It refuses bad checksums, negative or overflowing numbers, extended headers over
// max_meta_bytes, entries whose data passes the end of the blob, sparse and multi-volume
// entries, and (by default) unsafe paths.
//
// Thread safety: TarWriter is a value for one thread; the reader functions keep no state
// beyond the call (the RangeReader they are given must not be used concurrently).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/io/range_reader.h"
#include "core/oci/tar_follower.h"

namespace modelfs {

struct TarReadOptions {
  // Normalize names and refuse unsafe ones with kPermissionDenied (see path_safety.h). The root
  // directory entry ("./") is skipped instead of reported.
  bool check_paths = true;
  uint64_t max_entries = 1'000'000;            // kResourceExhausted past this
  uint64_t max_meta_bytes = kTarMaxMetaBytes;  // largest x/g/L/K payload accepted
  // Called with each range (offset, length) of the tar whose bytes the scan uses: header
  // blocks and pax / GNU payloads. What the scan yields depends on those bytes and the tar's
  // size alone (a reader may be asked for more: reads are windowed), so two tars of one size
  // that agree on these ranges scan alike (core/model/tar_records_check.h relies on it).
  std::function<void(uint64_t offset, uint64_t length)> on_bytes_used;
};

// Calls `fn` for each entry, in archive order, reading only header blocks (and pax/GNU
// payloads). Stops at the first all-zero block or at end of data on a block boundary.
// A non-OK status from `fn` stops the scan and is returned.
// Errors: kInvalidArgument "<name>: tar header at offset N: ..." for bad checksums, numbers,
// pax records or unsupported types; kOutOfRange for truncation; kPermissionDenied for unsafe
// paths; the reader's own errors.
absl::Status ScanTarHeaders(RangeReader& reader,
                            const std::function<absl::Status(const TarEntry&)>& fn,
                            const TarReadOptions& options = {});

// All entries, in archive order. Later entries with an equal path are kept too; the caller
// decides (OCI layers: the last one wins).
absl::StatusOr<std::vector<TarEntry>> IndexTar(RangeReader& reader,
                                               const TarReadOptions& options = {});
absl::StatusOr<std::vector<TarEntry>> IndexTarBytes(std::string_view tar,
                                                    const TarReadOptions& options = {});

// Writer. Every entry has mtime 0, uid/gid 0, empty user/group names, so equal inputs give
// equal bytes. Paths must pass CheckRelativePath (kPermissionDenied otherwise); directories are
// written with a trailing '/'. Names longer than ustar allows use a pax 'x' header (default) or
// a GNU 'L'/'K' header.
class TarWriter {
 public:
  enum class LongNames { kPax, kGnu };
  explicit TarWriter(LongNames long_names = LongNames::kPax) : long_names_(long_names) {}

  absl::Status AddFile(std::string_view path, std::string_view content, uint32_t mode = 0644);
  absl::Status AddDirectory(std::string_view path, uint32_t mode = 0755);
  absl::Status AddSymlink(std::string_view path, std::string_view target);
  // `target` is another entry's path (CheckRelativePath), as tar records hard links.
  absl::Status AddHardLink(std::string_view path, std::string_view target);

  // Appends the two zero end blocks and returns the archive. The writer is empty afterwards.
  std::string Finish();

  // Bytes written so far (without the end blocks).
  uint64_t size() const { return out_.size(); }

 private:
  absl::Status AddEntry(std::string_view path, char typeflag, std::string_view content,
                        uint32_t mode, std::string_view linkname);
  LongNames long_names_;
  std::string out_;
};

// The header block(s) for one entry, for streaming a large file into a tar without holding it:
// write these, then `size` data bytes, then TarPadding(size) zero bytes. Same rules as
// TarWriter. Errors: kPermissionDenied for an unsafe path, kInvalidArgument for a bad typeflag.
absl::StatusOr<std::string> EncodeTarHeader(
    std::string_view path, char typeflag, uint64_t size, uint32_t mode,
    std::string_view linkname = {}, TarWriter::LongNames long_names = TarWriter::LongNames::kPax);

}  // namespace modelfs
