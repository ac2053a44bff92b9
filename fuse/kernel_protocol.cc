// The kernel's FUSE protocol spoken directly (see kernel_protocol.h).
#define FUSE_USE_VERSION 314

#include "fuse/kernel_protocol.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace modelfs::fuse_internal {
namespace {

// FUSE_INIT's in and out bodies as of 7.40 (the installed <linux/fuse.h> may be older).
struct InitIn {
  uint32_t major, minor, max_readahead, flags, flags2;
  uint32_t unused[11];
};
struct InitOut {
  uint32_t major, minor, max_readahead, flags;
  uint16_t max_background, congestion_threshold;
  uint32_t max_write, time_gran;
  uint16_t max_pages, map_alignment;
  uint32_t flags2, max_stack_depth;
  uint32_t unused[6];
};
static_assert(sizeof(InitOut) == 64);

// The reply to FUSE_OPEN as of 7.40.
struct FuseOpenOut {
  uint64_t fh;
  uint32_t open_flags;
  int32_t backing_id;
};
static_assert(sizeof(FuseOpenOut) == 16);

// /dev/fuse ioctls of 7.40, magic 229.
struct FuseBackingMap {
  int32_t fd;
  uint32_t flags;
  uint64_t padding;
};
constexpr unsigned long kBackingOpen = _IOW(229, 1, FuseBackingMap);
constexpr unsigned long kBackingClose = _IOW(229, 2, uint32_t);

// FUSE_NOTIFY_RESEND's code, written in a notification's `error` field.
constexpr int32_t kFuseNotifyResend = 7;

// An id the kernel never gives a request of its own: it counts up from 2 in steps of 2, and
// uses bit 0 for interrupts and bit 63 for resent requests. A reply to it is refused (ENOENT),
// which libfuse ignores silently.
constexpr uint64_t kSyntheticInitUnique = uint64_t{1} << 62;

}  // namespace

bool IsFuseDevice(dev_t rdev) { return rdev == makedev(kFuseDevMajor, kFuseDevMinor); }

// The kernel's FUSE_INIT, answered here rather than by libfuse, because libfuse 3.14 can
// neither ask for passthrough (a flags2 bit it does not know, and max_stack_depth) nor raise
// max_background past what its options allow. libfuse then gets the synthetic INIT
// (InjectSyntheticInit), exactly as when adopting a connection.
absl::StatusOr<uint64_t> AnswerKernelInit(int fd, const KernelInitWants& wants,
                                          const std::string& dir) {
  // The kernel queued INIT while mounting; never wait for ever all the same (in real time: this
  // waits on the kernel, not on a rule a test would drive with a fake clock).
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 10000) != 1) {
    return absl::UnavailableError(absl::StrCat("mount of ", dir, ": no FUSE_INIT from the kernel"));
  }
  std::vector<char> buf(1 << 17);
  ssize_t n = read(fd, buf.data(), buf.size());
  fuse_in_header in_header;
  InitIn in;
  memset(&in, 0, sizeof(in));
  if (n < static_cast<ssize_t>(sizeof(in_header) + 8)) {
    return absl::UnavailableError(absl::StrCat(
        "mount of ", dir, ": reading FUSE_INIT: ", n < 0 ? strerror(errno) : "short message"));
  }
  memcpy(&in_header, buf.data(), sizeof(in_header));
  memcpy(&in, buf.data() + sizeof(in_header),
         std::min(sizeof(in), static_cast<size_t>(n) - sizeof(in_header)));
  if (in_header.opcode != FUSE_INIT || in.major != FUSE_KERNEL_VERSION || in.minor < 23) {
    return absl::UnavailableError(absl::StrCat("mount of ", dir, ": kernel FUSE protocol ",
                                               in.major, ".", in.minor, " is not supported"));
  }
  uint64_t offered = in.flags;
  if (offered & FUSE_INIT_EXT) offered |= uint64_t{in.flags2} << 32;
  // What libfuse 3.14 asks for by default with our operations (AUTO_INVAL_DATA aside: the
  // files never change), plus passthrough.
  uint64_t want = FUSE_ASYNC_READ | FUSE_PARALLEL_DIROPS | FUSE_HANDLE_KILLPRIV | FUSE_ASYNC_DIO |
                  FUSE_HAS_IOCTL_DIR | FUSE_ATOMIC_O_TRUNC | FUSE_DO_READDIRPLUS |
                  FUSE_READDIRPLUS_AUTO | FUSE_BIG_WRITES | FUSE_MAX_PAGES | FUSE_INIT_EXT;
  if (wants.passthrough) want |= kFuseInitPassthrough;
  if (wants.direct_io_allow_mmap) want |= kFuseInitDirectIoAllowMmap;
  const uint64_t flags = want & offered;

  struct {
    fuse_out_header header;
    InitOut init;
  } reply;
  memset(&reply, 0, sizeof(reply));
  reply.header.len = sizeof(reply);
  reply.header.unique = in_header.unique;
  reply.init.major = FUSE_KERNEL_VERSION;
  reply.init.minor = std::min<uint32_t>(in.minor, 40);
  reply.init.max_readahead = in.max_readahead;
  reply.init.flags = static_cast<uint32_t>(flags);
  reply.init.flags2 = static_cast<uint32_t>(flags >> 32);
  reply.init.max_background = wants.max_background;
  reply.init.congestion_threshold = static_cast<uint16_t>(wants.max_background * 3 / 4);
  reply.init.max_write = 1 << 20;  // libfuse's buffer: FUSE_MAX_MAX_PAGES pages
  reply.init.time_gran = 1;
  reply.init.max_pages = static_cast<uint16_t>(std::max<uint32_t>(1, wants.max_read / 4096));
  // A backing file may sit on a plain file system only; overlayfs (a pod's view) may then
  // still stack on this mount (depth 2, the kernel's limit).
  if (flags & kFuseInitPassthrough) reply.init.max_stack_depth = 1;
  if (write(fd, &reply, sizeof(reply)) != static_cast<ssize_t>(sizeof(reply))) {
    return absl::UnavailableError(
        absl::StrCat("mount of ", dir, ": answering FUSE_INIT: ", strerror(errno)));
  }
  return flags;
}

// The kernel sends FUSE_INIT once per connection, to the process that mounted; libfuse answers
// every request with EIO until it has seen one (its session's got_init). So Mount (whose real
// INIT AnswerKernelInit took) and Adopt feed it an INIT the kernel never sent, which sets up what
// libfuse derives from INIT the way the real one did at mount time:
//  - proto_minor, which decides reply sizes (compat layouts below 7.23; the same from 7.23 on),
//    and gates notifications. 7.36 is the first with flags2 (FUSE_INIT_EXT), which libfuse
//    3.14 reads; any kernel new enough for this daemon speaks at least that.
//  - the capability flags a current kernel offers (Linux 6.x sends these bits 0-30), so
//    libfuse's `capable` and our OpInit's `want` come out as at mount time. FUSE_MAX_PAGES
//    matters most: without it libfuse shrinks its read buffer to 128 KiB, below the 1 MiB
//    max_write the kernel agreed to, and the kernel then refuses every read of the device.
// libfuse's INIT reply goes to the device and is refused (unknown unique): the kernel keeps
// the parameters it negotiated with the first process, so nothing in it can change them.
void InjectSyntheticInit(fuse_session* se) {
  struct {
    fuse_in_header header;
    fuse_init_in init;
  } msg;
  static_assert(sizeof(msg) == sizeof(fuse_in_header) + sizeof(fuse_init_in));
  memset(&msg, 0, sizeof(msg));
  msg.header.len = sizeof(msg);
  msg.header.opcode = FUSE_INIT;
  msg.header.unique = kSyntheticInitUnique;
  msg.init.major = FUSE_KERNEL_VERSION;
  msg.init.minor = std::min(FUSE_KERNEL_MINOR_VERSION, 36);
  msg.init.max_readahead = 128 * 1024;  // the kernel's default; libfuse only echoes it
  uint64_t flags = FUSE_ASYNC_READ | FUSE_POSIX_LOCKS | FUSE_ATOMIC_O_TRUNC | FUSE_EXPORT_SUPPORT |
                   FUSE_BIG_WRITES | FUSE_DONT_MASK | FUSE_SPLICE_WRITE | FUSE_SPLICE_MOVE |
                   FUSE_SPLICE_READ | FUSE_FLOCK_LOCKS | FUSE_HAS_IOCTL_DIR | FUSE_AUTO_INVAL_DATA |
                   FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO | FUSE_ASYNC_DIO |
                   FUSE_WRITEBACK_CACHE | FUSE_NO_OPEN_SUPPORT | FUSE_PARALLEL_DIROPS |
                   FUSE_HANDLE_KILLPRIV | FUSE_POSIX_ACL | FUSE_ABORT_ERROR | FUSE_MAX_PAGES |
                   FUSE_CACHE_SYMLINKS | FUSE_NO_OPENDIR_SUPPORT | FUSE_EXPLICIT_INVAL_DATA |
                   FUSE_HANDLE_KILLPRIV_V2 | FUSE_SETXATTR_EXT | FUSE_INIT_EXT;
  msg.init.flags = static_cast<uint32_t>(flags);
  msg.init.flags2 = static_cast<uint32_t>(flags >> 32);

  fuse_buf buf;
  memset(&buf, 0, sizeof(buf));
  buf.size = sizeof(msg);
  buf.mem = &msg;
  fuse_session_process_buf(se, &buf);
}

// The kernel puts every request that was read from the device but not answered back in the
// queue. Those are the requests a crashed process had taken; without this their callers would
// wait forever. A notification has unique 0 and its code in `error`.
int RequestResend(int fd) {
  fuse_out_header header;
  memset(&header, 0, sizeof(header));
  header.len = sizeof(header);
  header.error = kFuseNotifyResend;
  return write(fd, &header, sizeof(header)) < 0 ? errno : 0;
}

int ReplyOpenPassthrough(fuse_req* req, uint64_t fh, int32_t backing_id) {
  FuseOpenOut out;
  memset(&out, 0, sizeof(out));
  out.fh = fh;
  out.open_flags = kFopenPassthrough;
  out.backing_id = backing_id;
  return fuse_reply_buf(req, reinterpret_cast<const char*>(&out), sizeof(out));
}

absl::StatusOr<int32_t> OpenBackingFile(int dev_fd, int file_fd) {
  FuseBackingMap map;
  memset(&map, 0, sizeof(map));
  map.fd = file_fd;
  int id = ioctl(dev_fd, kBackingOpen, &map);
  if (id > 0) return id;
  const int err = id < 0 ? errno : EINVAL;
  const std::string what =
      absl::StrCat("registering a FUSE passthrough backing file: ", strerror(err));
  if (err == EPERM) return absl::PermissionDeniedError(what + " (needs CAP_SYS_ADMIN)");
  if (err == ELOOP) {
    return absl::FailedPreconditionError(what + " (the cache is on a stacked file system)");
  }
  if (err == EOPNOTSUPP || err == ENOTTY || err == EINVAL) {
    return absl::FailedPreconditionError(what + " (no passthrough on this connection)");
  }
  return absl::InternalError(what);
}

void CloseBackingFile(int dev_fd, int32_t backing_id) {
  uint32_t id = static_cast<uint32_t>(backing_id);
  ioctl(dev_fd, kBackingClose, &id);
}

}  // namespace modelfs::fuse_internal
