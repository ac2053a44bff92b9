// A FUSE mount whose server died (kill -9 of `modelfs mount`, a crashed daemon) stays in the
// mount table and answers ENOTCONN to everything. Mounting on top of it stacks a second mount
// and leaves the dead one behind after `umount`. DetachStaleMount clears it first; used by
// `modelfs mount` and the snapshotter daemon.
//
// Thread safety: a free function; it touches only `dir`.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace modelfs {

// If a FUSE filesystem is mounted at `dir` (per /proc/self/mountinfo) and its server is dead
// (statfs fails with ENOTCONN; stat would not do: the kernel answers it from cached
// attributes), detaches it lazily (umount2 MNT_DETACH, or `fusermount3 -u -z` without the
// privilege). A server that does not answer within 2 s is left alone. Returns OK when there was
// nothing to detach or it is gone; kFailedPrecondition naming `dir` when a dead mount stays.
absl::Status DetachStaleMount(const std::string& dir);

// Whether a FUSE filesystem is mounted exactly at `dir` (per /proc/self/mountinfo, without a
// system call on `dir`, whose server may be hung). After DetachStaleMount, one that is still
// there is live: mounting on it would stack a second mount that hides the first.
bool FuseMountedAt(const std::string& dir);

// Runs `fusermount3 -u [-z] -- dir` (lazy adds -z) by exec, without a shell, so `dir` is
// never parsed. fusermount3 is setuid root: it may unmount a user's own FUSE mount where
// umount2 says EPERM. True when it ran and exited 0.
bool FusermountUnmount(const std::string& dir, bool lazy);

}  // namespace modelfs
