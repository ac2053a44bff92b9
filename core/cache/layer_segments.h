// LayerSegments: where a cached layer's bytes live. A layer is a concatenation of segments:
// most of it in the layer's sparse data file (<hex>.data, byte for byte at the layer offset),
// and the data of its larger tar members each in a file of its own
// (<hex>.members/<layer offset>, offset 0 of the file = the member's first byte), so that a
// verified member can be a FUSE passthrough backing file, which the kernel maps at offset 0.
// Every byte of the layer is in exactly one file: one copy on disk (docs/cache-format.md).
//
// A LayerSegments is immutable once shared; a layer whose layout changes
// (BlobCache::SetLayerMembers) gets a new one, and readers holding the old one keep reading
// it. The old one is where the member bytes were before they moved, so it frees that space
// (hole-punches the layer file) only when its last holder lets go (PunchOnRelease).
//
// Thread safety: const methods are safe to call concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/cache/layer_store.h"
#include "core/oci/digest.h"

namespace modelfs {

// A byte range of a layer kept in a file of its own.
struct LayerMember {
  uint64_t offset = 0;
  uint64_t length = 0;
  bool operator==(const LayerMember& o) const { return offset == o.offset && length == o.length; }
};

class LayerSegments {
 public:
  // A member file: the layer's bytes [offset, offset + length) at offset 0 of `fd`.
  struct File {
    uint64_t offset = 0;
    uint64_t length = 0;
    int fd = -1;
  };
  // A run of layer bytes in one file: `length` bytes at `file_offset` of `fd`.
  struct Piece {
    int fd = -1;
    uint64_t file_offset = 0;
    uint64_t length = 0;
  };

  // The whole layer in `layer_fd` (not owned: the layer's own fd, which outlives this).
  explicit LayerSegments(int layer_fd);
  // The layer in `layer_fd` and `members` (sorted by offset, disjoint). Owns every fd.
  LayerSegments(int layer_fd, std::vector<File> members);
  ~LayerSegments();
  LayerSegments(const LayerSegments&) = delete;
  LayerSegments& operator=(const LayerSegments&) = delete;

  bool has_members() const { return !members_.empty(); }
  const std::vector<File>& members() const { return members_; }
  std::vector<LayerMember> layout() const;
  int layer_fd() const { return layer_fd_; }

  // The pieces that hold layer bytes [from, to), in order.
  std::vector<Piece> Pieces(uint64_t from, uint64_t to) const;
  // The member file holding exactly [offset, offset + length), or null.
  const File* FindMember(uint64_t offset, uint64_t length) const;

  // Writes layer bytes [offset, offset + n) to their files; 0 or an errno.
  int Write(const LayerStore& store, const char* data, uint64_t n, uint64_t offset) const;
  // Reads exactly layer bytes [offset, offset + n). Errors as LayerStore::ReadFull.
  absl::Status ReadFull(const LayerStore& store, const Digest& digest, char* buf, uint64_t n,
                        uint64_t offset) const;
  // Flushes every file. Errors: kInternal naming the first file that failed.
  absl::Status Sync(const LayerStore& store, const Digest& digest) const;
  // Flushes the files that hold layer bytes `ranges` ([from, to) pairs), each once. Errors as
  // Sync.
  absl::Status SyncRanges(const LayerStore& store, const Digest& digest,
                          const std::vector<std::pair<uint64_t, uint64_t>>& ranges) const;
  // posix_fadvise(advice) on the pages of layer bytes [from, to), file by file.
  void Advise(uint64_t from, uint64_t to, int advice) const;
  // The seal of all the files (LayerStore::SealOf of the layer file, then
  // ";<offset>=<seal>" per member); "" when a file cannot be stat'ed. Without members it is
  // the layer file's seal, as before members existed.
  std::string Seal() const;

  // The same layout over another open layer file (a read-only one; owned by the result), each
  // member file opened again read-only. Null when one cannot be (then `layer_fd` is closed).
  std::shared_ptr<LayerSegments> Rebind(int layer_fd) const;

  // Ranges of the layer file whose bytes moved out to member files: punched (freed) through
  // `writable_fd` (owned; the layer file opened for writing) when this object is destroyed,
  // when no reader can read them through it any more.
  void PunchOnRelease(int writable_fd, std::vector<std::pair<uint64_t, uint64_t>> ranges) const;

 private:
  const int layer_fd_;
  const bool owns_fds_;
  const std::vector<File> members_;
  mutable absl::Mutex punch_mu_;
  mutable int punch_fd_ ABSL_GUARDED_BY(punch_mu_) = -1;
  mutable std::vector<std::pair<uint64_t, uint64_t>> punch_ ABSL_GUARDED_BY(punch_mu_);
};

}  // namespace modelfs
