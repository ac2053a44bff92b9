// HubSource: what `modelfs fetch` needs from a Hugging Face Hub (or a mirror that speaks its
// API): a revision's file list, and a file's bytes at a commit together with the identity the
// Hub itself states for them. The HTTP implementation is http_hub_client.h; tests use an
// in-memory fake (testsupport/fakes/fake_hub_source.h).
//
// The Hub's answers are untrusted input: a path may try to escape the destination, a listing
// may disagree with the headers, a CDN may serve other bytes. Implementations report what the
// Hub said; fetch.h decides whether it is consistent.
//
// Thread safety: implementations need not be safe for concurrent use.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace modelfs {

// "lfs" of a sibling in GET /api/models/{repo}/revision/{rev}?blobs=true.
struct HubLfsInfo {
  std::string sha256;  // lowercase hex of the file's bytes
  uint64_t size = 0;
};

// One entry of "siblings".
struct HubFile {
  std::string path;               // "rfilename", relative to the repository root
  std::optional<uint64_t> size;   // "size" (blobs=true)
  std::string blob_id;            // "blobId": the git blob SHA-1 (of the pointer for LFS files)
  std::optional<HubLfsInfo> lfs;  // present for files stored in LFS
};

struct HubRevision {
  std::string repo;    // "id" as the Hub spells it (may differ in case from the request)
  std::string commit;  // "sha": the full commit hash the revision resolved to
  std::string gated;   // "gated": "" (false), "auto" or "manual"
  bool is_private = false;
  std::vector<HubFile> files;
};

// What the Hub's own response to GET /{repo}/resolve/{commit}/{path} says about the file,
// before any byte of it is read. For an LFS file that response is a redirect to a CDN whose
// answer carries none of this, so it is never learnt from the CDN.
struct HubFileIdentity {
  std::string commit;            // X-Repo-Commit
  std::string etag;              // X-Linked-Etag, else ETag; quotes and a W/ prefix removed
  std::optional<uint64_t> size;  // X-Linked-Size, else Content-Length of a direct answer
  bool redirected = false;       // the bytes come from another origin (an LFS file)
  std::string location;          // where the bytes come from, query removed (for messages)
};

// Receives the identity once, before the first body byte; an error stops the transfer.
using HubIdentityFn = std::function<absl::Status(const HubFileIdentity&)>;
// Receives the body in order; an error stops the transfer.
using HubSinkFn = std::function<absl::Status(std::string_view)>;

class HubSource {
 public:
  virtual ~HubSource() = default;

  // The Hub's base URL ("https://huggingface.co"), for the lock file and sourceURL.
  virtual const std::string& endpoint() const = 0;

  // GET /api/models/{repo}/revision/{revision}?blobs=true.
  // Errors: kNotFound for a repository or revision the Hub does not have (404); kPermissionDenied
  // for a gated or private repository (401/403), naming HF_TOKEN; kUnavailable for transport
  // failures and 5xx/429; kInvalidArgument for an answer that is not the documented JSON.
  virtual absl::StatusOr<HubRevision> GetRevision(const std::string& repo,
                                                  const std::string& revision) = 0;

  // Streams `path` at `commit`: `on_identity` first, then the bytes to `sink`. One attempt; the
  // caller retries (restarting its hashes) on kUnavailable. Errors as GetRevision, plus the
  // callbacks' own errors.
  virtual absl::Status Download(const std::string& repo, const std::string& commit,
                                const std::string& path, const HubIdentityFn& on_identity,
                                const HubSinkFn& sink) = 0;
};

// True for a full commit hash: 40 hex digits.
bool IsFullCommitHash(std::string_view revision);

// OK for "name" or "namespace/name" made of [A-Za-z0-9._-], neither part empty, starting with
// "." or "-", holding "..", nor longer than 96 characters. Errors: kInvalidArgument.
absl::Status CheckRepoId(std::string_view repo);

}  // namespace modelfs
