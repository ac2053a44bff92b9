// TarHeaders: the header bytes of a tar (docs/volume-image.md, "Tar headers"), recorded where
// they lie, so that the tar can be indexed without reading it. `convert` records them for each
// tar layer of a model or image as the layer streams past (TarHeaderRecorder) and V carries
// them, named by digest; a mount then lists a compressed layer without decoding a span per
// file. Indexing goes through ScanTarHeaders as ever, over a reader that holds only the
// recorded bytes (MakeTarHeadersReader): every other byte reads as 0xff, which no header parses
// from, so a record that misses a header makes the index fail, never come out short.
//
// The records are metadata from V, trusted as V is (pinned by digest): they say what the tar's
// entries are; the entries' bytes are still verified against the chunk index before they are
// served. A V found among an image's referrers (lazy_images) is pinned by nobody: there the tree
// is listed from its records, but nothing is served until they match the layers
// (core/model/tar_records_check.h).
//
// Thread safety: TarHeaders is an immutable value; a TarHeaderRecorder belongs to one thread;
// the reader, like every RangeReader, to one caller at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/range_reader.h"
#include "core/oci/digest.h"
#include "core/oci/tar_follower.h"

namespace modelfs {

struct TarHeaders {
  static constexpr uint32_t kVersion = 1;
  static constexpr size_t kHeaderSize = 72;       // magic 8, version 4, reserved 4, digest 32, 3*8
  static constexpr size_t kExtentFixedSize = 12;  // offset 8, length 4
  // convert leaves a layer's headers out of V when they would be larger (a base image of many
  // thousands of files): that layer is indexed from its own bytes at mount, as before.
  static constexpr uint64_t kMaxBytes = 4ull << 20;
  // One extent at most (a header block and the largest extended-header payload followed,
  // kTarMaxMetaBytes, with the blocks around them).
  static constexpr uint64_t kMaxExtentBytes = kTarMaxMetaBytes + (4ull << 10);

  struct Extent {
    uint64_t offset = 0;
    std::string bytes;
    friend bool operator==(const Extent&, const Extent&) = default;
  };
  Digest tar_digest;  // SHA-256 of the tar (an uncompressed layer's digest, else its diff ID)
  uint64_t tar_size = 0;
  uint64_t entries = 0;  // what ScanTarHeaders reports over them (for humans and checks)
  // Increasing, not overlapping, within tar_size. Adjacent bytes are one extent up to
  // kMaxExtentBytes (a run of thousands of header-only entries spans several).
  std::vector<Extent> extents;

  uint64_t recorded_bytes() const;
  friend bool operator==(const TarHeaders&, const TarHeaders&) = default;
};

// Serialization (docs/volume-image.md, "Tar headers"). Deterministic.
std::string SerializeTarHeaders(const TarHeaders& headers);
// Errors: kOutOfRange (truncated); kInvalidArgument naming the field or extent at fault (bad
// magic, version, reserved bytes; a count the bytes cannot hold, checked before allocating; an
// empty or oversized extent; extents that overlap, touch or leave the tar; trailing bytes).
absl::StatusOr<TarHeaders> ParseTarHeaders(std::string_view bytes);

// The tar as a RangeReader that holds only the recorded bytes: anything else reads as 0xff.
// `name` names it in errors ("layer sha256:...").
std::unique_ptr<RangeReader> MakeTarHeadersReader(std::shared_ptr<const TarHeaders> headers,
                                                  std::string name);

// Follows a tar as its bytes pass, in pieces of any size (a TarFollower), and keeps every byte
// ScanTarHeaders reads: header blocks (the end-of-archive block too) and the payloads of
// extended headers ('x', 'g', 'L', 'K').
class TarHeaderRecorder : private TarFollower::Listener {
 public:
  void Feed(std::string_view bytes);
  // The records of the tar fed, which is `tar_digest`, once ScanTarHeaders has indexed the tar
  // from them alone (`name` names it in errors). nullopt when the tar could not be followed
  // (not a tar, sparse or multi-volume entries, an extended header over 1 MiB, cut short) or
  // its records are over TarHeaders::kMaxBytes: the layer is then indexed from its own bytes.
  std::optional<TarHeaders> Finish(const Digest& tar_digest, const std::string& name);

 private:
  absl::Status OnHeaderBlock(uint64_t offset, std::string_view block) override;
  absl::Status OnMetaPayload(uint64_t offset, char typeflag, std::string_view payload) override;
  absl::Status Keep(uint64_t offset, std::string_view bytes);

  TarFollower follower_;
  uint64_t kept_ = 0;
  std::vector<TarHeaders::Extent> extents_;
};

}  // namespace modelfs
