#include "core/hub/fetch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/backoff.h"
#include "core/formats/model_inspect.h"
#include "core/hub/file_selection.h"
#include "core/hub/git_blob.h"
#include "core/io/staged_dest.h"
#include "core/oci/digest.h"
#include "core/oci/path_safety.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool IsHex(std::string_view s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// What a file's bytes must hash to, gathered from the listing, the lock and the Hub's answer.
struct Expectation {
  std::optional<uint64_t> size;  // from the file list, else from the Hub's answer
  std::string sha256;            // lowercase hex, or ""
  std::string sha1;              // git blob id, or ""
  std::vector<std::string> sha256_from, sha1_from;
};

absl::Status Expect(std::string& slot, std::vector<std::string>& from, const std::string& value,
                    const std::string& source, const std::string& what, const char* kind) {
  if (slot.empty()) {
    slot = value;
  } else if (slot != value) {
    return absl::DataLossError(absl::StrCat(what, ": ", source, " states ", kind, " ", value,
                                            " but ", absl::StrJoin(from, " and "), " states ",
                                            slot));
  }
  from.push_back(source);
  return absl::OkStatus();
}

// Streams one file into `out` (created or truncated) while hashing it, and checks it.
class FileDownload {
 public:
  FileDownload(HubSource& hub, const std::string& repo, const std::string& commit,
               const HubFile& file, const LockedFile* locked, const FetchOptions& o)
      : hub_(hub),
        repo_(repo),
        commit_(commit),
        file_(file),
        locked_(locked),
        o_(o),
        what_(absl::StrCat(repo, "@", commit, ": ", file.path)) {}

  absl::StatusOr<FetchedFile> Run(const std::string& out) {
    RETURN_IF_ERROR(PlanExpectation());
    BackoffPolicy policy;
    policy.max_attempts = std::max(1, o_.attempts);
    policy.initial_backoff = absl::Milliseconds(100);
    Backoff backoff(policy, Clock::Real(), absl::InfiniteFuture());
    for (;;) {
      absl::Status st = Attempt(out);
      if (st.ok()) break;
      if (!RetryableCode(st.code()) || !backoff.Wait()) return st;
    }
    FetchedFile f;
    f.path = file_.path;
    f.size = done_;
    f.sha256 = sha256_;
    f.lfs = file_.lfs.has_value();
    if (!want_.sha1.empty()) f.git_blob_sha1 = sha1_;
    std::vector<std::string> by;
    if (!want_.sha256.empty()) {
      by.push_back(absl::StrCat("sha256 (", absl::StrJoin(want_.sha256_from, ", "), ")"));
    }
    if (!want_.sha1.empty()) {
      by.push_back(absl::StrCat("git blob sha1 (", absl::StrJoin(want_.sha1_from, ", "), ")"));
    }
    f.verified_by = absl::StrJoin(by, "; ");
    return f;
  }

 private:
  absl::Status PlanExpectation() {
    want_.size = file_.size;
    if (file_.lfs.has_value()) {
      if (want_.size.has_value() && file_.lfs->size != *want_.size) {
        return absl::DataLossError(absl::StrCat(what_, ": the file list says ", *want_.size,
                                                " bytes but its lfs.size says ", file_.lfs->size));
      }
      want_.size = file_.lfs->size;
      if (!IsHex(file_.lfs->sha256, 64)) {
        return absl::DataLossError(
            absl::StrCat(what_, ": lfs.sha256 '", file_.lfs->sha256, "' is not a SHA-256"));
      }
      RETURN_IF_ERROR(Expect(want_.sha256, want_.sha256_from, file_.lfs->sha256, "lfs.sha256",
                             what_, "sha256"));
    } else if (!file_.blob_id.empty()) {
      if (!IsHex(file_.blob_id, 40)) {
        return absl::DataLossError(
            absl::StrCat(what_, ": blobId '", file_.blob_id, "' is not a git blob id"));
      }
      RETURN_IF_ERROR(Expect(want_.sha1, want_.sha1_from, file_.blob_id, "blobId", what_, "sha1"));
    }
    if (locked_ != nullptr) {
      if (want_.size.has_value() && locked_->size != *want_.size) {
        return absl::DataLossError(absl::StrCat(what_, ": the lock says ", locked_->size,
                                                " bytes but the Hub lists ", *want_.size));
      }
      want_.size = locked_->size;
      RETURN_IF_ERROR(
          Expect(want_.sha256, want_.sha256_from, locked_->sha256, "the lock", what_, "sha256"));
      if (!locked_->git_blob_sha1.empty() && !file_.lfs.has_value()) {
        RETURN_IF_ERROR(
            Expect(want_.sha1, want_.sha1_from, locked_->git_blob_sha1, "the lock", what_, "sha1"));
      }
    }
    return absl::OkStatus();
  }

  // The Hub's own answer, before any byte: it must be about our commit and our file.
  absl::Status CheckIdentity(const HubFileIdentity& id, Expectation& want) {
    if (id.commit.empty()) {
      return absl::DataLossError(
          absl::StrCat(what_,
                       ": the Hub's answer has no X-Repo-Commit, so nothing says which "
                       "commit these bytes belong to"));
    }
    if (id.commit != commit_) {
      return absl::DataLossError(absl::StrCat(what_, ": the Hub answered for commit ", id.commit,
                                              ", not the pinned ", commit_));
    }
    if (id.size.has_value() && want.size.has_value() && *id.size != *want.size) {
      return absl::DataLossError(absl::StrCat(what_, ": the Hub's answer says ", *id.size,
                                              " bytes (X-Linked-Size or Content-Length) but the "
                                              "file list says ",
                                              *want.size));
    }
    if (!want.size.has_value()) want.size = id.size;
    if (!want.size.has_value()) {
      return absl::DataLossError(
          absl::StrCat(what_, ": neither the file list nor the Hub's answer gives a size"));
    }
    const char* header = id.redirected || file_.lfs.has_value() ? "X-Linked-Etag" : "ETag";
    if (IsHex(id.etag, 64)) {
      RETURN_IF_ERROR(Expect(want.sha256, want.sha256_from, id.etag, header, what_, "sha256"));
    } else if (IsHex(id.etag, 40) && !file_.lfs.has_value()) {
      RETURN_IF_ERROR(Expect(want.sha1, want.sha1_from, id.etag, header, what_, "sha1"));
    } else if (file_.lfs.has_value() || !id.etag.empty()) {
      return absl::DataLossError(absl::StrCat(what_, ": the Hub's answer carries ", header, " '",
                                              id.etag, "', which is not the file's ",
                                              file_.lfs.has_value() ? "SHA-256" : "git blob id"));
    }
    if (want.sha256.empty() && want.sha1.empty()) {
      return absl::DataLossError(
          absl::StrCat(what_, ": neither the file list nor the Hub's answer states a hash"));
    }
    return absl::OkStatus();
  }

  absl::Status Attempt(const std::string& out) {
    std::error_code ec;
    fs::create_directories(fs::path(out).parent_path(), ec);
    int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return absl::InternalError(absl::StrCat(out, ": ", strerror(errno)));
    struct Closer {
      int fd;
      ~Closer() {
        if (fd >= 0) close(fd);
      }
    } closer{fd};
    Expectation want = want_;
    Sha256 sha256;
    std::optional<GitBlobHasher> sha1;
    done_ = 0;
    auto on_identity = [&](const HubFileIdentity& id) -> absl::Status {
      RETURN_IF_ERROR(CheckIdentity(id, want));
      if (!want.sha1.empty()) sha1.emplace(*want.size);
      return absl::OkStatus();
    };
    auto sink = [&](std::string_view chunk) -> absl::Status {
      if (!want.size.has_value()) {
        return absl::DataLossError(absl::StrCat(what_, ": bytes arrived before the identity"));
      }
      if (done_ + chunk.size() > *want.size) {
        return absl::DataLossError(
            absl::StrCat(what_, ": the download is longer than the ", *want.size, " bytes listed"));
      }
      for (size_t off = 0; off < chunk.size();) {
        ssize_t n = write(fd, chunk.data() + off, chunk.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return absl::InternalError(absl::StrCat(out, ": write: ", strerror(errno)));
        off += static_cast<size_t>(n);
      }
      sha256.Update(chunk);
      if (sha1) sha1->Update(chunk);
      done_ += chunk.size();
      if (o_.progress) o_.progress(file_.path, done_, *want.size);
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(hub_.Download(repo_, commit_, file_.path, on_identity, sink));
    if (fsync(fd) != 0) return absl::InternalError(absl::StrCat(out, ": fsync: ", strerror(errno)));
    if (!want.size.has_value() || done_ != *want.size) {
      return absl::UnavailableError(absl::StrCat(what_, ": the download ended after ", done_,
                                                 " of ", want.size.value_or(0), " bytes"));
    }
    sha256_ = std::string(sha256.Finish().hex());
    if (!want.sha256.empty() && sha256_ != want.sha256) {
      return absl::DataLossError(absl::StrCat(
          what_,
          ": failed verification: the bytes hash to "
          "sha256 ",
          sha256_, " but ", absl::StrJoin(want.sha256_from, " and "), " state ", want.sha256));
    }
    if (sha1) {
      sha1_ = sha1->FinishHex();
      if (sha1_ != want.sha1) {
        return absl::DataLossError(
            absl::StrCat(what_, ": failed verification: the bytes have git blob id ", sha1_,
                         " but ", absl::StrJoin(want.sha1_from, " and "), " state ", want.sha1));
      }
    }
    if (o_.progress && *want.size == 0) o_.progress(file_.path, 0, 0);
    want_ = std::move(want);
    return absl::OkStatus();
  }

  HubSource& hub_;
  const std::string& repo_;
  const std::string& commit_;
  const HubFile& file_;
  const LockedFile* locked_;
  const FetchOptions& o_;
  const std::string what_;
  Expectation want_;
  uint64_t done_ = 0;
  std::string sha256_, sha1_;
};

// Refuses a repository whose config.json names remote code, unless allowed.
absl::Status CheckRemoteCode(const std::string& path, const std::string& what,
                             bool allow_remote_code, std::vector<std::string>& notes) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": config.json is not a JSON object"));
  }
  auto it = j.find("auto_map");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  std::vector<std::string> entries;
  if (it->is_object()) {
    for (auto e = it->begin(); e != it->end(); ++e) {
      entries.push_back(
          absl::StrCat(e.key(), " -> ", e->is_string() ? e->get<std::string>() : e->dump()));
    }
  } else {
    entries.push_back(it->dump());
  }
  const std::string listed = absl::StrJoin(entries, ", ");
  if (allow_remote_code) {
    notes.push_back(absl::StrCat("config.json has auto_map (", listed,
                                 "): fetched anyway (--allow-remote-code)"));
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      what, ": config.json has auto_map (", listed,
      "): loading this model runs Python code from the repository (trust_remote_code). Read "
      "that code first, then pass --allow-remote-code to fetch it"));
}

}  // namespace

absl::StatusOr<FetchResult> FetchModel(HubSource& hub, const FetchOptions& o) {
  FetchResult result;
  std::string repo = o.repo;
  std::string revision = o.revision;
  if (o.lock.has_value()) {
    if (!repo.empty() && repo != o.lock->repo) {
      return absl::InvalidArgumentError(
          absl::StrCat("the lock file is for ", o.lock->repo, ", not ", repo));
    }
    if (!revision.empty() && absl::AsciiStrToLower(revision) != o.lock->commit) {
      return absl::InvalidArgumentError(
          absl::StrCat("the lock file pins commit ", o.lock->commit, ", not ", revision));
    }
    repo = o.lock->repo;
    revision = o.lock->commit;
    if (!o.files.empty() || !o.include.empty() || !o.exclude.empty()) {
      return absl::InvalidArgumentError(
          "--lock fetches exactly the files the lock names: no FILE, --include or --exclude");
    }
  }
  RETURN_IF_ERROR(CheckRepoId(repo));
  if (revision.empty()) {
    return absl::InvalidArgumentError(
        "--revision is required: a full commit hash (or a branch or tag with --resolve)");
  }
  if (o.dest.empty()) return absl::InvalidArgumentError("--dest is required");
  result.repo = repo;
  result.revision = revision;

  // 1. The commit.
  ASSIGN_OR_RETURN(HubRevision rev, hub.GetRevision(repo, revision));
  const std::string at = absl::StrCat(repo, "@", revision);
  if (IsFullCommitHash(revision)) {
    if (rev.commit != absl::AsciiStrToLower(revision)) {
      return absl::DataLossError(absl::StrCat(at, ": the Hub resolved the commit to ", rev.commit));
    }
  } else {
    if (!o.resolve) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ": '", revision, "' is a branch or tag name, which can move; it points at commit ",
          rev.commit, " now. Pin it with --revision ", rev.commit, ", or pass --resolve"));
    }
    result.resolved = true;
  }
  const std::string commit = rev.commit;
  result.commit = commit;
  const std::string what = absl::StrCat(repo, "@", commit);

  // 2. The file list: every path is checked, whether it is selected or not.
  std::map<std::string, HubFile> listed;
  for (const HubFile& f : rev.files) {
    if (absl::Status st = CheckRelativePath(f.path); !st.ok()) {
      return absl::PermissionDeniedError(
          absl::StrCat(what, ": the Hub lists a file the destination cannot hold: ", st.message()));
    }
    if (!listed.emplace(f.path, f).second) {
      return absl::DataLossError(absl::StrCat(what, ": the Hub lists '", f.path, "' twice"));
    }
  }
  std::vector<std::string> selected;  // sorted, unique
  if (o.lock.has_value()) {
    for (const LockedFile& lf : o.lock->files) {
      if (!listed.count(lf.path)) {
        return absl::DataLossError(absl::StrCat(what, ": the lock names '", lf.path,
                                                "' but the Hub lists no such file at that commit"));
      }
      selected.push_back(lf.path);
    }
  } else {
    std::set<std::string> chosen;
    for (const std::string& name : o.files) {
      if (!listed.count(name)) {
        return absl::NotFoundError(absl::StrCat(what, ": no file '", name, "' in the repository"));
      }
      if (name == kLockFileName) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": '", name, "' is the name modelfs gives its own lock file"));
      }
      if (IsPickleFileName(name) && !o.allow_pickle) {
        return absl::PermissionDeniedError(absl::StrCat(
            what, ": '", name,
            "' is a pickle checkpoint, which can run code when it is loaded; prefer its "
            ".safetensors, or pass --allow-pickle"));
      }
      chosen.insert(name);
    }
    const bool by_default = o.files.empty() && o.include.empty();
    for (const auto& [path, f] : listed) {
      if (chosen.count(path)) continue;
      // By default a pickle checkpoint is selected only to be reported as skipped (or, with
      // allow_pickle, fetched).
      const bool match = by_default ? MatchesDefaultFetchPatterns(path, o.allow_remote_code) ||
                                          IsPickleFileName(path)
                                    : MatchesAnyGlob(o.include, path);
      if (!match || MatchesAnyGlob(o.exclude, path)) continue;
      if (path == kLockFileName) {
        result.notes.push_back(absl::StrCat("skipped the repository's own ", AV(kLockFileName)));
        continue;
      }
      if (IsPickleFileName(path) && !o.allow_pickle) {
        result.skipped_pickle.push_back(path);
        continue;
      }
      chosen.insert(path);
    }
    selected.assign(chosen.begin(), chosen.end());
  }
  if (selected.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": nothing to fetch: no file matches",
        result.skipped_pickle.empty()
            ? std::string()
            : absl::StrCat(" (", result.skipped_pickle.size(),
                           " pickle checkpoint(s) skipped; --allow-pickle fetches them)")));
  }

  // 3. Staging next to DEST.
  ASSIGN_OR_RETURN(std::unique_ptr<StagedDest> staged, StagedDest::Create(o.dest, "fetch"));
  const fs::path staging = staged->staging();
  const fs::path tree = staged->tree();

  auto locked = [&](const std::string& path) -> const LockedFile* {
    return o.lock.has_value() ? o.lock->Find(path) : nullptr;
  };
  auto fetch_one = [&](const std::string& path, const fs::path& out) -> absl::Status {
    FileDownload d(hub, repo, commit, listed.at(path), locked(path), o);
    ASSIGN_OR_RETURN(FetchedFile f, d.Run(out.string()));
    result.bytes += f.size;
    if (std::binary_search(selected.begin(), selected.end(), path)) {
      result.files.push_back(std::move(f));
    }
    return absl::OkStatus();
  };

  // 4. config.json first: remote code is refused before any weight moves.
  const bool has_config = listed.count("config.json") > 0;
  const bool keep_config = std::binary_search(selected.begin(), selected.end(), "config.json");
  if (has_config) {
    const fs::path out = keep_config ? tree / "config.json" : staging / "config.json";
    RETURN_IF_ERROR(fetch_one("config.json", out));
    RETURN_IF_ERROR(CheckRemoteCode(out.string(), what, o.allow_remote_code, result.notes));
  }
  for (const std::string& path : selected) {
    if (path == "config.json") continue;
    RETURN_IF_ERROR(fetch_one(path, tree / path));
  }
  std::sort(result.files.begin(), result.files.end(),
            [](const FetchedFile& a, const FetchedFile& b) { return a.path < b.path; });

  // 5. Headers.
  for (const FetchedFile& f : result.files) {
    const SniffedFormat sf = SniffFormat(f.path, "");
    if (sf != SniffedFormat::kSafetensors && sf != SniffedFormat::kGguf) continue;
    absl::StatusOr<InspectedFile> inspected = InspectLocation((tree / f.path).string());
    if (!inspected.ok()) {
      const std::string msg = std::string(inspected.status().message());
      const std::string staged = (tree / f.path).string();
      std::string tail = absl::StartsWith(msg, staged) ? msg.substr(staged.size()) : ": " + msg;
      if (absl::StartsWith(tail, ": ")) tail = tail.substr(2);
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", f.path, ": invalid header: ", tail));
    }
  }

  // 6. The lock.
  LockFile lock;
  lock.endpoint = hub.endpoint();
  lock.repo = repo;
  lock.revision = revision;
  lock.commit = commit;
  for (const FetchedFile& f : result.files) {
    lock.files.push_back({f.path, f.size, f.sha256, f.lfs, f.git_blob_sha1});
  }
  {
    const fs::path lock_out = tree / std::string(kLockFileName);
    std::ofstream out(lock_out, std::ios::binary | std::ios::trunc);
    out << SerializeLockFile(lock);
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat(lock_out.string(), ": write failed"));
  }

  // 7. Into DEST.
  RETURN_IF_ERROR(staged->Commit());
  result.dest = o.dest;
  result.lock_path = (fs::path(o.dest) / std::string(kLockFileName)).string();
  return result;
}

nlohmann::json FetchResultToJson(const FetchResult& r) {
  json files = json::array();
  for (const FetchedFile& f : r.files) {
    json e = {{"path", f.path},
              {"size", f.size},
              {"sha256", f.sha256},
              {"lfs", f.lfs},
              {"verified_by", f.verified_by}};
    e["git_blob_sha1"] = f.git_blob_sha1.empty() ? json(nullptr) : json(f.git_blob_sha1);
    files.push_back(std::move(e));
  }
  return {{"repo", r.repo},     {"revision", r.revision},
          {"commit", r.commit}, {"resolved", r.resolved},
          {"dest", r.dest},     {"lock", r.lock_path},
          {"files", files},     {"skipped_pickle", r.skipped_pickle},
          {"notes", r.notes},   {"bytes", r.bytes}};
}

}  // namespace modelfs
