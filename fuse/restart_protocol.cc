// Serving one FUSE connection across a restart of the serving process. The kernel keeps a
// connection, its mount and every inode and open file on it alive for as long as some process
// holds the /dev/fuse file open (systemd's fd store keeps a duplicate). A successor then serves
// the same connection (FuseMount::Adopt) without the kernel's help, because the kernel sends
// FUSE_INIT only once per connection and knows nothing of the new process:
//  - a synthetic FUSE_INIT primes libfuse (InjectSyntheticInit, kernel_protocol.h, also used
//    after Mount, where the real INIT is answered by FuseMount itself);
//  - FUSE_NOTIFY_RESEND asks the kernel to queue again the requests the predecessor took but
//    did not answer;
//  - the open-files table the predecessor kept in its state file (OpenFiles::Inherit,
//    passthrough.h) carries each open handle's I/O mode and backing id over.
// FuseMount::Detach is the other half: stop serving without unmounting or aborting.
// The kernel protocol pieces (synthetic INIT, resend, /dev/fuse numbers) are in
// kernel_protocol.h.
#define FUSE_USE_VERSION 314

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fuse/fuse_adapter.h"
#include "fuse/fuse_ops.h"
#include "fuse/kernel_protocol.h"

namespace modelfs {
namespace fuse_internal {
namespace {

// Adopt's check of `dir`, made from /proc/self/mountinfo alone: a stat of a FUSE mount that
// nobody serves yet blocks once the kernel's cached attributes expire (attr_timeout), so Adopt
// must not touch the mount before its loop runs.
absl::Status CheckFuseMountListed(const std::string& dir) {
  std::string want = std::filesystem::path(dir).lexically_normal().string();
  while (want.size() > 1 && want.back() == '/') want.pop_back();
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // "id parent major:minor root mountpoint options [optional...] - fstype source super"
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() < 5) continue;
    // Mount points escape space, tab, newline and backslash as octal (\040 ...).
    std::string point;
    for (size_t i = 0; i < f[4].size(); ++i) {
      const std::string& p = f[4];
      auto octal = [&](size_t j) { return p[j] >= '0' && p[j] <= '7'; };
      if (p[i] == '\\' && i + 3 < p.size() && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
        point.push_back(
            static_cast<char>((p[i + 1] - '0') * 64 + (p[i + 2] - '0') * 8 + (p[i + 3] - '0')));
        i += 3;
      } else {
        point.push_back(f[4][i]);
      }
    }
    if (point != want) continue;
    auto dash = std::find(f.begin() + 5, f.end(), "-");
    if (dash != f.end() && dash + 1 != f.end() && absl::StartsWith(*(dash + 1), "fuse")) {
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(absl::StrCat("adopting ", dir, ": no FUSE mount there"));
}

// The signal that interrupts the loop thread's wait in Detach. A real-time signal near the top,
// which nothing in this program uses; its handler does nothing, the interruption is the point.
int WakeSignal() { return SIGRTMAX - 1; }

void IgnoreWake(int) {}

// Process-wide, so installed once; refuses to take over a signal someone else handles.
absl::Status InstallWakeSignal() {
  static const absl::Status* const installed = [] {
    struct sigaction old;
    if (sigaction(WakeSignal(), nullptr, &old) != 0) {
      return new absl::Status(absl::InternalError(absl::StrCat("sigaction: ", strerror(errno))));
    }
    if (old.sa_handler != SIG_DFL) {
      return new absl::Status(absl::FailedPreconditionError(
          absl::StrCat("signal ", WakeSignal(), ", which FuseMount::Detach needs, is in use")));
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = IgnoreWake;  // no SA_RESTART: sem_wait must return EINTR
    sigemptyset(&sa.sa_mask);
    if (sigaction(WakeSignal(), &sa, nullptr) != 0) {
      return new absl::Status(absl::InternalError(absl::StrCat("sigaction: ", strerror(errno))));
    }
    return new absl::Status();
  }();
  return *installed;
}

}  // namespace
}  // namespace fuse_internal

using fuse_internal::CheckFuseMountListed;
using fuse_internal::InjectSyntheticInit;
using fuse_internal::InstallWakeSignal;
using fuse_internal::IsFuseDevice;
using fuse_internal::kFuseSuperMagic;
using fuse_internal::MountOptionString;
using fuse_internal::NewSession;
using fuse_internal::RequestResend;
using fuse_internal::WakeSignal;

absl::StatusOr<std::unique_ptr<FuseMount>> FuseMount::Adopt(int fuse_fd, const std::string& dir,
                                                            std::shared_ptr<ModelTree> tree,
                                                            const FuseMountOptions& options) {
  if (tree == nullptr) return absl::InvalidArgumentError("adopting " + dir + ": no tree");
  struct stat st;
  if (fstat(fuse_fd, &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("adopting ", dir, ": fd ", fuse_fd, ": ", strerror(errno)));
  }
  if (!S_ISCHR(st.st_mode) || !IsFuseDevice(st.st_rdev)) {
    return absl::InvalidArgumentError(
        absl::StrCat("adopting ", dir, ": fd ", fuse_fd, " is not /dev/fuse"));
  }
  absl::Status dir_ok = CheckFuseMountListed(dir);
  if (!dir_ok.ok()) return dir_ok;
  std::unique_ptr<FuseMount> m(new FuseMount(dir, std::move(tree), options));
  // Until it serves, a failure must leave the mount alone (the destructor would unmount).
  m->MarkStopped();

  fuse_session* se = NewSession(options, m->ctx_.get());
  if (se == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("adopting ", dir, ": libfuse rejected options ", MountOptionString(options)));
  }
  // The session closes its fd when destroyed; the caller's stays theirs.
  int fd = fcntl(fuse_fd, F_DUPFD_CLOEXEC, 3);
  if (fd < 0) {
    int err = errno;
    fuse_session_destroy(se);
    return absl::UnavailableError(
        absl::StrCat("adopting ", dir, ": dup of fd ", fuse_fd, ": ", strerror(err)));
  }
  // libfuse takes "/dev/fd/N" as "serve this open device; someone else mounted it".
  std::string dev = absl::StrCat("/dev/fd/", fd);
  if (fuse_session_mount(se, dev.c_str()) != 0) {
    close(fd);
    fuse_session_destroy(se);
    return absl::UnavailableError(absl::StrCat("adopting ", dir, ": libfuse refused ", dev));
  }
  InjectSyntheticInit(se);
  if (!m->ctx_->initialized || fuse_session_exited(se)) {
    fuse_session_destroy(se);  // closes fd
    return absl::InternalError(
        absl::StrCat("adopting ", dir, ": libfuse refused the synthetic FUSE_INIT (see stderr)"));
  }
  m->ctx_->session = se;
  // Before any request: the predecessor's open files keep their modes (passthrough.h).
  m->ctx_->files = std::make_unique<OpenFiles>(fuse_session_fd(se), options.open_files_state,
                                               /*passthrough=*/false);
  m->ctx_->files->Inherit();
  // Best effort: kernels before 6.9 answer EINVAL, and then a request the previous process
  // took but did not answer stays unanswered.
  RequestResend(fd);

  absl::Status serving = m->StartServing(se);
  if (serving.ok()) {
    // A stat of a directory that is not our mount proves nothing, so check the kind of file
    // system too (answered by our loop: a FUSE statfs is never cached).
    struct statfs fs;
    if (statfs(dir.c_str(), &fs) != 0) {
      serving = absl::UnavailableError(
          absl::StrCat("adopted mount ", dir, " does not answer: ", strerror(errno)));
    } else if (fs.f_type != kFuseSuperMagic) {
      serving = absl::UnavailableError(absl::StrCat("adopting ", dir, ": not a FUSE mount"));
    }
  }
  if (!serving.ok()) {
    m->Detach().IgnoreError();  // the mount was never ours to remove
    return serving;
  }
  return m;
}

absl::Status FuseMount::Detach() {
  absl::MutexLock lock(&mu_);
  if (unmounted_) return absl::OkStatus();
  if (!loop_done_.HasBeenNotified()) {
    // libfuse 3.14's loop thread waits in sem_wait() for a worker to finish, and the workers
    // block in read(2) on the device; only unmounting or a signal ends that. So: flag the
    // session as exiting and interrupt sem_wait with a signal until the loop notices. It then
    // cancels its workers and returns. (A signal sent just before sem_wait is lost, hence the
    // repeats.) The repeats are timed in real time, not on FuseMountOptions::clock: they pace
    // signals to a thread blocked in the kernel, which a fake clock's time would never free.
    absl::Status wake = InstallWakeSignal();
    if (!wake.ok()) return wake;
    fuse_session_exit(session_);
    while (!loop_done_.WaitForNotificationWithTimeout(absl::Milliseconds(10))) {
      pthread_kill(loop_.native_handle(), WakeSignal());
    }
  }
  if (loop_.joinable()) loop_.join();
  ctx_->reads->Stop();
  if (session_ != nullptr) {
    // No fuse_session_unmount: it would unmount. Destroying closes our fd, nothing more.
    fuse_session_destroy(session_);
    session_ = nullptr;
  }
  unmounted_ = true;
  return absl::OkStatus();
}

}  // namespace modelfs
