// FuseMount: serves a ModelTree at a directory through the libfuse3 low-level API, on a
// multithreaded session loop running on background threads. This file is protocol glue only:
// every filesystem decision is ModelTree's, and Status becomes errno in one place
// (StatusToErrno). The mount is read-only: options ro,nosuid,nodev,default_permissions,
// allow_other (configurable), max_read=252 pages, fsname=modelfs, subtype=modelfs. Files of a
// verified layer open in passthrough; the rest with keep_cache and, where the kernel still
// allows shared mmap then, direct_io (FuseMountOptions::direct_io_reads).
//
// allow_other needs root or `user_allow_other` in /etc/fuse.conf.
//
// Surviving a restart of the serving process (systemd's file descriptor store): the kernel
// keeps a FUSE connection, its mount and every inode and open file on it alive for as long as
// some process holds the /dev/fuse file open. So a daemon hands fuse_fd() to a keeper (systemd
// with FDSTORE=1, or a parent process); when it dies or Detach()es, requests simply queue in
// the kernel, and its successor calls Adopt() with the kept fd to serve the same connection
// again: same mount, same inode numbers (ModelTree's are hashed from paths), no remount.
//
// Thread safety: all methods may be called from any thread. Unmount and Detach are idempotent
// and may race with Wait() and with each other (the first one decides); the destructor
// unmounts unless detached. Lock order: FuseMount::mu_ before ModelTree::mu_ (the tree never
// calls back into FuseMount).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "fuse/model_tree.h"
#include "fuse/mount_options.h"

struct fuse_session;

namespace modelfs {
namespace fuse_internal {
struct Context;  // what libfuse callbacks reach through fuse_req_userdata (fuse_ops.h)
}  // namespace fuse_internal

class FuseMount {
 public:
  // Mounts `tree` at `dir` (an existing directory) and starts serving it before returning.
  // Errors: kInvalidArgument (options libfuse rejects), kNotFound (no such dir),
  // kUnavailable (mount failed: no /dev/fuse, not permitted, ...), messages name `dir`.
  static absl::StatusOr<std::unique_ptr<FuseMount>> Mount(const std::string& dir,
                                                          std::shared_ptr<ModelTree> tree,
                                                          const FuseMountOptions& options = {});

  // Serves `tree` on an existing, initialized FUSE connection mounted at `dir`: `fuse_fd` is a
  // /dev/fuse fd inherited from a previous process of this program (which mounted with the
  // same `options` and served a tree with the same paths). Mounts nothing. The kernel will not
  // send FUSE_INIT again, so a synthetic one primes libfuse; then, where the kernel supports it
  // (Linux >= 6.9), requests the previous process had taken but not answered are queued again
  // (FUSE_NOTIFY_RESEND), so that a crash loses none. Does not take `fuse_fd`: it serves a
  // duplicate, and the caller may close or keep its own. No other process may be serving the
  // connection. Errors: kInvalidArgument (not an open /dev/fuse fd, options libfuse rejects),
  // kNotFound (no such dir), kUnavailable (the connection is gone or does not answer at dir),
  // kInternal (libfuse refused the synthetic INIT; it says why on stderr).
  static absl::StatusOr<std::unique_ptr<FuseMount>> Adopt(int fuse_fd, const std::string& dir,
                                                          std::shared_ptr<ModelTree> tree,
                                                          const FuseMountOptions& options = {});

  ~FuseMount();
  FuseMount(const FuseMount&) = delete;
  FuseMount& operator=(const FuseMount&) = delete;

  // Stops serving and unmounts: umount(2), falling back to a lazy (MNT_DETACH) unmount when the
  // mount is busy, in which case the connection is also aborted through fusectl when
  // /sys/fs/fuse/connections is mounted (otherwise the loop ends when the last user lets go).
  // Joins the loop threads. OK if already unmounted (also by someone else, e.g. fusermount3 -u).
  absl::Status Unmount();

  // Blocks until the session loop ends (Unmount, or an external `fusermount3 -u` / umount).
  // Returns the loop's error, if any. For `modelfs mount`, which runs until unmounted.
  absl::Status Wait();

  // Stops serving, joins the loop threads and closes this process's /dev/fuse fd, but leaves
  // the mount in place and does not abort the connection, for a process about to be replaced
  // by one that will Adopt(). The connection survives only if another process still holds the
  // device open (a dup of fuse_fd() in the fd store); if none does, closing ours aborts it, as
  // a crash would. A request a worker thread took from the kernel as it stopped stays unanswered
  // until the adopter asks the kernel to resend it (see Adopt). Afterwards Unmount and the
  // destructor do nothing. OK if already unmounted or detached. The first call installs a no-op
  // handler for signal SIGRTMAX-1, with which it interrupts the loop thread's wait;
  // kFailedPrecondition if the program handles that signal itself.
  absl::Status Detach();

  // The session's /dev/fuse fd, to hand to the fd store (which keeps its own duplicate); -1
  // after Unmount or Detach. Owned by this object: do not close it.
  int fuse_fd() const;

  // Whether files may be served by passthrough on this connection (negotiated, and nothing
  // has failed since).
  bool passthrough() const;
  // Whether opens not served by passthrough are direct_io (negotiated on this connection;
  // false on an adopted one, whose negotiation this process did not see).
  bool direct_io_reads() const;
  // Open file handles served by passthrough / by this process, for stats and tests.
  size_t passthrough_opens() const;
  size_t cached_opens() const;

  // Removes a model from a multi-model tree and tells the kernel to drop its cached directory
  // entry, so the name disappears at once instead of after entry_timeout_s. Errors as
  // ModelTree::RemoveModel.
  absl::Status RemoveModel(const std::string& model_name);

  const std::string& mountpoint() const { return dir_; }
  ModelTree& tree() const { return *tree_; }

 private:
  FuseMount(std::string dir, std::shared_ptr<ModelTree> tree, const FuseMountOptions& options);
  // Mount and Adopt after they have a session: start the loop, prove the mount answers.
  absl::Status StartServing(fuse_session* se);
  // Makes Unmount, Detach and the destructor no-ops, for a mount that failed before serving.
  void MarkStopped();
  void RunLoop(fuse_session* se);
  void AbortConnection();

  const std::string dir_;
  const std::shared_ptr<ModelTree> tree_;
  const FuseMountOptions options_;
  std::unique_ptr<fuse_internal::Context> ctx_;
  unsigned fuse_conn_id_ = 0;  // minor device number of the mount: /sys/fs/fuse/connections/<id>
  absl::Notification loop_done_;

  mutable absl::Mutex mu_;
  fuse_session* session_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread loop_ ABSL_GUARDED_BY(mu_);
  bool unmounted_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status loop_status_;  // written by the loop thread before loop_done_ is notified
};

}  // namespace modelfs
