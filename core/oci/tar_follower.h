// TarFollower: the one reader of a tar's structure. It follows a tar's bytes, fed in pieces of
// any size, parses its header blocks (ustar and GNU numbers, base-256 too, checksums), pax 'x'
// and 'g' extended headers, GNU 'L'/'K' long names, sizes and the end-of-archive block, and
// calls back: each header block and extended-header payload as it is read, each entry (path,
// type, size, data offset, ...) once its headers are read, and the entry's data as it passes.
// Four consumers drive it, so they agree on what a tar holds and on which tars they cannot
// follow (tests/fuzz/tar_consumers_fuzz.cc checks it):
//   - ScanTarHeaders (tar.h) reads only what it needs through a RangeReader: wanted() says
//     where the next header is, and SkipTo() jumps over the data before it;
//   - TarHeaderRecorder (tar_headers.h) keeps the header blocks and payloads as records;
//   - TarSplitWriter (core/cache) writes larger files of a decoded tar to member files;
//   - TarTensorIndexer (core/publish) indexes the weight files among the members.
//
// Extended headers. Every one of 'x', 'g', 'L' and 'K' has a payload of at most
// max_meta_bytes (1 MiB), read whole and handed to OnMetaPayload; a larger one is refused
// (the follower stops), for every consumer alike. 1 MiB is the limit of Go's archive/tar, so of
// containerd's unpacker, for all four: a tar we follow is one containerd unpacks. The payloads
// are tar metadata, never file contents: TarHeaderRecorder keeps them as records (so a scan of
// the records reads what a scan of the tar reads) and TarSplitWriter leaves them in the data
// file with the header blocks. 'g' (global) records hold defaults (an mtime, git's commit id)
// that containerd ignores when it unpacks, and so do we: read, bounded, kept, not applied.
// (Until this follower, TarSplitWriter skipped 'g', 'L' and 'K' payloads of any size unread.)
//
// Errors name the tar (Options::name) and the offset of the header at fault.
//
// Thread safety: a TarFollower is a value for one thread; it holds no listener between calls.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace modelfs {

inline constexpr uint64_t kTarBlockSize = 512;
// The largest extended-header payload ('x', 'g', 'L', 'K') followed.
inline constexpr uint64_t kTarMaxMetaBytes = 1 << 20;

// Zero bytes needed after `size` data bytes to reach a block boundary.
inline uint64_t TarPadding(uint64_t size) {
  return (kTarBlockSize - size % kTarBlockSize) % kTarBlockSize;
}

enum class TarEntryType { kFile, kDirectory, kSymlink, kHardLink, kOther };

struct TarEntry {
  // Canonical relative path (NormalizeRelativePath) when TarReadOptions::check_paths is set,
  // else the raw name with any pax/GNU override applied.
  std::string path;
  TarEntryType type = TarEntryType::kFile;
  char typeflag = '0';         // raw typeflag ('\0' for old regular files)
  uint64_t size = 0;           // data bytes; 0 for header-only types (dirs, links, devices)
  uint64_t header_offset = 0;  // offset of the first header block (pax/GNU ones included)
  uint64_t data_offset = 0;    // offset of the data in the tar
  // Symlink target (raw, may be absolute) or hard-link target (canonical when check_paths).
  std::string linkname;
  uint32_t mode = 0;  // permission bits (& 07777)
  // Owner and modification time (pax `uid`, `gid`, `mtime` override the header's fields;
  // mtime_nsec is the fraction of a pax `mtime`, else 0), device numbers of '3'/'4' entries,
  // and extended attributes from pax `SCHILY.xattr.<name>` records (name -> raw value), as
  // an unpacker applies them (docs/snapshotter.md, "Lazy plain images").
  uint64_t uid = 0;
  uint64_t gid = 0;
  int64_t mtime = 0;
  uint32_t mtime_nsec = 0;
  uint64_t devmajor = 0;
  uint64_t devminor = 0;
  std::map<std::string, std::string> xattrs;
};

// One header block: `end` for an all-zero (end-of-archive) block, else its typeflag, size field
// (octal or GNU base-256; a pax 'x' header before it may override it) and permission bits.
// Errors: kInvalidArgument "bad checksum ...", "size field: ...", ...
struct TarHeaderBlock {
  bool end = false;
  char typeflag = '0';
  uint64_t size = 0;
  uint32_t mode = 0;
};
absl::StatusOr<TarHeaderBlock> ParseTarHeaderBlock(std::string_view block);
// Calls `fn` for each "<len> <key>=<value>\n" record of a pax extended header's data; its error
// stops the parse. Errors: kInvalidArgument for a malformed record.
absl::Status ParsePaxRecords(
    std::string_view records,
    const std::function<absl::Status(std::string_view key, std::string_view value)>& fn);
// A pax "size" value. Errors: kInvalidArgument when not a decimal int64.
absl::StatusOr<uint64_t> ParsePaxSize(std::string_view value);

class TarFollower {
 public:
  struct Options {
    std::string name = "tar";  // names the tar in errors ("layer sha256:...")
    uint64_t max_meta_bytes = kTarMaxMetaBytes;
    // The tar's size when it is known before its bytes are (a RangeReader's): an extended
    // header or an entry whose bytes pass it is refused at its header, before it is reported.
    std::optional<uint64_t> size;
  };

  // What a consumer hears. Each call's error stops the follower and is Feed's error.
  class Listener {
   public:
    Listener() = default;
    Listener(const Listener&) = default;
    Listener& operator=(const Listener&) = default;
    virtual ~Listener() = default;
    // A header block (512 bytes at `offset`) as read, before it is parsed; the end block too.
    virtual absl::Status OnHeaderBlock(uint64_t offset, std::string_view block);
    // An extended header's whole payload ('x', 'g', 'L', 'K'; empty ones too) at `offset`,
    // before it is parsed.
    virtual absl::Status OnMetaPayload(uint64_t offset, char typeflag, std::string_view payload);
    // An entry, once its header block and the extended headers before it are read; its data
    // follows. The path is raw (pax or GNU override applied, not normalized).
    virtual absl::Status OnEntry(const TarEntry& entry);
    // `bytes` of `entry`'s data, at tar offset `offset`, as they are fed (skipped bytes are
    // not). The last call of an entry ends at entry.data_offset + entry.size.
    virtual absl::Status OnData(const TarEntry& entry, uint64_t offset, std::string_view bytes);
  };

  // Where the follower wants its next bytes: `length` bytes (the rest of a header block or of
  // an extended header's payload) at `offset`, past any data and padding; length 0 once it
  // no longer follows.
  struct Want {
    uint64_t offset = 0;
    uint64_t length = 0;
  };

  TarFollower();
  explicit TarFollower(Options options);

  // The tar's next bytes, at position(). Returns the listener's error (the follower stops).
  // A tar it cannot follow is no error here: it stops and status() says why. Once stopped or
  // past the end-of-archive block, bytes are only counted.
  absl::Status Feed(std::string_view bytes, Listener& listener);

  Want wanted() const;
  // Moves position() forward to `offset` over data and padding bytes, which are not fed (no
  // OnData); it stops early at the next header block.
  void SkipTo(uint64_t offset);

  // No more bytes. A tar that ends inside a header block, an extended header's payload or an
  // entry's data (not its padding), or with an extended header whose entry never came, is
  // refused (kOutOfRange). Returns status().
  const absl::Status& Finish();

  // OK while the tar is followed and once it ended well (its end block, or end of data on a
  // block boundary); else why it is not: kInvalidArgument "<name>: tar header at offset N: ..."
  // (a bad block, number or pax record, an unsupported entry type, an extended header over
  // max_meta_bytes), kOutOfRange "<name>: tar truncated: ...", or the listener's error.
  const absl::Status& status() const { return status_; }
  // Neither stopped nor past the end.
  bool following() const { return state_ < State::kEnded; }
  // Bytes fed and skipped.
  uint64_t position() const { return pos_; }

 private:
  enum class State { kHeader, kMeta, kData, kPadding, kEnded, kStopped };
  // What the extended headers before an entry said.
  struct Pending {
    std::optional<std::string> path;
    std::optional<std::string> linkpath;
    std::optional<uint64_t> size;
    std::optional<uint64_t> uid;
    std::optional<uint64_t> gid;
    std::optional<std::pair<int64_t, uint32_t>> mtime;
    std::map<std::string, std::string> xattrs;
    uint64_t header_offset = 0;
    bool seen = false;  // an 'x', 'L' or 'K' header is waiting for its entry
  };

  absl::Status OnBlock(Listener& listener);
  absl::Status OnPayload(Listener& listener);
  absl::Status ParsePax(std::string_view records);
  absl::Status StartPayload(uint64_t size, Listener& listener);
  void StartPadding(uint64_t n);
  // Stops the follower with `why` (kept in status_); returns OK: a tar not followed is no
  // error of Feed.
  absl::Status Refuse(absl::Status why);
  absl::Status Bad(uint64_t at, absl::string_view why);
  absl::Status Truncated(absl::string_view why);

  Options options_;
  State state_ = State::kHeader;
  uint64_t pos_ = 0;
  uint64_t remaining_ = 0;  // kMeta, kData, kPadding: bytes left of the payload, data, padding
  uint64_t padding_ = 0;    // after kMeta or kData
  std::string block_;       // kHeader: the block so far
  std::string meta_;        // kMeta: the payload so far
  char meta_type_ = 0;
  uint64_t meta_at_ = 0;  // its header's offset
  Pending pending_;
  TarEntry entry_;  // the last entry reported
  absl::Status status_;
};

}  // namespace modelfs
