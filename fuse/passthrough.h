// FUSE passthrough (kernel protocol 7.40, Linux 6.9): the kernel serves reads and mmap of an
// open FUSE file straight from a "backing" file the server registered, with no request to the
// server and one copy of the bytes in the page cache (the backing file's). libfuse 3.14 knows
// nothing of it; the protocol pieces (the INIT flag, the open reply's backing id, the /dev/fuse
// ioctls that register and drop backing files) are in kernel_protocol.h.
//
// modelfs serves a file this way only when its bytes are a whole layer that the cache has
// verified and sealed (BlobReader::OpenVerifiedBlob), so nothing unverified can reach a reader.
//
// The kernel puts each inode in one I/O mode at a time: while any open of it is cached (page
// cache of the FUSE inode, reads answered by the server), a passthrough open fails (ETXTBSY),
// and the other way round; two passthrough opens must also share one backing file (EBUSY).
// The kernel answers those errors to the process calling open(2), not to the server, so the
// server must never get them wrong. OpenFiles keeps the table that lets it: every open file
// handle with its inode and mode, and the backing ids in use. A daemon that may be replaced
// while the kernel keeps its connection (FuseMount::Adopt) writes that table to a state file on
// every change, so that its successor goes on with the same modes and backing ids.
//
// Thread safety: OpenFiles is safe for concurrent use (one mutex, a leaf).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace modelfs {

class OpenFiles {
 public:
  // How a file was opened: the server answers reads (kCached) or the kernel does (kPassthrough).
  enum class Mode : uint8_t { kCached, kPassthrough };

  // `state_path`: the file this table is kept in for a successor process ("" keeps none).
  // `passthrough`: whether the connection negotiated passthrough.
  OpenFiles(int dev_fd, std::string state_path, bool passthrough);
  ~OpenFiles();
  OpenFiles(const OpenFiles&) = delete;
  OpenFiles& operator=(const OpenFiles&) = delete;

  // Writes the empty table (and whether passthrough was negotiated) for a successor: for a
  // connection this process mounted. Call before serving.
  void StartFresh();
  // Takes over the table a predecessor serving the same connection wrote to state_path (its
  // open handles, backing ids and whether passthrough was negotiated). A missing or unreadable
  // file leaves the table empty and passthrough off, which is always safe. Call before serving.
  void Inherit();

  bool passthrough() const;

  // Decides how inode `ino` is opened and records the new handle. `file_fd`/`key` describe a
  // verified backing file (fd -1: none; the caller keeps and closes the fd); `key` names the
  // file, so that every passthrough open of an inode uses one backing id. Returns the handle
  // to put in the reply and, for kPassthrough, its backing id.
  struct Decision {
    uint64_t fh = 0;
    Mode mode = Mode::kCached;
    int32_t backing_id = 0;
  };
  Decision Open(uint64_t ino, int file_fd, const std::string& key);
  // Forgets a handle (FUSE_RELEASE, or an open reply the kernel did not take). Unknown handles
  // are ignored, so a release resent after a restart is harmless. Drops the backing id with
  // its last handle.
  void Release(uint64_t fh);

  // For tests and stats: open handles in each mode.
  size_t open_count(Mode mode) const;

 private:
  struct Handle {
    uint64_t ino = 0;
    Mode mode = Mode::kCached;
    std::string key;  // kPassthrough: the backing file's key
  };
  struct Backing {
    int32_t id = 0;
    uint64_t handles = 0;
  };
  struct InodeState {
    uint64_t cached = 0;
    uint64_t passthrough = 0;
    std::string key;  // the backing file of its passthrough handles
  };
  void AddLocked(uint64_t fh, Handle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int dev_fd_;
  const std::string state_path_;
  mutable absl::Mutex mu_;
  bool passthrough_ ABSL_GUARDED_BY(mu_);
  bool warned_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_fh_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Handle> handles_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, InodeState> inodes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Backing> backing_ ABSL_GUARDED_BY(mu_);
};

}  // namespace modelfs
