// StagedDest: a directory tree built next to its destination and moved into it only when it
// is complete, so that a failure leaves DEST as it was (or absent, with no parent directory
// the attempt created). pull and fetch both install this way, so an interrupted download never
// leaves a half-written model where a loader would find it.
//
// Thread safety: not thread-safe; one owner builds and commits it.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace modelfs {

class StagedDest {
 public:
  // Creates DEST's missing parents and, beside DEST, a staging directory
  // `.modelfs-<kind>-XXXXXX` holding an empty tree(). Errors: kInvalidArgument (DEST exists
  // and is not a directory; a parent or the staging directory cannot be made), naming them.
  static absl::StatusOr<std::unique_ptr<StagedDest>> Create(const std::string& dest,
                                                            const std::string& kind);
  // Removes the staging directory, and the parents Create made unless Commit succeeded.
  ~StagedDest();
  StagedDest(const StagedDest&) = delete;
  StagedDest& operator=(const StagedDest&) = delete;

  // Scratch space outside the tree (partial downloads, files not to install).
  const std::filesystem::path& staging() const { return staging_; }
  // What Commit moves into DEST.
  std::filesystem::path tree() const { return staging_ / "files"; }

  // Moves tree() into DEST: a rename when DEST did not exist; otherwise a merge that creates
  // directories, replaces files DEST already has (never writing through a link in DEST) and,
  // on failure, puts DEST back as it was. Errors: kFailedPrecondition (a file where the tree
  // has a directory, or the other way round), kInternal (a rename failed).
  absl::Status Commit();

 private:
  StagedDest(std::filesystem::path dest, bool dest_existed, std::filesystem::path created,
             std::filesystem::path staging);

  const std::filesystem::path dest_;
  const bool dest_existed_;
  const std::filesystem::path created_;  // topmost parent Create made, or empty
  const std::filesystem::path staging_;
  bool committed_ = false;
};

}  // namespace modelfs
