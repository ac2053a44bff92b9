// The kernel's FUSE protocol where modelfs speaks it itself, in one place (as EdenFS keeps its
// FuseChannel): libfuse 3.14 predates passthrough (protocol 7.40, Linux 6.9), cannot ask for
// flags2 bits or raise max_background at INIT, and knows nothing of FUSE_NOTIFY_RESEND. So:
//  - FUSE_INIT: the kernel's INIT answered here at mount (AnswerKernelInit), and the synthetic
//    INIT fed to libfuse after a mount and when adopting a connection (InjectSyntheticInit);
//  - passthrough: the INIT and open flags, the open reply with a backing id, and the /dev/fuse
//    ioctls that register and drop backing files;
//  - FUSE_NOTIFY_RESEND, asking the kernel to queue again requests nobody answered;
//  - the device and file system numbers: /dev/fuse (10:229) and the FUSE super magic.
// Layouts and numbers are the kernel's uapi <linux/fuse.h> as of 7.40. Not for use outside
// fuse/. Every function is safe to call from any thread (they touch only their arguments).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

struct fuse_req;
struct fuse_session;

namespace modelfs::fuse_internal {

// INIT flags (64-bit: flags2 is the upper half, sent with FUSE_INIT_EXT).
// FUSE_PASSTHROUGH (7.40, Linux 6.9): flags2 bit 5.
inline constexpr uint64_t kFuseInitPassthrough = uint64_t{1} << 37;
// FUSE_DIRECT_IO_ALLOW_MMAP (protocol 7.39, Linux 6.6): shared mmap of a direct_io file.
inline constexpr uint64_t kFuseInitDirectIoAllowMmap = uint64_t{1} << 36;
// FOPEN_PASSTHROUGH: the open reply's flag that makes the kernel read the backing file.
inline constexpr uint32_t kFopenPassthrough = uint32_t{1} << 7;

// Linux /dev/fuse is character device 10:229; a FUSE mount's statfs f_type.
inline constexpr unsigned kFuseDevMajor = 10;
inline constexpr unsigned kFuseDevMinor = 229;
inline constexpr long kFuseSuperMagic = 0x65735546;

// Whether `rdev` (st_rdev of a character device) is /dev/fuse.
bool IsFuseDevice(dev_t rdev);

// What Mount asks of the kernel at FUSE_INIT (from FuseMountOptions).
struct KernelInitWants {
  bool passthrough = false;           // FUSE_PASSTHROUGH
  bool direct_io_allow_mmap = false;  // FUSE_DIRECT_IO_ALLOW_MMAP
  uint16_t max_background = 12;       // requests the kernel keeps in flight at once
  uint32_t max_read = 0;              // bytes per read request (max_pages = max_read / 4096)
};

// Reads the FUSE_INIT the kernel queued on `fd` while mounting `dir` and answers it: what
// libfuse 3.14 asks for by default with our operations, plus what `wants` asks and the kernel
// offers. Waits at most 10 s for the INIT. Returns the flags the connection now has.
// Errors: kUnavailable (no INIT, unreadable, a protocol older than 7.23, the reply refused),
// naming `dir`.
absl::StatusOr<uint64_t> AnswerKernelInit(int fd, const KernelInitWants& wants,
                                          const std::string& dir);

// Feeds libfuse a FUSE_INIT the kernel never sent, so that it serves a connection whose INIT it
// did not see. The outcome shows in the session (exited) and in whether its init callback ran.
void InjectSyntheticInit(fuse_session* se);

// FUSE_NOTIFY_RESEND (7.40, Linux 6.9): asks the kernel to queue again every request read from
// `fd` but not answered. Returns 0 or an errno (EINVAL before Linux 6.9).
int RequestResend(int fd);

// Answers FUSE_OPEN with handle `fh` served by passthrough from `backing_id` (libfuse 3.14's
// fuse_reply_open cannot carry a backing id). Returns fuse_reply_buf's result (0: the kernel
// took it).
int ReplyOpenPassthrough(fuse_req* req, uint64_t fh, int32_t backing_id);

// Registers `file_fd` (opened read-only) as a backing file of the connection on `dev_fd`.
// Needs CAP_SYS_ADMIN. Errors: kPermissionDenied (EPERM), kFailedPrecondition (ELOOP: the
// file is on a stacked file system; EOPNOTSUPP/ENOTTY: no passthrough on this connection),
// kInternal otherwise; messages say which.
absl::StatusOr<int32_t> OpenBackingFile(int dev_fd, int file_fd);
// Drops a backing id; open files that use it keep their own reference. Best effort.
void CloseBackingFile(int dev_fd, int32_t backing_id);

}  // namespace modelfs::fuse_internal
