// OCI image manifests and indexes (image-spec manifest.md, image-index.md), which also cover
// Docker schema-2 manifests and manifest lists, ModelPack artifacts and referrers responses.
//
// Parse* validate what they keep (schemaVersion 2, digests, sizes, required fields) and name
// the field at fault. Serialize* write compact JSON with sorted keys and no timestamps, so the
// same value always has the same digest. Note that the digest of a manifest fetched from a
// registry is the digest of the bytes fetched, never of a re-serialization: keep those bytes.
//
// Thread safety: plain values.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/oci/descriptor.h"

namespace modelfs {

struct Manifest {
  int schema_version = 2;
  std::string media_type;     // OCI or Docker manifest type; empty = absent
  std::string artifact_type;  // empty = absent
  Descriptor config;
  std::vector<Descriptor> layers;
  std::optional<Descriptor> subject;
  std::map<std::string, std::string> annotations;

  friend bool operator==(const Manifest&, const Manifest&) = default;
};

struct Index {
  int schema_version = 2;
  std::string media_type;  // OCI index or Docker manifest list; empty = absent
  std::string artifact_type;
  std::vector<Descriptor> manifests;
  std::optional<Descriptor> subject;
  std::map<std::string, std::string> annotations;

  friend bool operator==(const Index&, const Index&) = default;
};

// Errors: kInvalidArgument naming the field ("manifest.layers[1].digest: ..."), including a
// document whose mediaType says it is an index; kDataLoss for embedded data that does not match
// its digest.
absl::StatusOr<Manifest> ParseManifest(std::string_view bytes);
absl::StatusOr<Index> ParseIndex(std::string_view bytes);

std::string SerializeManifest(const Manifest& m);
std::string SerializeIndex(const Index& index);

// A descriptor pointing at serialized bytes: digest and size of `bytes`.
Descriptor DescribeBlob(std::string_view media_type, std::string_view bytes);

// The artifact type a referrers listing reports for `m`: artifactType, else config.mediaType.
std::string_view EffectiveArtifactType(const Manifest& m);

}  // namespace modelfs
