// ModelRecords: the daemon's local copy of what it resolved for each mounted model (the top
// manifest, V's small layer A, M and M's config), under <root>/models/<name>/. A restart
// rebuilds the model from these files, verifying every digest again, without the registry.
//   record.json        {"reference": "<registry>/<repo>@<top digest>", "mediaTypes": {...}}
//   blobs/<hex>        the bytes of each manifest and blob, named by their SHA-256
// A record directory is written under a temporary name and renamed into place, so a crash
// leaves either no record or a whole one.
//
// Thread-safety: free functions; callers serialize writes of the same name.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/resolve/model_ref.h"

namespace modelfs {

// Writes rm's record as <models_dir>/<name>. OK (and no write) if it already exists.
absl::Status SaveModelRecord(const std::filesystem::path& models_dir, const std::string& name,
                             const ResolvedModel& rm);

// Rebuilds the resolved model from <models_dir>/<name>. Errors: kNotFound (no record),
// kDataLoss (a stored file does not match its digest), kInvalidArgument (unreadable record).
absl::StatusOr<ResolvedModel> LoadModelRecord(const std::filesystem::path& models_dir,
                                              const std::string& name);

// Deletes <models_dir>/<name>; OK if it does not exist.
absl::Status DeleteModelRecord(const std::filesystem::path& models_dir, const std::string& name);

// Names of the stored records (sorted).
std::vector<std::string> ListModelRecords(const std::filesystem::path& models_dir);

}  // namespace modelfs
