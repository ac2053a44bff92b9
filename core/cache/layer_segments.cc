#include "core/cache/layer_segments.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs {

LayerSegments::LayerSegments(int layer_fd) : layer_fd_(layer_fd), owns_fds_(false) {}

LayerSegments::LayerSegments(int layer_fd, std::vector<File> members)
    : layer_fd_(layer_fd), owns_fds_(true), members_(std::move(members)) {}

LayerSegments::~LayerSegments() {
  absl::MutexLock lock(&punch_mu_);
  for (const auto& [from, to] : punch_) {
    // A failure only leaves the bytes allocated until the layer is evicted.
    (void)fallocate(punch_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(from),
                    static_cast<off_t>(to - from));
  }
  if (punch_fd_ >= 0) close(punch_fd_);
  if (!owns_fds_) return;
  if (layer_fd_ >= 0) close(layer_fd_);
  for (const File& m : members_) {
    if (m.fd >= 0) close(m.fd);
  }
}

std::vector<LayerMember> LayerSegments::layout() const {
  std::vector<LayerMember> out;
  out.reserve(members_.size());
  for (const File& m : members_) out.push_back(LayerMember{m.offset, m.length});
  return out;
}

std::vector<LayerSegments::Piece> LayerSegments::Pieces(uint64_t from, uint64_t to) const {
  std::vector<Piece> out;
  if (from >= to) return out;
  if (members_.empty()) {
    out.push_back(Piece{layer_fd_, from, to - from});
    return out;
  }
  // The first member that ends after `from`.
  auto it = std::upper_bound(members_.begin(), members_.end(), from,
                             [](uint64_t off, const File& m) { return off < m.offset + m.length; });
  uint64_t at = from;
  while (at < to) {
    if (it == members_.end() || to <= it->offset) {
      out.push_back(Piece{layer_fd_, at, to - at});
      break;
    }
    if (at < it->offset) {
      out.push_back(Piece{layer_fd_, at, it->offset - at});
      at = it->offset;
    }
    const uint64_t end = std::min(to, it->offset + it->length);
    out.push_back(Piece{it->fd, at - it->offset, end - at});
    at = end;
    ++it;
  }
  return out;
}

const LayerSegments::File* LayerSegments::FindMember(uint64_t offset, uint64_t length) const {
  auto it = std::lower_bound(members_.begin(), members_.end(), offset,
                             [](const File& m, uint64_t off) { return m.offset < off; });
  if (it == members_.end() || it->offset != offset || it->length != length) return nullptr;
  return &*it;
}

int LayerSegments::Write(const LayerStore& store, const char* data, uint64_t n,
                         uint64_t offset) const {
  for (const Piece& p : Pieces(offset, offset + n)) {
    if (int err = store.Write(p.fd, data, p.length, p.file_offset); err != 0) return err;
    data += p.length;
  }
  return 0;
}

absl::Status LayerSegments::ReadFull(const LayerStore& store, const Digest& digest, char* buf,
                                     uint64_t n, uint64_t offset) const {
  uint64_t at = offset;
  for (const Piece& p : Pieces(offset, offset + n)) {
    absl::Status s = store.ReadFull(p.fd, digest, buf, p.length, p.file_offset);
    if (!s.ok()) {
      if (p.fd == layer_fd_) return s;
      return absl::Status(s.code(), absl::StrCat("member file of layer ", digest.str(),
                                                 " at layer offset ", at, ": ", s.message()));
    }
    buf += p.length;
    at += p.length;
  }
  return absl::OkStatus();
}

absl::Status LayerSegments::Sync(const LayerStore& store, const Digest& digest) const {
  absl::Status s = store.Sync(layer_fd_, digest);
  for (const File& m : members_) {
    if (!s.ok()) break;
    if (fdatasync(m.fd) != 0) {
      s = absl::InternalError(absl::StrCat("cache: fdatasync of the member file at offset ",
                                           m.offset, " of layer ", digest.str(), " failed"));
    }
  }
  return s;
}

absl::Status LayerSegments::SyncRanges(
    const LayerStore& store, const Digest& digest,
    const std::vector<std::pair<uint64_t, uint64_t>>& ranges) const {
  if (members_.empty()) return store.Sync(layer_fd_, digest);
  std::vector<int> fds;
  for (const auto& [from, to] : ranges) {
    for (const Piece& p : Pieces(from, to)) fds.push_back(p.fd);
  }
  std::sort(fds.begin(), fds.end());
  fds.erase(std::unique(fds.begin(), fds.end()), fds.end());
  for (int fd : fds) {
    if (fd == layer_fd_) {
      RETURN_IF_ERROR(store.Sync(fd, digest));
    } else if (fdatasync(fd) != 0) {
      return absl::InternalError(
          absl::StrCat("cache: fdatasync of a member file of layer ", digest.str(), " failed"));
    }
  }
  return absl::OkStatus();
}

void LayerSegments::Advise(uint64_t from, uint64_t to, int advice) const {
  for (const Piece& p : Pieces(from, to)) {
    posix_fadvise(p.fd, static_cast<off_t>(p.file_offset), static_cast<off_t>(p.length), advice);
  }
}

std::string LayerSegments::Seal() const {
  std::string seal = LayerStore::SealOf(layer_fd_);
  if (seal.empty()) return seal;
  for (const File& m : members_) {
    const std::string s = LayerStore::SealOf(m.fd);
    if (s.empty()) return std::string();
    absl::StrAppend(&seal, ";", m.offset, "=", s);
  }
  return seal;
}

std::shared_ptr<LayerSegments> LayerSegments::Rebind(int layer_fd) const {
  if (layer_fd < 0) return nullptr;
  std::vector<File> files;
  files.reserve(members_.size());
  for (const File& m : members_) {
    // Read-only, as the layer file: fs-verity needs files that no one holds open for writing.
    const int fd = open(absl::StrCat("/proc/self/fd/", m.fd).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      for (const File& f : files) close(f.fd);
      close(layer_fd);
      return nullptr;
    }
    files.push_back(File{m.offset, m.length, fd});
  }
  return std::make_shared<LayerSegments>(layer_fd, std::move(files));
}

void LayerSegments::PunchOnRelease(int writable_fd,
                                   std::vector<std::pair<uint64_t, uint64_t>> ranges) const {
  absl::MutexLock lock(&punch_mu_);
  if (punch_fd_ >= 0) close(punch_fd_);
  punch_fd_ = writable_fd;
  punch_ = std::move(ranges);
}

}  // namespace modelfs
