// FuseMount's internals shared by its source files: the per-connection Context that libfuse's
// callbacks reach through fuse_req_userdata, and the session they are registered on.
//   fuse_ops.cc          the libfuse low-level callbacks (lookup, getattr, open with its
//                        passthrough decision, read, readdir, release, ...) and the session
//   fuse_adapter.cc      FuseMount's life: Mount, the session loop, Unmount
//   restart_protocol.cc  serving a connection across a restart: Adopt, Detach
//   kernel_protocol.cc   the kernel protocol spoken without libfuse: FUSE_INIT (real and
//                        synthetic), the passthrough open reply and ioctls, the resend
// Includes flow one way: fuse_adapter.cc and restart_protocol.cc include this header, which
// knows FuseMountOptions (mount_options.h) but not FuseMount. Not for use outside fuse/.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "fuse/model_tree.h"
#include "fuse/mount_options.h"
#include "fuse/passthrough.h"
#include "fuse/read_pool.h"

struct fuse_session;

namespace modelfs {
namespace fuse_internal {

// A snapshot of a directory listing taken at opendir, so that paging through it with offsets
// is stable even if models are added or removed meanwhile.
struct DirHandle {
  std::vector<DirEntry> entries;
};

// Per connection: what FuseMount sets up and the callbacks use.
struct Context {
  std::shared_ptr<ModelTree> tree;
  double entry_timeout = 0;
  double attr_timeout = 0;
  uint32_t max_read = 0;
  std::function<void(absl::Duration, bool)> on_read;
  std::function<void(bool)> on_open;     // FuseMountOptions::on_open
  Clock* clock = nullptr;                // times on_read; never null once the mount is built
  std::atomic<bool> initialized{false};  // libfuse called init (FUSE_INIT, real or synthetic)
  // Open files and their I/O mode; set before the loop serves.
  std::unique_ptr<OpenFiles> files;
  // Opens not served by passthrough are direct_io (FuseMountOptions::direct_io_reads, and the
  // kernel allows shared mmap of such files); set before the loop serves.
  bool direct_io = false;
  fuse_session* session = nullptr;  // for notifications from request handlers
  std::unique_ptr<ReadPool> reads;  // reads that wait on the network

  // Open directories by the handle the kernel holds. Handles are ids, not pointers, because the
  // kernel keeps a directory open across a daemon restart and then hands the new process a
  // handle the old one made: an id can be looked up and found missing, a stale pointer cannot.
  // Ids start at a random number so that the old process's ids are (almost surely) not ours.
  absl::Mutex dirs_mu;
  absl::flat_hash_map<uint64_t, std::shared_ptr<const DirHandle>> dirs ABSL_GUARDED_BY(dirs_mu);
  uint64_t next_dir_id ABSL_GUARDED_BY(dirs_mu) = std::random_device{}() * 0x100000000ull;
};

// Logs a failure an operator must see on stderr, naming the operation.
void LogError(const char* op, const char* message);

// The mount options libfuse is given, as a -o string.
std::string MountOptionString(const FuseMountOptions& o);

// Mount and Adopt must build identical sessions: the adopted connection was negotiated with
// these options (max_read above all, which libfuse checks again at INIT).
fuse_session* NewSession(const FuseMountOptions& options, Context* ctx);

}  // namespace fuse_internal
}  // namespace modelfs
