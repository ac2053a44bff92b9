// `modelfs pull REF DEST`: downloads a model (M, or V followed to M) and verifies every byte.
// An ordinary container image (a KServe modelcar) is written as the merged tree of its layers
// (core/oci/image_tree.h: whiteouts applied, symlinks as they are, hard links as copies,
// devices skipped), every layer checked against its digest and, decompressed, its diff ID.
// Layers download in parallel into a staging directory next to DEST (in its parent) while being
// hashed, and are unpacked there; only when every layer matched its digest and size and every
// tar unpacked cleanly is the tree moved into place: renamed to DEST when DEST did not exist,
// else merged into it (a file DEST already has is replaced; a failed merge puts back everything
// it moved). So a failed pull leaves DEST as it was, or absent with no parent it created.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/publish/push.h"
#include "core/registry/reference.h"
#include "core/registry/registry_client.h"
#include "core/resolve/model_ref.h"

namespace modelfs {

struct PullOptions {
  int parallel = 4;
  ProgressFn progress;
  // Reaches M's registry when a volume image's record names another one; null: only the
  // client's registry.
  RegistryConnector connect;
  // Asked before M is fetched from anywhere but V's own repository (ResolveModel).
  ModelLocationCheck check_location;
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
// path that is absolute, has "..", repeats another, or (tar) a link that escapes DEST, an entry
// written through a link, a hard link to anything but a file extracted before it, or a device
// node; kInvalidArgument for a path at .modelinfo.json (kReservedModelInfoPath);
// kFailedPrecondition when DEST has a file where the model has a directory or the reverse; the
// registry's errors.
absl::StatusOr<PullResult> PullModel(RegistryClient& client, const ImageReference& ref,
                                     const std::string& dest, const PullOptions& options);

nlohmann::json PullResultToJson(const PullResult& r);

}  // namespace modelfs
