// The libfuse3 low-level glue: request -> ModelTree call -> reply. Structure after libfuse's
// example/passthrough_hp.cc, without its process-global filesystem object.
#define FUSE_USE_VERSION 314

#include "fuse/fuse_ops.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/buffer_pool.h"
#include "core/base/log_event.h"
#include "fuse/kernel_protocol.h"

namespace modelfs {
namespace fuse_internal {
namespace {

Context& Ctx(fuse_req_t req) { return *static_cast<Context*>(fuse_req_userdata(req)); }

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

// For callbacks whose answer does not depend on the body: forget-style ones answer with
// fuse_reply_none, release-style ones with success.
template <typename F>
void GuardedThenReply(fuse_req_t req, const char* op, F&& body, bool none) {
  try {
    body();
  } catch (const std::exception& e) {
    LogError(op, e.what());
  } catch (...) {
    LogError(op, "unknown exception");
  }
  if (none) {
    fuse_reply_none(req);
  } else {
    fuse_reply_err(req, 0);
  }
}

template <typename F>
void GuardedNoReply(fuse_req_t req, const char* op, F&& body) {
  GuardedThenReply(req, op, std::forward<F>(body), /*none=*/true);
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
  Context& ctx = *static_cast<Context*>(userdata);
  // libfuse refuses INIT unless this repeats the max_read mount option.
  conn->max_read = ctx.max_read;
  if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
  // Read replies spliced from the cache file: one copy in the kernel instead of two via us.
  if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
  // Nothing ever changes under a file, so there is no reason to drop cached pages on getattr.
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
  ctx.initialized = true;
}

void DoLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guarded(req, "lookup", [&] {
    Context& ctx = Ctx(req);
    absl::StatusOr<NodeAttr> attr = ctx.tree->Lookup(parent, name);
    if (!attr.ok()) return ReplyStatus(req, "lookup", attr.status());
    fuse_entry_param e = ToEntry(ctx, *attr);
    // If the kernel did not take the reply (interrupted), it holds no reference to undo.
    if (fuse_reply_entry(req, &e) != 0) ctx.tree->Forget(attr->ino, 1);
  });
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Context& ctx = Ctx(req);
  // The first lookup of a lazy file (.modelinfo.json) reads layers: off the session's workers.
  if (ctx.reads && ctx.tree->LookupWouldMake(parent, name)) {
    ctx.reads->Submit([req, parent, n = std::string(name)] { DoLookup(req, parent, n.c_str()); });
    return;
  }
  DoLookup(req, parent, name);
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

void OpReadLink(fuse_req_t req, fuse_ino_t ino) {
  Guarded(req, "readlink", [&] {
    absl::StatusOr<std::string> target = Ctx(req).tree->ReadLink(ino);
    if (!target.ok()) return ReplyStatus(req, "readlink", target.status());
    fuse_reply_readlink(req, target->c_str());
  });
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guarded(req, "open", [&] {
    Context& ctx = Ctx(req);
    absl::Status s = ctx.tree->Open(ino, fi->flags);
    if (!s.ok()) return ReplyStatus(req, "open", s);
    ModelTree::VerifiedFile verified;
    if (ctx.files->passthrough()) verified = ctx.tree->OpenVerifiedFile(ino);
    const OpenFiles::Decision d = ctx.files->Open(ino, verified.fd, verified.key);
    if (verified.fd >= 0) close(verified.fd);  // the kernel holds its own reference
    int rc;
    if (d.mode == OpenFiles::Mode::kPassthrough) {
      rc = ReplyOpenPassthrough(req, d.fh, d.backing_id);  // libfuse's cannot carry its id
    } else {
      // Files never change: what a mapping cached stays across opens (and is shared between
      // pods). read() is direct_io where the kernel still allows mmap (FUSE_DIRECT_IO_ALLOW_MMAP):
      // the bytes go from the cache file to the reader's buffer, and the node does not keep a
      // second copy of the weights in this file's page cache beside the cache file's.
      fi->keep_cache = 1;
      fi->direct_io = ctx.direct_io ? 1 : 0;
      fi->fh = d.fh;
      rc = fuse_reply_open(req, fi);
    }
    // Not taken (the opener was interrupted): the kernel will send no release for it.
    if (rc != 0) {
      ctx.files->Release(d.fh);
    } else if (ctx.on_open) {
      ctx.on_open(d.mode == OpenFiles::Mode::kPassthrough);
    }
  });
}

// Verified bytes go to the kernel as spans: spliced from the cache file, not copied through
// a buffer of ours.
// Replies with the bytes of `spans`. Spans of cache files are spliced from the page cache by
// libfuse (fuse_reply_data): one copy, into the kernel's request. That needs a pipe that holds
// the whole reply, which is why max_read is 252 pages (FuseMountOptions); past what the pipe
// holds libfuse copies through a fresh buffer instead. Replies with memory spans (chunks a
// full disk left in memory) are gathered into one pooled buffer and sent in one writev.
void ReplySpans(fuse_req_t req, const std::vector<BlobSpan>& spans) {
  if (spans.empty()) return fuse_reply_buf(req, nullptr, 0), void();
  if (std::all_of(spans.begin(), spans.end(), [](const BlobSpan& s) { return s.fd >= 0; })) {
    std::vector<char> raw(sizeof(fuse_bufvec) + (spans.size() - 1) * sizeof(fuse_buf));
    auto* vec = reinterpret_cast<fuse_bufvec*>(raw.data());
    vec->count = spans.size();
    for (size_t i = 0; i < spans.size(); ++i) {
      fuse_buf& b = vec->buf[i];
      b.size = spans[i].length;
      b.flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
      b.fd = spans[i].fd;
      b.pos = static_cast<off_t>(spans[i].offset);
    }
    fuse_reply_data(req, vec, FUSE_BUF_SPLICE_MOVE);
    return;
  }
  uint64_t from_files = 0;
  for (const BlobSpan& s : spans) {
    if (s.fd >= 0) from_files += s.length;
  }
  BufferPool::Buffer buffer;
  if (from_files > 0) buffer = BufferPool::Shared().Get(from_files);
  std::vector<iovec> iov(spans.size());
  char* at = buffer.data();
  for (size_t i = 0; i < spans.size(); ++i) {
    const BlobSpan& s = spans[i];
    if (s.fd < 0) {
      iov[i] = {const_cast<char*>(s.memory->data() + s.offset), s.length};
      continue;
    }
    uint64_t done = 0;
    while (done < s.length) {
      const ssize_t n =
          pread(s.fd, at + done, s.length - done, static_cast<off_t>(s.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // A verified cache file shrank or failed under us: say EIO rather than send less.
        return fuse_reply_err(req, EIO), void();
      }
      done += static_cast<uint64_t>(n);
    }
    iov[i] = {at, s.length};
    at += s.length;
  }
  fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
}

void DoRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off) {
  Guarded(req, "read", [&] {
    const Context& ctx = Ctx(req);
    absl::Time start = ctx.on_read ? ctx.clock->Now() : absl::InfinitePast();
    absl::StatusOr<std::vector<BlobSpan>> spans =
        ctx.tree->ReadSpans(ino, static_cast<uint64_t>(off), static_cast<uint64_t>(size));
    if (ctx.on_read) ctx.on_read(ctx.clock->Now() - start, spans.ok());
    if (!spans.ok()) return ReplyStatus(req, "read", spans.status());
    ReplySpans(req, *spans);
  });
}

void OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* /*fi*/) {
  if (off < 0) return fuse_reply_err(req, EINVAL), void();
  Context& ctx = Ctx(req);
  if (ctx.reads && !ctx.tree->IsReady(ino, static_cast<uint64_t>(off), size)) {
    ctx.reads->Submit([req, ino, size, off] { DoRead(req, ino, size, off); });
    return;
  }
  DoRead(req, ino, size, off);
}

void OpRelease(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  GuardedThenReply(
      req, "release", [&] { Ctx(req).files->Release(fi->fh); }, /*none=*/false);
}

void OpOpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guarded(req, "opendir", [&] {
    Context& ctx = Ctx(req);
    absl::StatusOr<std::vector<DirEntry>> entries = ctx.tree->ReadDir(ino, 0);
    if (!entries.ok()) return ReplyStatus(req, "opendir", entries.status());
    auto handle = std::make_shared<DirHandle>();
    handle->entries = std::move(*entries);
    uint64_t id;
    {
      // Registered before the reply: the kernel may send readdir on another thread at once.
      absl::MutexLock lock(&ctx.dirs_mu);
      id = ctx.next_dir_id++;
      ctx.dirs[id] = std::move(handle);
    }
    fi->fh = id;
    fi->keep_cache = 1;
    if (fuse_reply_open(req, fi) != 0) {  // no releasedir will come
      absl::MutexLock lock(&ctx.dirs_mu);
      ctx.dirs.erase(id);
    }
  });
}

void OpReleaseDir(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  Context& ctx = Ctx(req);
  {
    absl::MutexLock lock(&ctx.dirs_mu);
    ctx.dirs.erase(fi->fh);  // unknown when opened by a previous process: nothing to free
  }
  fuse_reply_err(req, 0);
}

// The listing behind a directory handle. A handle we do not know was opened by a previous
// process of the daemon, before a restart; a fresh listing stands in for its snapshot (same
// offsets, as long as the directory did not change meanwhile).
absl::StatusOr<std::shared_ptr<const DirHandle>> FindDir(Context& ctx, fuse_ino_t ino,
                                                         uint64_t fh) {
  {
    absl::MutexLock lock(&ctx.dirs_mu);
    auto it = ctx.dirs.find(fh);
    if (it != ctx.dirs.end()) return it->second;
  }
  absl::StatusOr<std::vector<DirEntry>> entries = ctx.tree->ReadDir(ino, 0);
  if (!entries.ok()) return entries.status();
  auto handle = std::make_shared<DirHandle>();
  handle->entries = std::move(*entries);
  return handle;
}

void DoReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi,
               bool plus) {
  const char* op = plus ? "readdirplus" : "readdir";
  Guarded(req, op, [&] {
    Context& ctx = Ctx(req);
    absl::StatusOr<std::shared_ptr<const DirHandle>> handle = FindDir(ctx, ino, fi->fh);
    if (!handle.ok()) return ReplyStatus(req, op, handle.status());
    std::string buf(size, '\0');
    size_t used = 0;
    for (const DirEntry& entry : (*handle)->entries) {
      if (entry.next_offset <= static_cast<uint64_t>(off)) continue;
      size_t room = size - used;
      size_t need = 0;
      if (!plus) {
        struct stat st;
        memset(&st, 0, sizeof(st));
        st.st_ino = entry.ino;
        st.st_mode = entry.is_dir ? S_IFDIR : entry.is_symlink ? S_IFLNK : S_IFREG;
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
  Context& ctx = Ctx(req);
  if (ctx.reads && ctx.tree->LookupWouldMake(ino, "")) {
    ctx.reads->Submit([req, ino, size, off, copy = *fi]() mutable {
      DoReadDir(req, ino, size, off, &copy, /*plus=*/true);
    });
    return;
  }
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
  ops.readlink = OpReadLink;
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

}  // namespace

void LogError(const char* op, const char* message) {
  log::WriteToStderr(log::Error("fuse", message).Field("op", op));
}

std::string MountOptionString(const FuseMountOptions& o) {
  std::vector<std::string> opts = {"ro", "nosuid", "nodev", "default_permissions"};
  if (o.allow_other) opts.push_back("allow_other");
  opts.push_back(absl::StrCat("max_read=", o.max_read));
  opts.push_back(absl::StrCat("fsname=", o.fsname));
  opts.push_back(absl::StrCat("subtype=", o.subtype));
  return absl::StrJoin(opts, ",");
}

// Mount and Adopt must build identical sessions: the adopted connection was negotiated with
// these options (max_read above all, which libfuse checks again at INIT).
fuse_session* NewSession(const FuseMountOptions& options, Context* ctx) {
  std::vector<std::string> argv_s = {"modelfs", "-o", MountOptionString(options)};
  if (options.debug) argv_s.push_back("-d");
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  static const fuse_lowlevel_ops kOps = MakeOps();
  fuse_session* se = fuse_session_new(&args, &kOps, sizeof(kOps), ctx);
  fuse_opt_free_args(&args);
  return se;
}

}  // namespace fuse_internal
}  // namespace modelfs
