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
      no_space_(std::move(no_space)),
      follower_(TarFollower::Options{tar_path_}) {}

TarSplitWriter::~TarSplitWriter() {
  for (const LayerSegments::File& m : members_) close(m.fd);
}

absl::Status TarSplitWriter::Write(std::string_view bytes) {
  // The headers in these bytes first: every member whose data they hold is open afterwards (its
  // header came before it). A member that cannot be opened stops the follower (stopped()).
  (void)follower_.Feed(bytes, *this);
  while (!bytes.empty()) {
    while (current_ < members_.size() &&
           pos_ >= members_[current_].offset + members_[current_].length) {
      ++current_;
    }
    const LayerSegments::File* m = current_ < members_.size() ? &members_[current_] : nullptr;
    if (m != nullptr && pos_ >= m->offset) {
      const uint64_t end = m->offset + m->length;
      const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size(), end - pos_));
      RETURN_IF_ERROR(Put(m->fd, MemberPath(*m), bytes.substr(0, n), pos_ - m->offset));
      kicked_ = std::max(kicked_, m->offset);
      if (pos_ + n - kicked_ >= kWritebackBytes || pos_ + n == end) {
        // Start writing it back now; the flush before the seal then waits for little.
        (void)sync_file_range(m->fd, static_cast<off_t>(kicked_ - m->offset),
                              static_cast<off_t>(pos_ + n - kicked_), SYNC_FILE_RANGE_WRITE);
        kicked_ = pos_ + n;
      }
      pos_ += n;
      bytes.remove_prefix(n);
      continue;
    }
    // Up to the next member, or all of it: the data file's.
    const uint64_t end = m != nullptr ? m->offset : std::numeric_limits<uint64_t>::max();
    const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size(), end - pos_));
    RETURN_IF_ERROR(Put(tar_fd_, tar_path_, bytes.substr(0, n), pos_));
    pos_ += n;
    bytes.remove_prefix(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LayerSegments::File>> TarSplitWriter::Finish() {
  (void)follower_.Finish();
  if (ftruncate(tar_fd_, static_cast<off_t>(pos_)) != 0) {
    return absl::InternalError(absl::StrCat(tar_path_, ": ftruncate: ", strerror(errno)));
  }
  return std::move(members_);
}

std::string TarSplitWriter::stopped() const { return std::string(follower_.status().message()); }

// A regular file of member_min_bytes and up gets a member file of its own.
absl::Status TarSplitWriter::OnEntry(const TarEntry& entry) {
  if (entry.type != TarEntryType::kFile || entry.size == 0 || entry.size < member_min_bytes_) {
    return absl::OkStatus();
  }
  if (!dir_made_) {
    if (mkdir(members_dir_.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat(members_dir_, ": mkdir: ", strerror(errno)));
    }
    dir_made_ = true;
  }
  const std::string path = absl::StrCat(members_dir_, "/", entry.data_offset);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat(path, ": ", strerror(errno)));
  members_.push_back(LayerSegments::File{entry.data_offset, entry.size, fd});
  return absl::OkStatus();
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
