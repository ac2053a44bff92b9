#include "core/hub/lock_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/hub/hub_source.h"
#include "core/oci/digest.h"
#include "core/oci/path_safety.h"
#include "core/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace modelfs {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool IsLowerHex(std::string_view s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

absl::StatusOr<std::string> GetString(const json& j, const char* key, const std::string& where,
                                      bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (!required) return std::string();
    return absl::InvalidArgumentError(absl::StrCat(where, ".", key, ": required field missing"));
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".", key, ": not a string"));
  }
  return it->get<std::string>();
}

// Whether `rel` under `dir` is a regular file reached through directories only (no symlink at
// any component), and its size.
bool RegularFileNoLinks(const fs::path& dir, const std::string& rel, uint64_t* size, bool* exists) {
  *exists = false;
  fs::path p = dir;
  std::vector<std::string> parts = absl::StrSplit(rel, '/');
  for (size_t i = 0; i < parts.size(); ++i) {
    p /= parts[i];
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) return false;
    if (i + 1 < parts.size()) {
      if (!S_ISDIR(st.st_mode)) {
        *exists = true;
        return false;
      }
      continue;
    }
    *exists = true;
    if (!S_ISREG(st.st_mode)) return false;
    *size = static_cast<uint64_t>(st.st_size);
    return true;
  }
  return false;
}

}  // namespace

const LockedFile* LockFile::Find(std::string_view path) const {
  for (const LockedFile& f : files) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

std::string LockFile::SourceUrl() const { return absl::StrCat(endpoint, "/", repo); }

absl::StatusOr<LockFile> ParseLockFile(std::string_view bytes, std::string_view where_sv) {
  const std::string where(where_sv);
  json j = json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
  }
  LockFile lock;
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() ||
      version->get<int64_t>() != kLockFileVersion) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".version: want ", kLockFileVersion,
                                                   " (this modelfs reads version ",
                                                   kLockFileVersion, " lock files)"));
  }
  ASSIGN_OR_RETURN(lock.endpoint, GetString(j, "endpoint", where, false));
  ASSIGN_OR_RETURN(lock.repo, GetString(j, "repo", where, true));
  if (absl::Status st = CheckRepoId(lock.repo); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".repo: ", st.message()));
  }
  ASSIGN_OR_RETURN(lock.revision, GetString(j, "revision", where, false));
  ASSIGN_OR_RETURN(lock.commit, GetString(j, "commit", where, true));
  if (!IsLowerHex(lock.commit, 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".commit: '", lock.commit, "' is not a full commit hash"));
  }
  auto files = j.find("files");
  if (files == j.end() || !files->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".files: not an array"));
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < files->size(); ++i) {
    const json& f = (*files)[i];
    const std::string w = absl::StrCat(where, ".files[", i, "]");
    if (!f.is_object()) return absl::InvalidArgumentError(absl::StrCat(w, ": not an object"));
    LockedFile lf;
    ASSIGN_OR_RETURN(lf.path, GetString(f, "path", w, true));
    if (absl::Status st = CheckRelativePath(lf.path); !st.ok()) {
      return absl::PermissionDeniedError(absl::StrCat(w, ".path: ", st.message()));
    }
    if (lf.path == kLockFileName) {
      return absl::InvalidArgumentError(absl::StrCat(w, ".path: the lock cannot name itself"));
    }
    if (!seen.insert(lf.path).second) {
      return absl::InvalidArgumentError(absl::StrCat(w, ".path: '", lf.path, "' appears twice"));
    }
    auto size = f.find("size");
    if (size == f.end() || !size->is_number_unsigned()) {
      return absl::InvalidArgumentError(absl::StrCat(w, ".size: not a non-negative integer"));
    }
    lf.size = size->get<uint64_t>();
    ASSIGN_OR_RETURN(lf.sha256, GetString(f, "sha256", w, true));
    if (!IsLowerHex(lf.sha256, 64)) {
      return absl::InvalidArgumentError(
          absl::StrCat(w, ".sha256: '", lf.sha256, "' is not 64 lowercase hex digits"));
    }
    if (auto lfs = f.find("lfs"); lfs != f.end()) {
      if (!lfs->is_boolean())
        return absl::InvalidArgumentError(absl::StrCat(w, ".lfs: not a bool"));
      lf.lfs = lfs->get<bool>();
    }
    ASSIGN_OR_RETURN(lf.git_blob_sha1, GetString(f, "gitBlobSha1", w, false));
    if (!lf.git_blob_sha1.empty() && !IsLowerHex(lf.git_blob_sha1, 40)) {
      return absl::InvalidArgumentError(absl::StrCat(w, ".gitBlobSha1: not 40 hex digits"));
    }
    lock.files.push_back(std::move(lf));
  }
  std::sort(lock.files.begin(), lock.files.end(),
            [](const LockedFile& a, const LockedFile& b) { return a.path < b.path; });
  return lock;
}

absl::StatusOr<LockFile> ReadLockFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": no such lock file"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  if (bytes.size() > (64u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": larger than 64 MiB"));
  }
  return ParseLockFile(bytes, path);
}

std::string SerializeLockFile(const LockFile& lock) {
  // nlohmann's ordered_json keeps the documented field order.
  nlohmann::ordered_json j;
  j["version"] = lock.version;
  j["endpoint"] = lock.endpoint;
  j["repo"] = lock.repo;
  j["revision"] = lock.revision;
  j["commit"] = lock.commit;
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  std::vector<LockedFile> sorted = lock.files;
  std::sort(sorted.begin(), sorted.end(),
            [](const LockedFile& a, const LockedFile& b) { return a.path < b.path; });
  for (const LockedFile& f : sorted) {
    nlohmann::ordered_json e;
    e["path"] = f.path;
    e["size"] = f.size;
    e["sha256"] = f.sha256;
    e["lfs"] = f.lfs;
    if (!f.git_blob_sha1.empty()) e["gitBlobSha1"] = f.git_blob_sha1;
    files.push_back(std::move(e));
  }
  j["files"] = std::move(files);
  return j.dump(2) + "\n";
}

std::string_view LockCheckStateName(LockCheck::State s) {
  switch (s) {
    case LockCheck::State::kOk:
      return "ok";
    case LockCheck::State::kMissing:
      return "missing";
    case LockCheck::State::kNotRegular:
      return "not a regular file";
    case LockCheck::State::kSizeMismatch:
      return "size differs";
    case LockCheck::State::kDigestMismatch:
      return "sha256 differs";
  }
  return "?";
}

bool VerifyReport::ok() const {
  for (const LockCheck& c : files) {
    if (c.state != LockCheck::State::kOk) return false;
  }
  return true;
}

LockCheck CheckLockedFile(const std::string& dir, const LockedFile& want) {
  LockCheck c;
  c.path = want.path;
  c.expected_sha256 = want.sha256;
  c.expected_size = want.size;
  uint64_t size = 0;
  bool exists = false;
  if (!RegularFileNoLinks(dir, want.path, &size, &exists)) {
    c.state = exists ? LockCheck::State::kNotRegular : LockCheck::State::kMissing;
    return c;
  }
  c.size = size;
  if (size != want.size) {
    c.state = LockCheck::State::kSizeMismatch;
    return c;
  }
  absl::StatusOr<Digest> d = DigestFile((fs::path(dir) / want.path).string());
  if (!d.ok()) {
    c.state = LockCheck::State::kMissing;
    return c;
  }
  c.sha256 = std::string(d->hex());
  c.state = c.sha256 == want.sha256 ? LockCheck::State::kOk : LockCheck::State::kDigestMismatch;
  return c;
}

absl::StatusOr<VerifyReport> VerifyDirectory(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": not a directory"));
  }
  const std::string lock_path = (fs::path(dir) / kLockFileName).string();
  if (!fs::exists(fs::symlink_status(lock_path, ec))) {
    return absl::NotFoundError(
        absl::StrCat(dir, " has no ", AV(kLockFileName), " (write one with `modelfs fetch`)"));
  }
  VerifyReport r;
  ASSIGN_OR_RETURN(r.lock, ReadLockFile(lock_path));
  for (const LockedFile& f : r.lock.files) {
    r.files.push_back(CheckLockedFile(dir, f));
    if (r.files.back().state == LockCheck::State::kOk ||
        r.files.back().state == LockCheck::State::kDigestMismatch) {
      r.bytes += r.files.back().size;
    }
  }
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
    const std::string rel = fs::relative(it->path(), dir, ec).generic_string();
    if (rel == kLockFileName || r.lock.Find(rel) != nullptr) continue;
    r.extra.push_back(rel);
  }
  std::sort(r.extra.begin(), r.extra.end());
  return r;
}

}  // namespace modelfs
