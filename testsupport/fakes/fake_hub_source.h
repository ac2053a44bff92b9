// FakeHubSource: an in-memory HubSource for fetch unit tests, answering as the Hub does
// (listing with sizes, LFS SHA-256 and git blob ids; identity stated before the bytes), with
// knobs to make it lie: tampered bytes, a wrong X-Repo-Commit, a listing edited after the
// fact, transient failures, and branches that move on every revision call.
//
// Thread safety: one test thread.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/hub/git_blob.h"
#include "core/hub/hub_source.h"
#include "core/oci/digest.h"
#include "core/status/status_macros.h"

namespace modelfs::testing {

class FakeHubSource : public HubSource {
 public:
  struct Repo {
    std::map<std::string, std::map<std::string, std::string>> commits;  // commit -> path -> bytes
    std::map<std::string, std::vector<std::string>> refs;  // each GetRevision moves to the next
    bool gated = false;
  };

  std::map<std::string, Repo> repos;
  uint64_t lfs_threshold = 256;          // files of at least this size are LFS
  std::string token;                     // the token this client "has"
  std::string accepted_token = "hf_ok";  // what a gated repository accepts
  std::map<std::string, size_t> tamper;  // path -> offset whose byte is flipped when served
  std::map<std::string, std::string> stated_commit;  // path -> X-Repo-Commit to state instead
  std::map<std::string, std::string> stated_etag;    // path -> etag to state instead
  std::function<void(HubRevision&)> edit_listing;
  int fail_downloads = 0;  // the next N downloads fail with kUnavailable after some bytes
  std::vector<std::string> downloads;  // paths, in the order they were asked for
  std::map<std::string, int> revision_calls;

  const std::string& endpoint() const override { return endpoint_; }

  absl::StatusOr<HubRevision> GetRevision(const std::string& repo,
                                          const std::string& revision) override {
    auto it = repos.find(repo);
    if (it == repos.end()) return absl::NotFoundError(absl::StrCat(repo, ": no such repository"));
    std::string commit = Resolve(it->second, revision, /*advance=*/true);
    if (commit.empty()) {
      return absl::NotFoundError(absl::StrCat(repo, "@", revision, ": no such revision"));
    }
    HubRevision r;
    r.repo = repo;
    r.commit = commit;
    for (const auto& [path, bytes] : it->second.commits.at(commit)) {
      HubFile f;
      f.path = path;
      f.size = bytes.size();
      if (bytes.size() >= lfs_threshold) {
        f.lfs = HubLfsInfo{std::string(Digest::Of(bytes).hex()), bytes.size()};
        f.blob_id = GitBlobSha1Hex("pointer " + path);
      } else {
        f.blob_id = GitBlobSha1Hex(bytes);
      }
      r.files.push_back(std::move(f));
    }
    if (edit_listing) edit_listing(r);
    return r;
  }

  absl::Status Download(const std::string& repo, const std::string& commit, const std::string& path,
                        const HubIdentityFn& on_identity, const HubSinkFn& sink) override {
    downloads.push_back(path);
    auto it = repos.find(repo);
    if (it == repos.end()) return absl::NotFoundError("no such repository");
    if (it->second.gated && token != accepted_token) {
      return absl::PermissionDeniedError(absl::StrCat(repo, ": HTTP 401 GatedRepo; set HF_TOKEN"));
    }
    auto c = it->second.commits.find(commit);
    if (c == it->second.commits.end()) return absl::NotFoundError("no such revision");
    auto f = c->second.find(path);
    if (f == c->second.end()) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    std::string bytes = f->second;
    const bool lfs = bytes.size() >= lfs_threshold;
    HubFileIdentity id;
    id.commit = stated_commit.count(path) ? stated_commit[path] : commit;
    id.etag = lfs ? std::string(Digest::Of(bytes).hex()) : GitBlobSha1Hex(bytes);
    if (stated_etag.count(path)) id.etag = stated_etag[path];
    id.size = bytes.size();
    id.redirected = lfs;
    RETURN_IF_ERROR(on_identity(id));
    if (auto t = tamper.find(path); t != tamper.end() && t->second < bytes.size()) {
      bytes[t->second] = static_cast<char>(bytes[t->second] ^ 0xff);
    }
    const size_t half = bytes.size() / 2;
    RETURN_IF_ERROR(sink(std::string_view(bytes).substr(0, half)));
    if (fail_downloads > 0) {
      --fail_downloads;
      return absl::UnavailableError(absl::StrCat(path, ": connection reset"));
    }
    return sink(std::string_view(bytes).substr(half));
  }

 private:
  static std::string Resolve(Repo& r, const std::string& rev, bool advance) {
    if (r.commits.count(rev)) return rev;
    auto it = r.refs.find(rev);
    if (it == r.refs.end() || it->second.empty()) return "";
    std::string c = it->second.front();
    if (advance && it->second.size() > 1) it->second.erase(it->second.begin());
    return c;
  }
  std::string endpoint_ = "https://hub.example";
};

}  // namespace modelfs::testing
