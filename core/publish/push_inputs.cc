// The inputs of push and convert and the checks on them (push_inputs.h).
#include "core/publish/push_inputs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/formats/pickle_scan.h"
#include "core/hub/identity.h"
#include "core/hub/model_card.h"
#include "core/io/range_reader.h"
#include "core/oci/model_time.h"
#include "core/oci/modelpack.h"
#include "core/oci/path_safety.h"
#include "core/status/status_macros.h"

namespace modelfs::publish_internal {
namespace {

namespace fs = std::filesystem;

std::string LockName() { return std::string(kLockFileName); }

}  // namespace

absl::StatusOr<std::vector<InputFile>> CollectInputs(const std::vector<std::string>& inputs) {
  std::vector<InputFile> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    fs::file_status st = fs::status(in, ec);
    if (ec || !fs::exists(st)) return absl::NotFoundError(absl::StrCat(in, ": no such file"));
    if (fs::is_directory(st)) {
      for (auto it = fs::recursive_directory_iterator(in, ec);
           it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) break;
        std::string name = it->path().filename().string();
        if (it->is_directory() && (name == ".git" || name == ".cache")) {
          it.disable_recursion_pending();
          continue;
        }
        if (!it->is_regular_file()) continue;
        files.push_back({fs::relative(it->path(), in).generic_string(), it->path().string(), in});
      }
      if (ec) return absl::InvalidArgumentError(absl::StrCat(in, ": ", ec.message()));
    } else if (fs::is_regular_file(st)) {
      files.push_back({fs::path(in).filename().string(), in, ""});
    } else {
      return absl::InvalidArgumentError(absl::StrCat(in, ": not a regular file or directory"));
    }
  }
  std::sort(files.begin(), files.end(),
            [](const InputFile& a, const InputFile& b) { return a.rel < b.rel; });
  std::set<std::string> seen;
  for (const auto& f : files) {
    RETURN_IF_ERROR(CheckRelativePath(f.rel));
    if (!seen.insert(f.rel).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two inputs map to the same path '", f.rel, "'"));
    }
  }
  if (files.empty()) return absl::InvalidArgumentError("nothing to push: no files found");
  return files;
}

// Refuses pickle checkpoints unless allowed; when allowed, records them in M's annotations.
// A file named like one (IsPickleFileName) is one when its bytes are what torch.load would
// unpickle: a zip with a .pkl entry, or a pickle stream (ScanPickleFile says which); a .bin of
// other bytes is pushed as any file. Returns whether there were any.
absl::StatusOr<bool> CheckPickles(const std::vector<InputFile>& files, bool allow,
                                  std::map<std::string, std::string>& annotations) {
  std::vector<std::string> names, flagged;
  for (const auto& f : files) {
    if (!IsPickleFileName(f.rel)) continue;
    ASSIGN_OR_RETURN(auto reader, OpenFileRangeReader(f.path));
    absl::StatusOr<PickleScan> scan = ScanPickleFile(*reader);
    if (!scan.ok() && scan.status().code() == absl::StatusCode::kInvalidArgument) continue;
    names.push_back(f.rel);
    if (!scan.ok()) {
      flagged.push_back(absl::StrCat(f.rel, ": not scannable"));
    } else if (!scan->safe()) {
      flagged.push_back(absl::StrCat(f.rel, ": ", absl::StrJoin(scan->flagged, " ")));
    }
  }
  if (names.empty()) return false;
  if (!allow) {
    return absl::PermissionDeniedError(absl::StrCat(
        "refusing to push pickle checkpoint(s) ", absl::StrJoin(names, ", "),
        ": loading one can run code (see `modelfs inspect`); convert to safetensors, or pass "
        "--allow-pickle"));
  }
  annotations[std::string(kAnnotationPickleAllowed)] = "true";
  annotations[std::string(kAnnotationPickleFiles)] = absl::StrJoin(names, ",");
  if (!flagged.empty()) {
    annotations[std::string(kAnnotationPickleFlagged)] = absl::StrJoin(flagged, "; ");
  }
  return true;
}

// The lock of the (one) directory input that has one, if any.
absl::StatusOr<std::optional<LockFile>> FindLock(const std::vector<InputFile>& files,
                                                 std::string* lock_dir) {
  std::optional<LockFile> lock;
  for (const auto& f : files) {
    if (f.dir.empty() || f.rel != kLockFileName) continue;
    if (lock.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("two inputs have a ", LockName(), " (",
                                                     *lock_dir, ", ", f.dir,
                                                     "): push one fetched model at a time"));
    }
    ASSIGN_OR_RETURN(lock, ReadLockFile(f.path));
    *lock_dir = f.dir;
  }
  return lock;
}

// A file of the locked directory against the lock: present with the same size (checked before
// any upload), and, once hashed, the same SHA-256.
absl::Status CheckAgainstLock(const LockFile& lock, const InputFile& f) {
  const LockedFile* want = lock.Find(f.rel);
  if (want == nullptr) {
    return absl::DataLossError(
        absl::StrCat(f.path, ": not in ", LockName(), " (", lock.repo, "@", lock.commit,
                     "); refusing to push it as part of that origin: remove it or the lock"));
  }
  std::error_code ec;
  const uint64_t size = fs::file_size(f.path, ec);
  if (ec || size != want->size) {
    return absl::DataLossError(absl::StrCat(f.path, ": ", size, " bytes, but ", LockName(),
                                            " says ", want->size,
                                            "; refusing to push bytes "
                                            "that differ from the lock"));
  }
  return absl::OkStatus();
}

// A --path-prefix is a relative directory ("models"); checked before anything is uploaded.
absl::Status CheckPathPrefix(const std::string& prefix) {
  if (prefix.empty()) return absl::OkStatus();
  absl::Status s = CheckRelativePath(prefix);
  if (s.ok()) s = CheckNotReservedModelPath(prefix, "the path prefix");
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("path prefix '", prefix, "': ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckDigestAgainstLock(const LockFile& lock, const InputFile& f, const Digest& got) {
  const LockedFile* want = lock.Find(f.rel);
  if (want != nullptr && std::string(got.hex()) != want->sha256) {
    return absl::DataLossError(absl::StrCat(f.path, ": sha256 ", std::string(got.hex()),
                                            " differs from ", LockName(), " (sha256 ", want->sha256,
                                            " at ", lock.repo, "@", lock.commit,
                                            "); refusing to push bytes that differ from the lock"));
  }
  return absl::OkStatus();
}

// The identity record: the model card's front matter, then the flags over it, then the
// origin from the lock and the tokenizer hash from the files.
absl::StatusOr<ModelIdentity> BuildIdentity(const std::vector<InputFile>& files,
                                            const std::optional<LockFile>& lock,
                                            const PushOptions& o) {
  ModelIdentity id;
  const std::string endpoint =
      lock.has_value() && !lock->endpoint.empty() ? lock->endpoint : "https://huggingface.co";
  for (const auto& f : files) {
    if (f.rel != "README.md") continue;
    std::ifstream in(f.path, std::ios::binary);
    std::string readme(1 << 20, '\0');
    in.read(readme.data(), static_cast<std::streamsize>(readme.size()));
    readme.resize(static_cast<size_t>(in.gcount()));
    absl::StatusOr<ModelIdentity> card = IdentityFromCard(ParseModelCard(readme), endpoint);
    if (!card.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(f.path, ": ", card.status().message()));
    }
    id = *std::move(card);
  }
  ModelIdentity flags = o.identity;
  for (const std::string& l : flags.licenses) RETURN_IF_ERROR(CheckSpdxExpression(l));
  if (!flags.base_model_relation.empty()) {
    ASSIGN_OR_RETURN(flags.base_model_relation,
                     NormalizeBaseModelRelation(flags.base_model_relation));
  }
  for (std::string& d : flags.datasets) d = DatasetUrl(d, endpoint);
  id = MergeIdentity(std::move(id), flags);
  if (lock.has_value()) {
    if (!o.revision.empty() && o.revision != lock->commit) {
      return absl::InvalidArgumentError(
          absl::StrCat("--revision ", o.revision, " but ", LockName(), " pins ", lock->commit));
    }
    id.source_url = lock->SourceUrl();
    id.revision = lock->commit;
  } else if (!o.revision.empty()) {
    id.revision = o.revision;
  }
  std::vector<std::pair<std::string, std::string>> paths;
  for (const auto& f : files) paths.emplace_back(f.rel, f.path);
  ASSIGN_OR_RETURN(id.tokenizer_sha256, TokenizerHash(paths));
  return id;
}

// When the model was made: $SOURCE_DATE_EPOCH when set (reproducible builds' convention), else the
// newest modification time of its files. Not the time of the push, so pushing the same files
// again gives the same M and V.
absl::StatusOr<std::string> CreatedAtOf(const std::vector<InputFile>& files) {
  if (const char* epoch = getenv("SOURCE_DATE_EPOCH"); epoch != nullptr && *epoch != '\0') {
    int64_t seconds = 0;
    if (!absl::SimpleAtoi(epoch, &seconds) || seconds < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("SOURCE_DATE_EPOCH='", epoch, "' is not a number of seconds"));
    }
    return FormatRfc3339Seconds(seconds);
  }
  int64_t newest = 0;
  for (const InputFile& f : files) {
    struct stat st;
    if (stat(f.path.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat(f.path, ": ", strerror(errno)));
    }
    newest = std::max<int64_t>(newest, st.st_mtim.tv_sec);
  }
  return FormatRfc3339Seconds(newest);
}

}  // namespace modelfs::publish_internal
