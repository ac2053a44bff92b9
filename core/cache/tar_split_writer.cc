// TarSplitWriter (tar_split_writer.h): a decoded tar split into its data file and member files
// as it is written.
#include "core/cache/tar_split_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/oci/tar.h"
#include "core/status/status_macros.h"

namespace modelfs {

TarSplitWriter::TarSplitWriter(const LayerStore& store, int tar_fd, std::string tar_path,
                               std::string members_dir, uint64_t member_min_bytes,
                               std::string no_space)
    : store_(store),
      tar_fd_(tar_fd),
      tar_path_(std::move(tar_path)),
      members_dir_(std::move(members_dir)),
      member_min_bytes_(std::max<uint64_t>(member_min_bytes, 1)),
      no_space_(std::move(no_space)) {}

TarSplitWriter::~TarSplitWriter() {
  for (const LayerSegments::File& m : members_) close(m.fd);
}

absl::Status TarSplitWriter::Write(std::string_view bytes) {
  while (!bytes.empty()) {
    if (following_ && pos_ >= next_header_) {
      // A header block (it may come in several pieces): always the data file's.
      const size_t n = std::min<size_t>(bytes.size(), kTarBlockSize - header_.size());
      header_.append(bytes.data(), n);
      RETURN_IF_ERROR(Put(tar_fd_, tar_path_, bytes.substr(0, n), pos_));
      pos_ += n;
      bytes.remove_prefix(n);
      if (header_.size() == kTarBlockSize) NextHeader();
      continue;
    }
    uint64_t end = following_ ? next_header_ : std::numeric_limits<uint64_t>::max();
    const bool in_member = !members_.empty() && pos_ >= members_.back().offset &&
                           pos_ < members_.back().offset + members_.back().length;
    if (in_member) end = members_.back().offset + members_.back().length;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size(), end - pos_));
    std::string_view run = bytes.substr(0, n);
    if (in_member) {
      const LayerSegments::File& m = members_.back();
      RETURN_IF_ERROR(Put(m.fd, MemberPath(m), run, pos_ - m.offset));
      if (pos_ + n - kicked_ >= kWritebackBytes || pos_ + n == end) {
        // Start writing it back now; the flush before the seal then waits for little.
        (void)sync_file_range(m.fd, static_cast<off_t>(kicked_ - m.offset),
                              static_cast<off_t>(pos_ + n - kicked_), SYNC_FILE_RANGE_WRITE);
        kicked_ = pos_ + n;
      }
    } else {
      if (pos_ < meta_end_) meta_.append(run.substr(0, std::min<uint64_t>(n, meta_end_ - pos_)));
      RETURN_IF_ERROR(Put(tar_fd_, tar_path_, run, pos_));
    }
    pos_ += n;
    bytes.remove_prefix(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LayerSegments::File>> TarSplitWriter::Finish() {
  if (ftruncate(tar_fd_, static_cast<off_t>(pos_)) != 0) {
    return absl::InternalError(absl::StrCat(tar_path_, ": ftruncate: ", strerror(errno)));
  }
  return std::move(members_);
}

// header_ holds the block at pos_ - 512: where the next entry's data goes.
void TarSplitWriter::NextHeader() {
  const uint64_t data_offset = pos_;
  absl::StatusOr<TarHeaderBlock> h = ParseTarHeaderBlock(header_);
  header_.clear();
  if (!h.ok() || h->end) {
    following_ = false;  // not a tar, or its end: the rest (zero blocks) is the data file's
    return;
  }
  if (!meta_.empty() || meta_end_ > 0) {
    // The pax header before this one has all its records by now.
    absl::Status records =
        ParsePaxRecords(meta_, [&](std::string_view key, std::string_view value) -> absl::Status {
          if (key != "size") return absl::OkStatus();
          ASSIGN_OR_RETURN(pax_size_, ParsePaxSize(value));
          return absl::OkStatus();
        });
    meta_.clear();
    meta_end_ = 0;
    if (!records.ok()) {
      following_ = false;
      return;
    }
  }
  uint64_t size = h->size;
  switch (h->typeflag) {
    case 'x':
      if (size > (1u << 20)) {
        following_ = false;
        return;
      }
      meta_end_ = data_offset + size;
      break;
    case 'g':
    case 'L':
    case 'K':
      break;
    case 'S':
    case 'M':
    case 'D':
      following_ = false;  // GNU sparse and multi-volume entries: not followed
      return;
    default:
      if (pax_size_) size = *pax_size_;
      pax_size_.reset();
      if (h->typeflag >= '1' && h->typeflag <= '6') size = 0;  // header only
      if ((h->typeflag == '0' || h->typeflag == '\0' || h->typeflag == '7') && size > 0 &&
          size >= member_min_bytes_) {
        OpenMember(data_offset, size);
      }
      break;
  }
  if (size > std::numeric_limits<uint64_t>::max() - data_offset - kTarBlockSize) {
    following_ = false;
    return;
  }
  next_header_ = data_offset + size + TarPadding(size);
}

void TarSplitWriter::OpenMember(uint64_t offset, uint64_t length) {
  if (!dir_made_) {
    if (mkdir(members_dir_.c_str(), 0700) != 0 && errno != EEXIST) {
      following_ = false;  // kept whole in the data file
      return;
    }
    dir_made_ = true;
  }
  const std::string path = absl::StrCat(members_dir_, "/", offset);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    following_ = false;
    return;
  }
  members_.push_back(LayerSegments::File{offset, length, fd});
  kicked_ = offset;
}

std::string TarSplitWriter::MemberPath(const LayerSegments::File& m) const {
  return absl::StrCat(members_dir_, "/", m.offset);
}

absl::Status TarSplitWriter::Put(int fd, const std::string& path, std::string_view bytes,
                                 uint64_t offset) {
  const int err = store_.Write(fd, bytes.data(), bytes.size(), offset);
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(no_space_);
  if (err != 0) {
    return absl::InternalError(
        absl::StrCat(path, ": write at offset ", offset, ": ", strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace modelfs
