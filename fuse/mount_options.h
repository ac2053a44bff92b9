// FuseMountOptions: how FuseMount mounts and serves a tree (fuse_adapter.h), apart from it so
// that the libfuse glue (fuse_ops.h) can build sessions from them without including FuseMount.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "core/base/clock.h"

namespace modelfs {

struct FuseMountOptions {
  bool allow_other = true;  // other users (pods) may read; needs root or fuse.conf
  // Bytes per FUSE read request: 252 pages, so that a reply with its header fits the largest
  // pipe an unprivileged process may make (fs.pipe-max-size, 1 MiB) and libfuse splices it
  // from the cache file instead of copying it through a buffer.
  uint32_t max_read = 252 * 4096;
  std::string fsname = "modelfs";   // first field of /proc/mounts
  std::string subtype = "modelfs";  // type shows as fuse.<subtype>
  double entry_timeout_s = 60;      // kernel caching of names; the content never changes
  double attr_timeout_s = 60;
  unsigned max_threads = 32;  // upper bound of the session loop's worker threads
  unsigned max_idle_threads = 8;
  bool debug = false;  // libfuse request tracing on stderr
  // The kernel side of the connection, negotiated at FUSE_INIT (Mount answers it itself):
  // requests the kernel keeps in flight at once (its default of 12 lets a dozen reads stalled
  // on the network hold up reads of cached bytes), and the readahead of the mount's bdi.
  uint16_t max_background = 256;
  // Threads that serve reads waiting on the network, apart from the session's own workers
  // (max_threads), which then stay free for everything else.
  unsigned max_background_reads = 256;
  uint32_t read_ahead_kb = 8192;
  // Serve files whose layer the cache verified and sealed by FUSE passthrough (Linux 6.9+,
  // CAP_SYS_ADMIN): the kernel reads the cache file itself. Off, or unavailable: the daemon
  // answers every read (zero-copy from the cache file where it can).
  bool passthrough = true;
  // Open files that passthrough does not serve with direct_io, so that read() copies the
  // cache file's bytes straight into the reader's buffer and the node keeps one copy of the
  // weights (the cache file's), not a second in the FUSE file's page cache. Only where the
  // kernel allows shared mmap of direct_io files (Linux 6.6+); mmap then still goes through
  // the page cache. Off: cached opens.
  bool direct_io_reads = true;
  // Where the table of open files and passthrough backing ids is kept for a process that will
  // Adopt this connection (fuse/passthrough.h); "" keeps none, and then an adopter serves
  // without passthrough. The daemon puts it next to its state.
  std::string open_files_state;
  // Called after every read request with its duration and outcome (the daemon's latency
  // histogram). Must be thread-safe and fast.
  std::function<void(absl::Duration latency, bool ok)> on_read;
  // Called after every open the kernel took, with whether it is served by passthrough (the
  // passthrough_opens counters of `modelfs stats` and the daemon). Thread-safe and fast.
  std::function<void(bool passthrough)> on_open;
  // The clock on_read's durations are measured on; null: Clock::Real(). Must outlive the
  // mount. Tests pass a FakeClock.
  Clock* clock = nullptr;
};

}  // namespace modelfs
