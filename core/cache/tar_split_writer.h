// TarSplitWriter: writes a decoded tar layer as it streams, its larger regular files straight
// into member files of their own (docs/cache-format.md, "Member files").
//
// Thread safety: a TarSplitWriter belongs to one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/cache/layer_segments.h"
#include "core/cache/layer_store.h"
#include "core/oci/tar_follower.h"

namespace modelfs {

// Writes a tar as it is decoded: its larger regular files (member_min_bytes and up) straight
// into member files of their own, `<members_dir>/<data offset>` (docs/cache-format.md, "Member
// files"), everything else (header blocks, extended-header payloads, small files, padding) into
// the tar's data file, which keeps holes where the members are. It follows the tar's headers as
// they pass (a TarFollower); once it cannot (not a tar, a header it does not know, an extended
// header over 1 MiB) or past the end-of-archive block, the rest goes to the data file. Any split
// serves the same bytes: a member only has to match a file exactly for that file to be served
// by passthrough. Member files are handed to writeback as they fill, so the flush before the
// seal has little left to do.
class TarSplitWriter : private TarFollower::Listener {
 public:
  TarSplitWriter(const LayerStore& store, int tar_fd, std::string tar_path, std::string members_dir,
                 uint64_t member_min_bytes, std::string no_space);
  ~TarSplitWriter() override;
  TarSplitWriter(const TarSplitWriter&) = delete;
  TarSplitWriter& operator=(const TarSplitWriter&) = delete;

  // Writes the next bytes of the tar. Errors: kResourceExhausted (`no_space`) on a full disk,
  // kInternal naming the file and offset.
  absl::Status Write(std::string_view bytes);

  // All written: the data file gets the tar's full size (holes at its end too); returns the
  // member files, which the caller owns from here.
  absl::StatusOr<std::vector<LayerSegments::File>> Finish();

  // Why the tar stopped being followed before its end (after Finish: a tar cut short too), ""
  // while it is followed and once it ended well. Nothing to act on: the rest of the tar is in
  // the data file, served all the same.
  std::string stopped() const;

 private:
  static constexpr uint64_t kWritebackBytes = 64ull << 20;

  absl::Status OnEntry(const TarEntry& entry) override;
  std::string MemberPath(const LayerSegments::File& m) const;
  absl::Status Put(int fd, const std::string& path, std::string_view bytes, uint64_t offset);

  const LayerStore& store_;
  const int tar_fd_;
  const std::string tar_path_;
  const std::string members_dir_;
  const uint64_t member_min_bytes_;
  const std::string no_space_;
  TarFollower follower_;
  uint64_t pos_ = 0;                          // bytes of the tar written so far
  std::vector<LayerSegments::File> members_;  // in tar order
  size_t current_ = 0;                        // the first member not written to its end
  uint64_t kicked_ = 0;                       // members are in writeback up to here
  bool dir_made_ = false;
};

}  // namespace modelfs
