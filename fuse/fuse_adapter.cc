// The libfuse3 low-level glue: request -> ModelTree call -> reply. Structure after libfuse's
// example/passthrough_hp.cc, without its process-global filesystem object.
#define FUSE_USE_VERSION 314

#include "fuse/fuse_adapter.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace modelfs {

struct FuseMount::Context {
  std::shared_ptr<ModelTree> tree;
  double entry_timeout = 0;
  double attr_timeout = 0;
  uint32_t max_read = 0;
  std::function<void(absl::Duration, bool)> on_read;
};

namespace {

using Context = FuseMount::Context;

// A snapshot of a directory listing taken at opendir, so that paging through it with offsets
// is stable even if models are added or removed meanwhile.
struct DirHandle {
  std::vector<DirEntry> entries;
};

Context& Ctx(fuse_req_t req) { return *static_cast<Context*>(fuse_req_userdata(req)); }

void LogError(const char* op, const char* message) {
  fprintf(stderr, "modelfs fuse: %s: %s\n", op, message);
}

// The one place a Status becomes a FUSE error reply. I/O failures are logged: they are the
// ones an operator must see (a digest mismatch, a registry that is down).
void ReplyStatus(fuse_req_t req, const char* op, const absl::Status& status) {
  int err = StatusToErrno(status);
  if (err == EIO) LogError(op, std::string(status.ToString()).c_str());
  fuse_reply_err(req, err);
}

// Runs a callback body so that no exception crosses into libfuse's C code. Bodies reply as
// their last step, so a throw always happens before any reply was sent.
template <typename F>
void Guarded(fuse_req_t req, const char* op, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    LogError(op, e.what());
    fuse_reply_err(req, EIO);
  } catch (...) {
    LogError(op, "unknown exception");
    fuse_reply_err(req, EIO);
  }
}

// For forget-style callbacks, which must answer with fuse_reply_none.
template <typename F>
void GuardedNoReply(fuse_req_t req, const char* op, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    LogError(op, e.what());
  } catch (...) {
    LogError(op, "unknown exception");
  }
  fuse_reply_none(req);
}

struct stat ToStat(const NodeAttr& a) {
  struct stat st;
  memset(&st, 0, sizeof(st));
  st.st_ino = a.ino;
  st.st_mode = a.mode;
  st.st_nlink = a.nlink;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_size = static_cast<off_t>(a.size);
  st.st_blocks = static_cast<blkcnt_t>(a.blocks);
  st.st_blksize = a.blksize;
  st.st_mtim.tv_sec = a.mtime_sec;
  st.st_ctim.tv_sec = a.mtime_sec;
  st.st_atim.tv_sec = a.mtime_sec;
  return st;
}

fuse_entry_param ToEntry(const Context& ctx, const NodeAttr& a) {
  fuse_entry_param e;
  memset(&e, 0, sizeof(e));
  e.ino = a.ino;
  e.generation = 0;
  e.attr = ToStat(a);
  e.attr_timeout = ctx.attr_timeout;
  e.entry_timeout = ctx.entry_timeout;
  return e;
}

void OpInit(void* userdata, fuse_conn_info* conn) {
  // libfuse refuses INIT unless this repeats the max_read mount option.
  conn->max_read = static_cast<Context*>(userdata)->max_read;
  if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
  // Nothing ever changes under a file, so there is no reason to drop cached pages on getattr.
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guarded(req, "lookup", [&] {
    Context& ctx = Ctx(req);
    absl::StatusOr<NodeAttr> attr = ctx.tree->Lookup(parent, name);
    if (!attr.ok()) return ReplyStatus(req, "lookup", attr.status());
    fuse_entry_param e = ToEntry(ctx, *attr);
    // If the kernel did not take the reply (interrupted), it holds no reference to undo.
    if (fuse_reply_entry(req, &e) != 0) ctx.tree->Forget(attr->ino, 1);
  });
}

void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  GuardedNoReply(req, "forget", [&] { Ctx(req).tree->Forget(ino, nlookup); });
}

void OpForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  GuardedNoReply(req, "forget_multi", [&] {
    ModelTree& tree = *Ctx(req).tree;
    for (size_t i = 0; i < count; ++i) tree.Forget(forgets[i].ino, forgets[i].nlookup);
  });
}

void OpGetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
  Guarded(req, "getattr", [&] {
    Context& ctx = Ctx(req);
    absl::StatusOr<NodeAttr> attr = ctx.tree->GetAttr(ino);
    if (!attr.ok()) return ReplyStatus(req, "getattr", attr.status());
    struct stat st = ToStat(*attr);
    fuse_reply_attr(req, &st, ctx.attr_timeout);
  });
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guarded(req, "open", [&] {
    absl::Status s = Ctx(req).tree->Open(ino, fi->flags);
    if (!s.ok()) return ReplyStatus(req, "open", s);
    // Files never change: keep the page cache across opens (and share it between pods), and
    // stay off direct_io so that mmap works.
    fi->keep_cache = 1;
    fi->direct_io = 0;
    fi->fh = 0;
    fuse_reply_open(req, fi);
  });
}

void OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* /*fi*/) {
  Guarded(req, "read", [&] {
    if (off < 0) return fuse_reply_err(req, EINVAL), void();
    const Context& ctx = Ctx(req);
    absl::Time start = ctx.on_read ? absl::Now() : absl::InfinitePast();
    absl::StatusOr<std::string> bytes =
        ctx.tree->Read(ino, static_cast<uint64_t>(off), static_cast<uint64_t>(size));
    if (ctx.on_read) ctx.on_read(absl::Now() - start, bytes.ok());
    if (!bytes.ok()) return ReplyStatus(req, "read", bytes.status());
    fuse_reply_buf(req, bytes->data(), bytes->size());
  });
}

void OpRelease(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* /*fi*/) {
  fuse_reply_err(req, 0);
}

void OpOpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guarded(req, "opendir", [&] {
    absl::StatusOr<std::vector<DirEntry>> entries = Ctx(req).tree->ReadDir(ino, 0);
    if (!entries.ok()) return ReplyStatus(req, "opendir", entries.status());
    auto handle = std::make_unique<DirHandle>();
    handle->entries = std::move(*entries);
    fi->fh = reinterpret_cast<uint64_t>(handle.get());
    fi->keep_cache = 1;
    if (fuse_reply_open(req, fi) == 0) handle.release();  // releasedir frees it
  });
}

void OpReleaseDir(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  delete reinterpret_cast<DirHandle*>(fi->fh);
  fuse_reply_err(req, 0);
}

void DoReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi,
               bool plus) {
  const char* op = plus ? "readdirplus" : "readdir";
  Guarded(req, op, [&] {
    Context& ctx = Ctx(req);
    auto* handle = reinterpret_cast<DirHandle*>(fi->fh);
    if (handle == nullptr) return fuse_reply_err(req, EBADF), void();
    std::string buf(size, '\0');
    size_t used = 0;
    for (const DirEntry& entry : handle->entries) {
      if (entry.next_offset <= static_cast<uint64_t>(off)) continue;
      size_t room = size - used;
      size_t need = 0;
      if (!plus) {
        struct stat st;
        memset(&st, 0, sizeof(st));
        st.st_ino = entry.ino;
        st.st_mode = entry.is_dir ? S_IFDIR : S_IFREG;
        need = fuse_add_direntry(req, buf.data() + used, room, entry.name.c_str(), &st,
                                 static_cast<off_t>(entry.next_offset));
      } else {
        // The kernel takes a reference on every entry but "." and ".." (as if looked up).
        bool dots = entry.name == "." || entry.name == "..";
        absl::StatusOr<NodeAttr> attr =
            dots ? ctx.tree->GetAttr(entry.ino) : ctx.tree->Lookup(ino, entry.name);
        if (!attr.ok()) continue;  // removed since opendir
        fuse_entry_param e = ToEntry(ctx, *attr);
        need = fuse_add_direntry_plus(req, buf.data() + used, room, entry.name.c_str(), &e,
                                      static_cast<off_t>(entry.next_offset));
        if (need > room && !dots) ctx.tree->Forget(attr->ino, 1);
      }
      if (need > room) break;
      used += need;
    }
    fuse_reply_buf(req, buf.data(), used);
  });
}

void OpReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  DoReadDir(req, ino, size, off, fi, /*plus=*/false);
}

void OpReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  DoReadDir(req, ino, size, off, fi, /*plus=*/true);
}

void OpStatFs(fuse_req_t req, fuse_ino_t /*ino*/) {
  Guarded(req, "statfs", [&] {
    FsStats s = Ctx(req).tree->StatFs();
    struct statvfs st;
    memset(&st, 0, sizeof(st));
    st.f_bsize = s.block_size;
    st.f_frsize = s.block_size;
    st.f_blocks = (s.total_bytes + s.block_size - 1) / s.block_size;
    st.f_files = s.files;
    st.f_namemax = s.name_max;
    st.f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
    fuse_reply_statfs(req, &st);
  });
}

void OpGetXattr(fuse_req_t req, fuse_ino_t /*ino*/, const char* /*name*/, size_t /*size*/) {
  fuse_reply_err(req, ENODATA);  // no extended attributes exist
}

void OpListXattr(fuse_req_t req, fuse_ino_t /*ino*/, size_t size) {
  if (size == 0) {
    fuse_reply_xattr(req, 0);
  } else {
    fuse_reply_buf(req, nullptr, 0);
  }
}

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops;
  memset(&ops, 0, sizeof(ops));
  ops.init = OpInit;
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.forget_multi = OpForgetMulti;
  ops.getattr = OpGetAttr;
  ops.open = OpOpen;
  ops.read = OpRead;
  ops.release = OpRelease;
  ops.opendir = OpOpenDir;
  ops.readdir = OpReadDir;
  ops.readdirplus = OpReadDirPlus;
  ops.releasedir = OpReleaseDir;
  ops.statfs = OpStatFs;
  ops.getxattr = OpGetXattr;
  ops.listxattr = OpListXattr;
  return ops;
}

std::string MountOptionString(const FuseMountOptions& o) {
  std::vector<std::string> opts = {"ro", "nosuid", "nodev", "default_permissions"};
  if (o.allow_other) opts.push_back("allow_other");
  opts.push_back(absl::StrCat("max_read=", o.max_read));
  opts.push_back(absl::StrCat("fsname=", o.fsname));
  opts.push_back(absl::StrCat("subtype=", o.subtype));
  return absl::StrJoin(opts, ",");
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
}

absl::StatusOr<std::unique_ptr<FuseMount>> FuseMount::Mount(const std::string& dir,
                                                            std::shared_ptr<ModelTree> tree,
                                                            const FuseMountOptions& options) {
  if (tree == nullptr) return absl::InvalidArgumentError("mount of " + dir + ": no tree");
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("mount point ", dir, ": ", strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("mount point ", dir, " is not a directory"));
  }
  std::unique_ptr<FuseMount> m(new FuseMount(dir, std::move(tree), options));

  std::vector<std::string> argv_s = {"modelfs", "-o", MountOptionString(options)};
  if (options.debug) argv_s.push_back("-d");
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  static const fuse_lowlevel_ops kOps = MakeOps();
  fuse_session* se = fuse_session_new(&args, &kOps, sizeof(kOps), m->ctx_.get());
  fuse_opt_free_args(&args);
  if (se == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("mount of ", dir, ": libfuse rejected options ", MountOptionString(options)));
  }
  if (fuse_session_mount(se, dir.c_str()) != 0) {
    fuse_session_destroy(se);
    return absl::UnavailableError(absl::StrCat(
        "mount of ", dir, " failed (needs /dev/fuse and root or fusermount3; see stderr)"));
  }
  {
    absl::MutexLock lock(&m->mu_);
    m->session_ = se;
    m->loop_ = std::thread([raw = m.get(), se] { raw->RunLoop(se); });
  }
  // The first stat is served by the loop, which proves the mount answers; its device number
  // names the connection in /sys/fs/fuse/connections.
  if (stat(dir.c_str(), &st) == 0) {
    m->fuse_conn_id_ = minor(st.st_dev);
  } else {
    absl::Status s = absl::UnavailableError(
        absl::StrCat("mount of ", dir, " does not answer: ", strerror(errno)));
    m->Unmount().IgnoreError();
    return s;
  }
  return m;
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
  if (session_ != nullptr) {
    fuse_session_unmount(session_);  // closes the device; a no-op unmount when already gone
    fuse_session_destroy(session_);
    session_ = nullptr;
  }
  unmounted_ = true;
  return absl::OkStatus();
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
