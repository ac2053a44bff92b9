// Local-file and in-memory RangeReaders.
#include "core/io/range_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace modelfs {
namespace {

absl::Status OutOfRange(const std::string& name, uint64_t offset, uint64_t length, uint64_t size) {
  return absl::OutOfRangeError(absl::StrCat(name, ": truncated: wants ", length, " bytes at byte ",
                                            offset, " but the source has ", size));
}

class FileRangeReader final : public RangeReader {
 public:
  FileRangeReader(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~FileRangeReader() override { close(fd_); }

  const std::string& name() const override { return path_; }
  absl::StatusOr<uint64_t> Size() override { return size_; }
  RangeReadStats stats() const override { return stats_; }

  absl::StatusOr<std::string> ReadAt(uint64_t offset, uint64_t length) override {
    if (offset > size_ || length > size_ - offset) return OutOfRange(path_, offset, length, size_);
    std::string out(length, '\0');
    uint64_t done = 0;
    ++stats_.requests;
    while (done < length) {
      ssize_t n = pread(fd_, out.data() + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return absl::InternalError(
            absl::StrCat(path_, ": read at byte ", offset + done, ": ", strerror(errno)));
      }
      if (n == 0) return OutOfRange(path_, offset, length, offset + done);
      done += static_cast<uint64_t>(n);
    }
    stats_.bytes += length;
    return out;
  }

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
  RangeReadStats stats_;
};

// Bytes is std::string (owned) or std::string_view (borrowed).
template <typename Bytes>
class MemoryRangeReader final : public RangeReader {
 public:
  MemoryRangeReader(std::string name, Bytes bytes)
      : name_(std::move(name)), bytes_(std::move(bytes)) {}
  const std::string& name() const override { return name_; }
  absl::StatusOr<uint64_t> Size() override { return bytes_.size(); }
  RangeReadStats stats() const override { return stats_; }
  absl::StatusOr<std::string> ReadAt(uint64_t offset, uint64_t length) override {
    if (offset > bytes_.size() || length > bytes_.size() - offset) {
      return OutOfRange(name_, offset, length, bytes_.size());
    }
    ++stats_.requests;
    stats_.bytes += length;
    return std::string(bytes_.substr(offset, length));
  }

 private:
  std::string name_;
  Bytes bytes_;
  RangeReadStats stats_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RangeReader>> OpenFileRangeReader(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::string msg = absl::StrCat(path, ": ", strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::InvalidArgumentError(msg);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  return std::unique_ptr<RangeReader>(
      new FileRangeReader(path, fd, static_cast<uint64_t>(st.st_size)));
}

std::unique_ptr<RangeReader> MakeMemoryRangeReader(std::string name, std::string bytes) {
  return std::make_unique<MemoryRangeReader<std::string>>(std::move(name), std::move(bytes));
}

std::unique_ptr<RangeReader> MakeMemoryRangeReaderView(std::string name, std::string_view bytes) {
  return std::make_unique<MemoryRangeReader<std::string_view>>(std::move(name), bytes);
}

bool IsHttpUrl(const std::string& s) {
  return absl::StartsWithIgnoreCase(s, "http://") || absl::StartsWithIgnoreCase(s, "https://");
}

absl::StatusOr<std::unique_ptr<RangeReader>> OpenRangeReader(const std::string& path_or_url,
                                                             const HttpReaderOptions& options) {
  if (IsHttpUrl(path_or_url)) return OpenHttpRangeReader(path_or_url, options);
  return OpenFileRangeReader(path_or_url);
}

}  // namespace modelfs
