// ModelMounter: what the model host asks of the kernel's mount table, behind an interface so
// that the host and the snapshotter's state machine can be tested without root. The daemon
// serves every model it has registered in one FUSE mount of <root>/mnt (a ModelMount); a
// model's snapshot mounts are plain bind and overlay mounts that containerd makes from what the
// snapshotter returns, so the snapshotter itself mounts nothing else. `modelfs mount` serves
// its one model in a mount of its own (ModelHost::MountModel). The real implementation
// (NewFuseModelMounter) is fuse/fuse_adapter.h's FuseMount; tests use a fake that records calls.
//
// Thread safety: implementations are safe for concurrent calls.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fuse/fuse_adapter.h"
#include "fuse/model_tree.h"

namespace modelfs {

// One served FUSE mount of a tree of models (FuseMount's operations the host uses).
class ModelMount {
 public:
  virtual ~ModelMount() = default;
  // Takes a model out of the served tree and out of the kernel's cached directory entries.
  // Errors as ModelTree::RemoveModel (kNotFound when the tree does not hold it).
  virtual absl::Status RemoveModel(const std::string& model_name) = 0;
  // Stops serving and unmounts (lazily when busy). Idempotent.
  virtual absl::Status Unmount() = 0;
  // Stops serving and leaves the mount and its connection for a process that adopts it.
  virtual absl::Status Detach() = 0;
  // Blocks until serving stops (Unmount, Detach, or an external umount). Errors as
  // FuseMount::Wait.
  virtual absl::Status Wait() = 0;
  // The /dev/fuse fd to hand to a file descriptor store; -1 after Unmount or Detach.
  virtual int fuse_fd() const = 0;
};

class ModelMounter {
 public:
  virtual ~ModelMounter() = default;
  // Clears a dead FUSE mount that a crashed daemon left at `dir` (fuse/stale_mount.h).
  virtual absl::Status DetachStaleMount(const std::string& dir) = 0;
  // Mounts `tree` at `dir` and serves it. Errors as FuseMount::Mount.
  virtual absl::StatusOr<std::unique_ptr<ModelMount>> Mount(const std::string& dir,
                                                            std::shared_ptr<ModelTree> tree,
                                                            const FuseMountOptions& options) = 0;
  // Serves `tree` on the inherited connection `fuse_fd` mounted at `dir`. Errors as
  // FuseMount::Adopt.
  virtual absl::StatusOr<std::unique_ptr<ModelMount>> Adopt(int fuse_fd, const std::string& dir,
                                                            std::shared_ptr<ModelTree> tree,
                                                            const FuseMountOptions& options) = 0;
  // Lazily unmounts whatever is mounted at `dir` (umount2 with MNT_DETACH), ignoring errors:
  // the inherited mount that could not be resumed, before mounting afresh.
  virtual void LazyUnmount(const std::string& dir) = 0;
};

// The kernel's: FuseMount, DetachStaleMount and umount2.
std::unique_ptr<ModelMounter> NewFuseModelMounter();

}  // namespace modelfs
