// FuseMount's life: Mount, the session loop, and Unmount. The request callbacks are in
// fuse_ops.cc; Adopt and Detach, which serve a connection across a restart, in
// restart_protocol.cc; the kernel protocol spoken without libfuse (FUSE_INIT) in
// kernel_protocol.cc.
#define FUSE_USE_VERSION 314

#include "fuse/fuse_adapter.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fuse/fuse_ops.h"
#include "fuse/kernel_protocol.h"

namespace modelfs {
namespace {

using fuse_internal::AnswerKernelInit;
using fuse_internal::Context;
using fuse_internal::InjectSyntheticInit;
using fuse_internal::KernelInitWants;
using fuse_internal::kFuseInitDirectIoAllowMmap;
using fuse_internal::kFuseInitPassthrough;
using fuse_internal::LogError;
using fuse_internal::MountOptionString;
using fuse_internal::NewSession;

absl::Status CheckMountPoint(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("mount point ", dir, ": ", strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("mount point ", dir, " is not a directory"));
  }
  return absl::OkStatus();
}

// The mount's readahead: the kernel caps what INIT may ask at its default (128 KiB), and a
// loader streaming weights wants big, early requests. Best effort (needs root and sysfs).
void SetReadAhead(const std::string& dir, uint32_t kb) {
  struct stat st;
  if (kb == 0 || stat(dir.c_str(), &st) != 0) return;
  const std::string path =
      absl::StrCat("/sys/class/bdi/", major(st.st_dev), ":", minor(st.st_dev), "/read_ahead_kb");
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  const std::string v = absl::StrCat(kb);
  if (write(fd, v.data(), v.size()) < 0) LogError("mount", "cannot set read_ahead_kb");
  close(fd);
}

}  // namespace

FuseMount::FuseMount(std::string dir, std::shared_ptr<ModelTree> tree,
                     const FuseMountOptions& options)
    : dir_(std::move(dir)), tree_(std::move(tree)), options_(options) {
  ctx_ = std::make_unique<Context>();
  ctx_->tree = tree_;
  ctx_->entry_timeout = options_.entry_timeout_s;
  ctx_->attr_timeout = options_.attr_timeout_s;
  ctx_->max_read = options_.max_read;
  ctx_->on_read = options_.on_read;
  ctx_->on_open = options_.on_open;
  ctx_->clock = options_.clock != nullptr ? options_.clock : Clock::Real();
  ctx_->reads = std::make_unique<ReadPool>(std::max(1u, options_.max_background_reads));
}

absl::StatusOr<std::unique_ptr<FuseMount>> FuseMount::Mount(const std::string& dir,
                                                            std::shared_ptr<ModelTree> tree,
                                                            const FuseMountOptions& options) {
  if (tree == nullptr) return absl::InvalidArgumentError("mount of " + dir + ": no tree");
  absl::Status dir_ok = CheckMountPoint(dir);
  if (!dir_ok.ok()) return dir_ok;
  std::unique_ptr<FuseMount> m(new FuseMount(dir, std::move(tree), options));

  fuse_session* se = NewSession(options, m->ctx_.get());
  if (se == nullptr) {
    m->MarkStopped();
    return absl::InvalidArgumentError(
        absl::StrCat("mount of ", dir, ": libfuse rejected options ", MountOptionString(options)));
  }
  if (fuse_session_mount(se, dir.c_str()) != 0) {
    fuse_session_destroy(se);
    m->MarkStopped();
    return absl::UnavailableError(absl::StrCat(
        "mount of ", dir, " failed (needs /dev/fuse and root or fusermount3; see stderr)"));
  }
  KernelInitWants wants;
  wants.passthrough = options.passthrough;
  wants.direct_io_allow_mmap = options.direct_io_reads;
  wants.max_background = options.max_background;
  wants.max_read = options.max_read;
  absl::StatusOr<uint64_t> flags = AnswerKernelInit(fuse_session_fd(se), wants, dir);
  if (flags.ok()) {
    InjectSyntheticInit(se);
    if (!m->ctx_->initialized || fuse_session_exited(se)) {
      flags = absl::InternalError(
          absl::StrCat("mount of ", dir, ": libfuse refused the synthetic FUSE_INIT (see stderr)"));
    }
  }
  if (!flags.ok()) {
    fuse_session_unmount(se);
    fuse_session_destroy(se);
    m->MarkStopped();
    return flags.status();
  }
  m->ctx_->session = se;
  m->ctx_->direct_io = (*flags & kFuseInitDirectIoAllowMmap) != 0;
  m->ctx_->files = std::make_unique<OpenFiles>(fuse_session_fd(se), options.open_files_state,
                                               (*flags & kFuseInitPassthrough) != 0);
  m->ctx_->files->StartFresh();
  absl::Status serving = m->StartServing(se);
  if (!serving.ok()) {
    m->Unmount().IgnoreError();
    return serving;
  }
  SetReadAhead(dir, options.read_ahead_kb);
  return m;
}

void FuseMount::MarkStopped() {
  absl::MutexLock lock(&mu_);
  unmounted_ = true;
}

absl::Status FuseMount::StartServing(fuse_session* se) {
  {
    absl::MutexLock lock(&mu_);
    unmounted_ = false;
    session_ = se;
    loop_ = std::thread([this, se] { RunLoop(se); });
  }
  // The first stat is served by the loop, which proves the mount answers; its device number
  // names the connection in /sys/fs/fuse/connections.
  struct stat st;
  if (stat(dir_.c_str(), &st) != 0) {
    return absl::UnavailableError(
        absl::StrCat("mount of ", dir_, " does not answer: ", strerror(errno)));
  }
  fuse_conn_id_ = minor(st.st_dev);
  return absl::OkStatus();
}

void FuseMount::RunLoop(fuse_session* se) {
  fuse_loop_config* config = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(config, 0);
  fuse_loop_cfg_set_max_threads(config, options_.max_threads);
  fuse_loop_cfg_set_idle_threads(config, options_.max_idle_threads);
  int rc = fuse_session_loop_mt(se, config);
  fuse_loop_cfg_destroy(config);
  if (rc != 0) {
    loop_status_ = absl::UnavailableError(absl::StrCat(
        "FUSE session loop for ", dir_, " ended with error ", rc < 0 ? strerror(-rc) : "signal"));
  }
  loop_done_.Notify();
}

void FuseMount::AbortConnection() {
  if (fuse_conn_id_ == 0) return;
  std::string path = absl::StrCat("/sys/fs/fuse/connections/", fuse_conn_id_, "/abort");
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;  // fusectl not mounted: the lazy unmount finishes when users let go
  if (write(fd, "1", 1) < 0) LogError("unmount", "cannot write fusectl abort");
  close(fd);
}

absl::Status FuseMount::Unmount() {
  absl::MutexLock lock(&mu_);
  if (unmounted_) return absl::OkStatus();
  if (!loop_done_.HasBeenNotified()) {
    // Unmounting ends the connection, which wakes the loop's workers (ENODEV) and ends it.
    if (umount2(dir_.c_str(), UMOUNT_NOFOLLOW) != 0) {
      int err = errno;
      if (err == EBUSY) {
        AbortConnection();
        if (umount2(dir_.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0 && errno != EINVAL) {
          return absl::InternalError(
              absl::StrCat("lazy unmount of ", dir_, " failed: ", strerror(errno)));
        }
      } else if (err != EINVAL && err != ENOENT) {
        // EINVAL: no longer a mount point (someone ran fusermount3 -u); the loop ends itself.
        return absl::InternalError(absl::StrCat("unmount of ", dir_, " failed: ", strerror(err)));
      }
    }
  }
  if (loop_.joinable()) loop_.join();
  ctx_->reads->Stop();  // replies use the session: none may come after it is gone
  if (session_ != nullptr) {
    fuse_session_unmount(session_);  // closes the device; a no-op unmount when already gone
    fuse_session_destroy(session_);
    session_ = nullptr;
  }
  unmounted_ = true;
  return absl::OkStatus();
}

bool FuseMount::passthrough() const { return ctx_->files && ctx_->files->passthrough(); }

bool FuseMount::direct_io_reads() const { return ctx_->direct_io; }

size_t FuseMount::passthrough_opens() const {
  return ctx_->files ? ctx_->files->open_count(OpenFiles::Mode::kPassthrough) : 0;
}

size_t FuseMount::cached_opens() const {
  return ctx_->files ? ctx_->files->open_count(OpenFiles::Mode::kCached) : 0;
}

int FuseMount::fuse_fd() const {
  absl::MutexLock lock(&mu_);
  return session_ == nullptr ? -1 : fuse_session_fd(session_);
}

absl::Status FuseMount::Wait() {
  loop_done_.WaitForNotification();
  return loop_status_;
}

absl::Status FuseMount::RemoveModel(const std::string& model_name) {
  absl::Status s = tree_->RemoveModel(model_name);
  if (!s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (session_ != nullptr && !loop_done_.HasBeenNotified()) {
    // ENOENT just means the kernel had not cached the name.
    fuse_lowlevel_notify_inval_entry(session_, FUSE_ROOT_ID, model_name.c_str(), model_name.size());
  }
  return absl::OkStatus();
}

FuseMount::~FuseMount() {
  absl::Status s = Unmount();
  if (!s.ok()) {
    LogError("unmount", std::string(s.ToString()).c_str());
    // The loop still runs and uses ctx_: leak it rather than free memory under it.
    absl::MutexLock lock(&mu_);
    if (loop_.joinable()) loop_.detach();
    ctx_.release();
  }
}

}  // namespace modelfs
