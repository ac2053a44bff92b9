// TarSplitWriter: writes a decoded tar layer as it streams, its larger regular files straight
// into member files of their own (docs/cache-format.md, "Member files").
//
// Thread safety: a TarSplitWriter belongs to one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/cache/layer_segments.h"
#include "core/cache/layer_store.h"

namespace modelfs {

// Writes a tar as it is decoded: its larger regular files (member_min_bytes and up) straight
// into member files of their own, `<members_dir>/<data offset>` (docs/cache-format.md, "Member
// files"), everything else (headers, small files, padding) into the tar's data file, which keeps
// holes where the members are. It follows the tar's headers as they pass (ParseTarHeaderBlock,
// a pax "size" record); once it cannot (not a tar, a header it does not know) the rest goes to
// the data file. Any split serves the same bytes: a member only has to match a file exactly for
// that file to be served by passthrough. Member files are handed to writeback as they fill, so
// the flush before the seal has little left to do.
class TarSplitWriter {
 public:
  TarSplitWriter(const LayerStore& store, int tar_fd, std::string tar_path, std::string members_dir,
                 uint64_t member_min_bytes, std::string no_space);
  ~TarSplitWriter();
  TarSplitWriter(const TarSplitWriter&) = delete;
  TarSplitWriter& operator=(const TarSplitWriter&) = delete;

  // Writes the next bytes of the tar. Errors: kResourceExhausted (`no_space`) on a full disk,
  // kInternal naming the file and offset.
  absl::Status Write(std::string_view bytes);

  // All written: the data file gets the tar's full size (holes at its end too); returns the
  // member files, which the caller owns from here.
  absl::StatusOr<std::vector<LayerSegments::File>> Finish();

 private:
  static constexpr uint64_t kWritebackBytes = 64ull << 20;

  void NextHeader();
  void OpenMember(uint64_t offset, uint64_t length);
  std::string MemberPath(const LayerSegments::File& m) const;
  absl::Status Put(int fd, const std::string& path, std::string_view bytes, uint64_t offset);

  const LayerStore& store_;
  const int tar_fd_;
  const std::string tar_path_;
  const std::string members_dir_;
  const uint64_t member_min_bytes_;
  const std::string no_space_;
  uint64_t pos_ = 0;                          // bytes of the tar written so far
  bool following_ = true;                     // the headers are still understood
  uint64_t next_header_ = 0;                  // offset of the next header block
  std::string header_;                        // the header block being received
  std::string meta_;                          // a pax header's records being received
  uint64_t meta_end_ = 0;                     // where they end
  std::optional<uint64_t> pax_size_;          // its "size", for the next entry
  std::vector<LayerSegments::File> members_;  // the last one is being written
  uint64_t kicked_ = 0;                       // the last member is in writeback up to here
  bool dir_made_ = false;
};

}  // namespace modelfs
