// The libfuse3 low-level glue: request -> ModelTree call -> reply. Structure after libfuse's
// example/passthrough_hp.cc, without its process-global filesystem object.
#define FUSE_USE_VERSION 314

#include "fuse/fuse_adapter.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>  // the kernel protocol: Adopt speaks it directly
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/buffer_pool.h"
#include "fuse/passthrough.h"
#include "fuse/read_pool.h"

namespace modelfs {
namespace {

// A snapshot of a directory listing taken at opendir, so that paging through it with offsets
// is stable even if models are added or removed meanwhile.
struct DirHandle {
  std::vector<DirEntry> entries;
};

}  // namespace

struct FuseMount::Context {
  std::shared_ptr<ModelTree> tree;
  double entry_timeout = 0;
  double attr_timeout = 0;
  uint32_t max_read = 0;
  std::function<void(absl::Duration, bool)> on_read;
  std::atomic<bool> initialized{false};  // libfuse called init (FUSE_INIT, real or synthetic)
  // Open files and their I/O mode; set before the loop serves.
  std::unique_ptr<OpenFiles> files;
  // Opens not served by passthrough are direct_io (FuseMountOptions::direct_io_reads, and the
  // kernel allows shared mmap of such files); set before the loop serves.
  bool direct_io = false;
  fuse_session* session = nullptr;  // for notifications from request handlers
  std::unique_ptr<ReadPool> reads;  // reads that wait on the network

  // Open directories by the handle the kernel holds. Handles are ids, not pointers, because the
  // kernel keeps a directory open across a daemon restart and then hands the new process a
  // handle the old one made: an id can be looked up and found missing, a stale pointer cannot.
  // Ids start at a random number so that the old process's ids are (almost surely) not ours.
  absl::Mutex dirs_mu;
  absl::flat_hash_map<uint64_t, std::shared_ptr<const DirHandle>> dirs ABSL_GUARDED_BY(dirs_mu);
  uint64_t next_dir_id ABSL_GUARDED_BY(dirs_mu) = std::random_device{}() * 0x100000000ull;
};

namespace {

using Context = FuseMount::Context;

// Linux /dev/fuse is character device 10:229.
constexpr unsigned kFuseDevMajor = 10;
constexpr unsigned kFuseDevMinor = 229;
constexpr long kFuseSuperMagic = 0x65735546;

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
      // fuse_reply_open of libfuse 3.14 cannot carry a backing id: the reply is built here.
      FuseOpenOut out;
      memset(&out, 0, sizeof(out));
      out.fh = d.fh;
      out.open_flags = kFopenPassthrough;
      out.backing_id = d.backing_id;
      rc = fuse_reply_buf(req, reinterpret_cast<const char*>(&out), sizeof(out));
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
    if (rc != 0) ctx.files->Release(d.fh);
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
    absl::Time start = ctx.on_read ? absl::Now() : absl::InfinitePast();
    absl::StatusOr<std::vector<BlobSpan>> spans =
        ctx.tree->ReadSpans(ino, static_cast<uint64_t>(off), static_cast<uint64_t>(size));
    if (ctx.on_read) ctx.on_read(absl::Now() - start, spans.ok());
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

// An id the kernel never gives a request of its own: it counts up from 2 in steps of 2, and
// uses bit 0 for interrupts and bit 63 for resent requests. A reply to it is refused (ENOENT),
// which libfuse ignores silently.
constexpr uint64_t kSyntheticInitUnique = uint64_t{1} << 62;

// The kernel sends FUSE_INIT once per connection, to the process that mounted; libfuse answers
// every request with EIO until it has seen one (its session's got_init). So Adopt feeds it an
// INIT the kernel never sent, which sets up what libfuse derives from INIT the way the real one
// did at mount time:
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

// The kernel's FUSE_INIT, answered here rather than by libfuse, because libfuse 3.14 can
// neither ask for passthrough (a flags2 bit it does not know, and max_stack_depth) nor raise
// max_background past what its options allow. Layouts as of protocol 7.40. Returns the flags
// the connection now has. libfuse then gets the synthetic INIT (InjectSyntheticInit), exactly
// as when adopting a connection.
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

absl::StatusOr<uint64_t> AnswerKernelInit(int fd, const FuseMountOptions& o,
                                          const std::string& dir) {
  // The kernel queued INIT while mounting; never wait for ever all the same.
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
  if (o.passthrough) want |= kFuseInitPassthrough;
  if (o.direct_io_reads) want |= kFuseInitDirectIoAllowMmap;
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
  reply.init.max_background = o.max_background;
  reply.init.congestion_threshold = static_cast<uint16_t>(o.max_background * 3 / 4);
  reply.init.max_write = 1 << 20;  // libfuse's buffer: FUSE_MAX_MAX_PAGES pages
  reply.init.time_gran = 1;
  reply.init.max_pages = static_cast<uint16_t>(std::max<uint32_t>(1, o.max_read / 4096));
  // A backing file may sit on a plain file system only; overlayfs (a pod's view) may then
  // still stack on this mount (depth 2, the kernel's limit).
  if (flags & kFuseInitPassthrough) reply.init.max_stack_depth = 1;
  if (write(fd, &reply, sizeof(reply)) != static_cast<ssize_t>(sizeof(reply))) {
    return absl::UnavailableError(
        absl::StrCat("mount of ", dir, ": answering FUSE_INIT: ", strerror(errno)));
  }
  return flags;
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

// FUSE_NOTIFY_RESEND (protocol 7.40, Linux 6.9): the kernel puts every request that was read
// from the device but not answered back in the queue. Those are the requests a crashed
// process had taken; without this their callers would wait forever. libfuse 3.14 predates it,
// so the notification (unique 0, the code in `error`) is written here. Returns 0 or an errno.
int RequestResend(int fd) {
  constexpr int32_t kFuseNotifyResend = 7;
  fuse_out_header header;
  memset(&header, 0, sizeof(header));
  header.len = sizeof(header);
  header.error = kFuseNotifyResend;
  return write(fd, &header, sizeof(header)) < 0 ? errno : 0;
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

FuseMount::FuseMount(std::string dir, std::shared_ptr<ModelTree> tree,
                     const FuseMountOptions& options)
    : dir_(std::move(dir)), tree_(std::move(tree)), options_(options) {
  ctx_ = std::make_unique<Context>();
  ctx_->tree = tree_;
  ctx_->entry_timeout = options_.entry_timeout_s;
  ctx_->attr_timeout = options_.attr_timeout_s;
  ctx_->max_read = options_.max_read;
  ctx_->on_read = options_.on_read;
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
  absl::StatusOr<uint64_t> flags = AnswerKernelInit(fuse_session_fd(se), options, dir);
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

absl::StatusOr<std::unique_ptr<FuseMount>> FuseMount::Adopt(int fuse_fd, const std::string& dir,
                                                            std::shared_ptr<ModelTree> tree,
                                                            const FuseMountOptions& options) {
  if (tree == nullptr) return absl::InvalidArgumentError("adopting " + dir + ": no tree");
  struct stat st;
  if (fstat(fuse_fd, &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("adopting ", dir, ": fd ", fuse_fd, ": ", strerror(errno)));
  }
  if (!S_ISCHR(st.st_mode) || st.st_rdev != makedev(kFuseDevMajor, kFuseDevMinor)) {
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

absl::Status FuseMount::Detach() {
  absl::MutexLock lock(&mu_);
  if (unmounted_) return absl::OkStatus();
  if (!loop_done_.HasBeenNotified()) {
    // libfuse 3.14's loop thread waits in sem_wait() for a worker to finish, and the workers
    // block in read(2) on the device; only unmounting or a signal ends that. So: flag the
    // session as exiting and interrupt sem_wait with a signal until the loop notices. It then
    // cancels its workers and returns. (A signal sent just before sem_wait is lost, hence the
    // repeats.)
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
