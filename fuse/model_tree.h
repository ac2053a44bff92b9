// ModelTree: the read-only filesystem that modelfs serves, as plain C++ with no FUSE in it.
// Inodes, lookup counts, directory listings and reads live here; fuse/fuse_adapter.h only
// translates between libfuse requests and these calls (EdenFS's FuseDispatcher split), so
// tests drive the whole filesystem logic without mounting anything.
//
// A tree is either
//   - multi-model (`ModelTree(reader)` + AddModel): the root holds one directory per model,
//     named by the caller (the daemon uses "sha256-<hex of the ModelPack manifest>"), or
//   - single-model (`ModelTree::SingleModel`): the root directory IS the model (`modelfs mount`).
// Files are either extents of a layer blob (served through BlobReader, which returns only
// verified bytes) or synthetic files held in memory (`.modelinfo.json`, which may be made on
// first use: SyntheticFile::Lazy).
//
// Inode numbers are deterministic: the first 8 bytes of SHA-256 over the node's path from the
// root (masked to 63 bits, never 0 or 1), so two mounts of the same model, or a daemon restart,
// give the same numbers. A collision (astronomically unlikely) is detected and resolved by
// rehashing with a counter, which keeps numbers unique but makes them depend on insertion order.
//
// Thread safety: every method is safe to call concurrently. One absl::Mutex (`mu_`) guards
// the inode table. Lock order: `mu_` is a leaf lock; it is never held while calling the
// BlobReader (or anything else that may block or take locks), so a slow fetch never blocks
// lookups, getattrs or reads of other files. A lazy file's own lock is held while it is made
// (so it is made once) and is taken before `mu_`, never while holding it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/cache/blob_reader.h"
#include "core/model/tree_file.h"
#include "core/oci/digest.h"

namespace modelfs {

struct ModelOptions {
  int64_t mtime_sec = 0;  // mtime/ctime/atime of every node of the model (e.g. manifest time)
};

// File attributes as the kernel sees them. Directories are 0555, files 0444, owned by root.
struct NodeAttr {
  uint64_t ino = 0;
  uint32_t mode =
      0;  // S_IFDIR | 0555, S_IFREG | 0444 (0555: an image's executable) or S_IFLNK | 0777
  uint32_t nlink = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  uint64_t blocks = 0;  // 512-byte blocks
  uint32_t blksize = 4096;
  int64_t mtime_sec = 0;
  bool is_dir() const;
};

struct DirEntry {
  std::string name;  // "." and ".." come first
  uint64_t ino = 0;
  bool is_dir = false;
  uint64_t next_offset = 0;  // pass to ReadDir to continue after this entry
  bool is_symlink = false;
};

struct FsStats {
  uint64_t total_bytes = 0;  // sum of the sizes of all files (layer-backed and synthetic)
  uint64_t files = 0;        // number of inodes (files and directories)
  uint32_t block_size = 4096;
  uint32_t name_max = 255;
};

class ModelTree {
 public:
  static constexpr uint64_t kRootIno = 1;

  // An empty multi-model tree. `reader` is not owned and must outlive the tree.
  explicit ModelTree(BlobReader* reader);
  ~ModelTree();
  ModelTree(const ModelTree&) = delete;
  ModelTree& operator=(const ModelTree&) = delete;

  // A tree whose root directory is the model itself. Errors as for AddModel.
  static absl::StatusOr<std::unique_ptr<ModelTree>> SingleModel(BlobReader* reader,
                                                                std::vector<TreeFile> files,
                                                                SyntheticFiles synthetic = {},
                                                                ModelOptions options = {});

  // Adds directory `model_name` at the root holding `files` and `synthetic`. Nothing is added
  // on error. Errors: kPermissionDenied for a path that is absolute or contains "." or ".."
  // components; kInvalidArgument for an empty path or component, a NUL byte, a component over
  // 255 bytes, a duplicate path, a path that is both a file and a directory, an empty layer
  // digest or an extent that overflows; kAlreadyExists when the model is already present;
  // kFailedPrecondition on a single-model tree. Messages name the offending path.
  absl::Status AddModel(const std::string& model_name, std::vector<TreeFile> files,
                        SyntheticFiles synthetic = {}, ModelOptions options = {});

  // Detaches the model's directory from the root. Inodes the kernel still holds (lookup count
  // > 0) stay readable until forgotten, so open files keep working; lookups and listings
  // inside the removed model fail with kNotFound. Errors: kNotFound; kFailedPrecondition on a
  // single-model tree.
  absl::Status RemoveModel(const std::string& model_name);

  bool HasModel(const std::string& model_name) const;
  std::vector<std::string> Models() const;  // sorted

  // The attributes of entry `name` of directory `parent`, counting one kernel lookup of it
  // (undone by Forget); "." and ".." resolve to the directory and its parent. Errors: kNotFound (no
  // such entry, unknown or removed parent), kFailedPrecondition with errno ENOTDIR when `parent` is
  // a file.
  absl::StatusOr<NodeAttr> Lookup(uint64_t parent, const std::string& name);

  // Drops `nlookup` kernel lookups of `ino`; a removed node is freed when its count reaches 0.
  // Unknown inodes and the root are ignored (the kernel may forget after a model was removed).
  void Forget(uint64_t ino, uint64_t nlookup);

  // Errors: kNotFound for an unknown inode.
  absl::StatusOr<NodeAttr> GetAttr(uint64_t ino) const;

  // Whether Lookup(parent, name) would first make a lazy synthetic file (which reads layers
  // and may wait on the network); with an empty `name`, whether any entry of `parent` would
  // (a listing with attributes looks every entry up). For the FUSE layer, which keeps such
  // calls off the threads that must stay free.
  bool LookupWouldMake(uint64_t parent, const std::string& name) const;

  // Entries of directory `ino` from `offset` on ("." at offset 0, ".." at 1, children sorted by
  // name from 2). Errors: kNotFound; kFailedPrecondition (ENOTDIR) for a file.
  absl::StatusOr<std::vector<DirEntry>> ReadDir(uint64_t ino, uint64_t offset = 0) const;

  // Checks that `ino` may be opened with open(2) `flags`. Errors: kNotFound; kFailedPrecondition
  // (EISDIR) for a directory; kPermissionDenied (EROFS) for any write access.
  absl::Status Open(uint64_t ino, int flags) const;
  // The target of symbolic link `ino`, as the image wrote it (it is never followed here), once
  // its gate (TreeFile::gate) has passed: this may wait for it. Errors: kNotFound;
  // kInvalidArgument (EINVAL) for anything but a link; the gate's.
  absl::StatusOr<std::string> ReadLink(uint64_t ino) const;
  // Checks that `ino` is a directory that can be listed. Errors: kNotFound, kFailedPrecondition
  // (ENOTDIR).
  absl::Status OpenDir(uint64_t ino) const;

  // Up to `size` bytes of file `ino` at `offset` (fewer only at the end of the file; empty at or
  // past it). Layer-backed bytes come from BlobReader; its errors pass through with the file's
  // path and offset prepended (kDataLoss, kDeadlineExceeded, kUnavailable, kNotFound). A layer
  // shorter than the file's extent is kDataLoss. A file with a gate (TreeFile::gate) waits for
  // it first and fails with its error. Errors: kNotFound for an unknown inode,
  // kFailedPrecondition (EISDIR) for a directory.
  absl::StatusOr<std::string> Read(uint64_t ino, uint64_t offset, uint64_t size) const;
  // The same bytes as Read, as spans (BlobReader::ReadSpans), for zero-copy replies. Errors as
  // Read.
  absl::StatusOr<std::vector<BlobSpan>> ReadSpans(uint64_t ino, uint64_t offset,
                                                  uint64_t size) const;

  // Whether ReadSpans of the range would return without waiting on the network
  // (BlobReader::IsReady; always for synthetic files and for errors, which are fast; never
  // while the file's gate has not passed).
  bool IsReady(uint64_t ino, uint64_t offset, uint64_t size) const;

  // For FUSE passthrough: a read-only fd (the caller closes it) of a local file that holds
  // exactly file `ino`'s bytes, all verified and never written again
  // (BlobReader::OpenVerifiedBlob for a whole layer, OpenVerifiedFile for a tar member kept
  // in a file of its own), and a key naming that file (two inodes with equal keys share it).
  // fd -1 when there is none: a synthetic file, a member the reader keeps inside its layer,
  // a layer not yet fully verified, or a file whose gate has not passed.
  struct VerifiedFile {
    int fd = -1;
    std::string key;
  };
  VerifiedFile OpenVerifiedFile(uint64_t ino) const;

  FsStats StatFs() const;

  // The path of `ino` from the root ("" for the root), for messages. kNotFound when unknown.
  absl::StatusOr<std::string> PathOf(uint64_t ino) const;
  // The kernel lookup count of `ino` (0 when unknown); for tests and diagnostics.
  uint64_t LookupCount(uint64_t ino) const;

 private:
  struct Node;
  struct LazyBytes;

  explicit ModelTree(BlobReader* reader, bool single);
  // Makes the lazy synthetic file `ino` unless it is made already (see SyntheticFile), outside
  // mu_, and records its bytes and size. No-op for any other inode.
  void MakeLazyFile(uint64_t ino) const ABSL_LOCKS_EXCLUDED(mu_);

  // What a read needs of a file node, copied out under mu_.
  struct FileRef {
    bool synthetic = false;
    Digest layer;
    uint64_t layer_offset = 0;
    uint64_t size = 0;
    std::shared_ptr<const std::string> bytes;
    std::string path;
    std::shared_ptr<ServeGate> gate;
  };
  // With make_lazy false, a lazy synthetic file not made yet has bytes == nullptr.
  absl::StatusOr<FileRef> FileOf(uint64_t ino, const char* op, bool make_lazy = true) const;
  // A BlobReader error with the file's path and offsets prepended.
  static absl::Status ReadError(const FileRef& f, uint64_t offset, const absl::Status& got);

  // Builds the nodes of a model under `base` (the full path of the model directory, "" for
  // the root of a single-model tree) without touching the tree, then links them in.
  absl::Status AddModelLocked(const std::string& model_name, std::vector<TreeFile> files,
                              SyntheticFiles synthetic, const ModelOptions& options)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t AllocateInoLocked(const std::string& full_path) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  const Node* FindLocked(uint64_t ino) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  NodeAttr AttrLocked(const Node& node) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void DetachLocked(uint64_t ino) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  BlobReader* const reader_;
  const bool single_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Node>> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> models_ ABSL_GUARDED_BY(mu_);  // multi-model: name -> dir ino
  mutable uint64_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of attached files (lazy: once made)
  uint64_t attached_nodes_ ABSL_GUARDED_BY(mu_) = 1;       // root included
};

// The errno a Status stands for: the one place where filesystem errors become errno (used by
// the FUSE adapter). Statuses made by ErrnoStatus carry their errno in a payload; otherwise the
// canonical code decides: kNotFound -> ENOENT, kPermissionDenied -> EACCES, kInvalidArgument ->
// EINVAL, kAlreadyExists -> EEXIST, kUnimplemented -> ENOSYS, kResourceExhausted -> ENOMEM,
// kOutOfRange -> EINVAL, everything else (kDataLoss, kDeadlineExceeded, kUnavailable, ...) -> EIO.
int StatusToErrno(const absl::Status& status);

// A Status with `code` and `message` that StatusToErrno maps to `errno_value` (for errnos the
// canonical codes cannot express: ENOTDIR, EISDIR, EROFS, ENODATA).
absl::Status ErrnoStatus(absl::StatusCode code, int errno_value, const std::string& message);

}  // namespace modelfs
