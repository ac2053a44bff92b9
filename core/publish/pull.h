// `modelfs pull REF DEST`: downloads a model (M, or V followed to M) and verifies every byte.
// Layers download in parallel into a staging directory inside DEST while being hashed; only
// when every layer matched its digest and size are the files renamed into place, so a failed
// pull leaves no file behind (and no DEST, when the pull created it).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/publish/push.h"
#include "core/registry/reference.h"
#include "core/registry/registry_client.h"

namespace modelfs {

struct PullOptions {
  int parallel = 4;
  ProgressFn progress;
};

struct PulledFile {
  std::string path;  // relative to DEST
  Digest layer;
  uint64_t size = 0;
};

struct PullResult {
  Descriptor model;
  std::optional<Descriptor> volume;
  std::vector<PulledFile> files;
  uint64_t bytes = 0;  // layer bytes downloaded
};

// Errors: kDataLoss naming the blob whose digest or size did not match; kPermissionDenied for a
// path that is absolute, has "..", repeats another, or (tar) a link that escapes DEST or a
// device node; the registry's errors.
absl::StatusOr<PullResult> PullModel(RegistryClient& client, const ImageReference& ref,
                                     const std::string& dest, const PullOptions& options);

nlohmann::json PullResultToJson(const PullResult& r);

}  // namespace modelfs
