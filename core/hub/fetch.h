// `modelfs fetch`: a Hugging Face repository at one commit, downloaded, verified and pinned.
//
//  1. The revision is resolved through the Hub API to a full commit hash. A branch or tag
//     name is refused unless `resolve` is set; every file is then fetched by that commit, so a
//     branch that moves meanwhile changes nothing.
//  2. The file list (sizes, LFS SHA-256, git blob ids) picks what to download: the named files,
//     else the include globs, else the defaults (file_selection.h); minus the exclude globs;
//     never a pickle checkpoint unless `allow_pickle`. Every path must pass CheckRelativePath.
//  3. config.json is fetched first: a repository whose config.json has "auto_map" (code that
//     transformers would run) is refused unless `allow_remote_code`.
//  4. Each file's identity comes from the Hub's own answer (X-Repo-Commit, X-Linked-Etag,
//     X-Linked-Size) and must agree with the listing before any byte is read; the bytes are
//     then hashed while they stream (SHA-256, and the git blob SHA-1 of small files).
//  5. Every safetensors and GGUF header is validated.
//  6. DIR/modelfs.lock.json is written (lock_file.h).
// Everything is staged in a directory next to DIR and moved into DIR only when all of it
// verified, so a failure leaves DIR as it was (and creates no DIR).
//
// Thread safety: FetchModel uses the HubSource it is given from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/hub/hub_source.h"
#include "core/hub/lock_file.h"
#include "nlohmann/json.hpp"

namespace modelfs {

// Bytes of one file so far; called often while a file streams, and once with done == total.
using FetchProgressFn = std::function<void(const std::string& path, uint64_t done, uint64_t total)>;

struct FetchOptions {
  std::string repo;
  std::string revision;
  std::vector<std::string> files;  // explicit paths; each must exist
  std::vector<std::string> include;
  std::vector<std::string> exclude;
  bool resolve = false;
  bool allow_pickle = false;
  bool allow_remote_code = false;
  std::string dest;
  // `fetch --lock`: exactly these files at this commit (repo and revision then come from it).
  std::optional<LockFile> lock;
  FetchProgressFn progress;
  int attempts = 3;  // per file, on kUnavailable
};

struct FetchedFile {
  std::string path;
  uint64_t size = 0;
  std::string sha256;
  bool lfs = false;
  std::string git_blob_sha1;
  std::string verified_by;  // "sha256 (X-Linked-Etag, lfs.sha256)", "git blob sha1 (ETag, blobId)"
};

struct FetchResult {
  std::string repo;
  std::string revision;  // as asked
  std::string commit;
  bool resolved = false;  // the revision was a branch or tag name
  std::vector<FetchedFile> files;
  std::vector<std::string> skipped_pickle;  // matched a glob but are pickle checkpoints
  std::vector<std::string> notes;
  uint64_t bytes = 0;
  std::string dest;
  std::string lock_path;
};

// Errors (each names the repository, the commit, the file):
//   kInvalidArgument: a bad repository id, a branch/tag name without `resolve` (the message
//     names the commit it points at), nothing selected, a malformed safetensors/GGUF header or
//     config.json, DEST that is not a directory;
//   kNotFound: a missing repository, revision or named file;
//   kPermissionDenied: a gated or private repository without a (valid) token, naming HF_TOKEN;
//     a refused path; a named pickle file without `allow_pickle`; auto_map without
//     `allow_remote_code`;
//   kDataLoss: bytes, sizes or identities that disagree (listing, headers, lock, content);
//   kUnavailable: the network, after `attempts` tries.
absl::StatusOr<FetchResult> FetchModel(HubSource& hub, const FetchOptions& options);

nlohmann::json FetchResultToJson(const FetchResult& r);

}  // namespace modelfs
