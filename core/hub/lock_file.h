// modelfs.lock.json: what `modelfs fetch` downloaded, pinned. It names the repository, the
// commit, and each file's path, size and SHA-256, so that `fetch --lock` can fetch exactly the
// same bytes again, `verify` can check a directory offline, and `push` can record the origin
// and refuse bytes that are not the ones fetched.
//
//   {
//     "version": 1,
//     "endpoint": "https://huggingface.co",
//     "repo": "HuggingFaceTB/SmolLM2-135M-Instruct",
//     "revision": "main",                        // as asked; "commit" is what counts
//     "commit": "12fd25f77366fa6b3b4b768ec3050bf629380bac",
//     "files": [
//       {"path": "config.json", "size": 861, "sha256": "<64 hex>", "lfs": false,
//        "gitBlobSha1": "<40 hex>"},
//       {"path": "model.safetensors", "size": 269060552, "sha256": "<64 hex>", "lfs": true}
//     ]
//   }
//
// Files are sorted by path. The file is UTF-8 JSON, pretty-printed, ending in a newline.
//
// Thread safety: plain values and functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace modelfs {

inline constexpr std::string_view kLockFileName = "modelfs.lock.json";
inline constexpr int kLockFileVersion = 1;

struct LockedFile {
  std::string path;
  uint64_t size = 0;
  std::string sha256;         // 64 lowercase hex digits
  bool lfs = false;           // stored in LFS on the Hub (verified by its SHA-256)
  std::string git_blob_sha1;  // small files: the git blob id the Hub verified it by
  friend bool operator==(const LockedFile&, const LockedFile&) = default;
};

struct LockFile {
  int version = kLockFileVersion;
  std::string endpoint;
  std::string repo;
  std::string revision;
  std::string commit;
  std::vector<LockedFile> files;  // sorted by path, no duplicates
  friend bool operator==(const LockFile&, const LockFile&) = default;

  const LockedFile* Find(std::string_view path) const;
  // "<endpoint>/<repo>", the ModelPack descriptor.sourceURL.
  std::string SourceUrl() const;
};

// Errors: kInvalidArgument naming `where` and the field ("modelfs.lock.json: files[2].sha256:
// ..."): not JSON, an unknown version, a repo id or commit of the wrong shape, a size that is
// not a non-negative integer, a SHA-256 that is not 64 hex digits, duplicate paths;
// kPermissionDenied for a path that CheckRelativePath refuses.
absl::StatusOr<LockFile> ParseLockFile(std::string_view bytes, std::string_view where);
absl::StatusOr<LockFile> ReadLockFile(const std::string& path);
std::string SerializeLockFile(const LockFile& lock);

// One file's state against the lock.
struct LockCheck {
  enum class State { kOk, kMissing, kNotRegular, kSizeMismatch, kDigestMismatch };
  std::string path;
  State state = State::kOk;
  uint64_t size = 0;   // found on disk
  std::string sha256;  // found on disk (kOk, kDigestMismatch)
  std::string expected_sha256;
  uint64_t expected_size = 0;
};
std::string_view LockCheckStateName(LockCheck::State s);  // "ok", "missing", ...

struct VerifyReport {
  LockFile lock;
  std::vector<LockCheck> files;    // one per locked file, in lock order
  std::vector<std::string> extra;  // regular files under the directory that the lock lacks
  uint64_t bytes = 0;              // bytes hashed
  bool ok() const;
};

// Checks every file the lock names under `dir` (never following a symlink: a link is
// kNotRegular), hashing each one, and lists files the lock does not name (the lock itself
// excepted). Errors: the lock's parse errors, kNotFound when dir has no lock file.
absl::StatusOr<VerifyReport> VerifyDirectory(const std::string& dir);

// Checks one file against a locked entry (size first, so a wrong size costs no hashing).
LockCheck CheckLockedFile(const std::string& dir, const LockedFile& want);

}  // namespace modelfs
