// What `modelfs push` and `convert` take in, and whether they may push it: the input files
// gathered from the command line, the pickle refusal, the lock file of a fetched model and the
// checks against it, the identity record, and the model's creation time. Internal to
// core/publish (push.cc); every check here runs before anything is uploaded, except the
// SHA-256 against the lock, which runs as each file is hashed.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/hub/lock_file.h"
#include "core/oci/digest.h"
#include "core/oci/model_identity.h"
#include "core/publish/push.h"

namespace modelfs::publish_internal {

struct InputFile {
  std::string rel;   // path inside the model
  std::string path;  // on disk
  std::string dir;   // the directory input it was found under ("" for a file input)
};

// Every regular file of the inputs (a directory's files relative to it, without .git and
// .cache; a file input under its own name), sorted by path. kNotFound for a missing input,
// kInvalidArgument for an unsafe path, two inputs with the same path, or no files.
absl::StatusOr<std::vector<InputFile>> CollectInputs(const std::vector<std::string>& inputs);

// Refuses pickle checkpoints unless allowed; when allowed, records them in M's annotations.
// Returns whether there were any.
absl::StatusOr<bool> CheckPickles(const std::vector<InputFile>& files, bool allow,
                                  std::map<std::string, std::string>& annotations);

// The lock of the (one) directory input that has one, if any; its directory in *lock_dir.
absl::StatusOr<std::optional<LockFile>> FindLock(const std::vector<InputFile>& files,
                                                 std::string* lock_dir);

// A file of the locked directory against the lock: present with the same size.
absl::Status CheckAgainstLock(const LockFile& lock, const InputFile& f);
// Once hashed: the same SHA-256 as the lock says.
absl::Status CheckDigestAgainstLock(const LockFile& lock, const InputFile& f, const Digest& got);

// A --path-prefix is a relative directory ("models").
absl::Status CheckPathPrefix(const std::string& prefix);

// The identity record: the model card's front matter, then the flags over it, then the
// origin from the lock and the tokenizer hash from the files.
absl::StatusOr<ModelIdentity> BuildIdentity(const std::vector<InputFile>& files,
                                            const std::optional<LockFile>& lock,
                                            const PushOptions& o);

// When the model was made: $SOURCE_DATE_EPOCH when set, else the newest modification time of
// its files, as RFC 3339 seconds.
absl::StatusOr<std::string> CreatedAtOf(const std::vector<InputFile>& files);

}  // namespace modelfs::publish_internal
