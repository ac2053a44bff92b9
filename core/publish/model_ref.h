// Resolving a reference to a model: connect to its registry, fetch and verify its manifest, and
// when it is a volume image V, follow it to the ModelPack manifest M with V's chunk indexes.
// Shared by `pull`, `convert`, `mount` and the snapshotter.
//
// Thread safety: ResolvedModel is a value; RegistryAccess::client is thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/oci/chunk_index.h"
#include "core/oci/manifest.h"
#include "core/oci/modelpack.h"
#include "core/oci/volume_image.h"
#include "core/registry/credentials.h"
#include "core/registry/hosts.h"
#include "core/registry/reference.h"
#include "core/registry/registry_client.h"

namespace modelfs {

struct RegistryAccessOptions {
  HostsOptions hosts;            // --plain-http, certs.d directory
  std::string docker_config;     // explicit config.json; empty: $DOCKER_CONFIG / ~/.docker
  RegistryClientOptions client;  // timeouts and retry policy
};

// Opens a client for ref's registry with the capability needed, credentials from the docker
// config. Errors: kInvalidArgument (bad hosts.toml / config.json).
absl::StatusOr<std::unique_ptr<RegistryClient>> ConnectRegistry(const ImageReference& ref,
                                                                HostCapability capability,
                                                                const RegistryAccessOptions& o);

struct ResolvedModel {
  ImageReference ref;           // as given
  std::string repository;       // where M lives (V's record, or ref's repository)
  Descriptor model_descriptor;  // M
  std::string model_manifest_json;
  Manifest model;
  std::vector<ModelLayer> layers;  // M's layers with paths
  std::optional<ModelPackConfig> config;
  std::string config_json;
  // Present when ref named a volume image:
  std::optional<Descriptor> volume_descriptor;
  std::string volume_manifest_json;
  std::string volume_layer_tar;                // A, verified
  std::map<Digest, ChunkIndex> chunk_indexes;  // by layer digest
};

// Where ResolveModel gets manifests and small blobs: a registry, or the copies the snapshotter
// keeps so a restart does not need the registry.
class ModelFetcher {
 public:
  virtual ~ModelFetcher() = default;
  // `reference` is a tag or a digest string. The result's digest is the SHA-256 of its bytes.
  virtual absl::StatusOr<ManifestResult> GetManifest(const std::string& repository,
                                                     const std::string& reference) = 0;
  // The whole blob, verified against d.digest and d.size; more than max_bytes is refused.
  virtual absl::StatusOr<std::string> GetBlob(const std::string& repository, const Descriptor& d,
                                              uint64_t max_bytes) = 0;
};

// A ModelFetcher over a registry client.
class RegistryModelFetcher final : public ModelFetcher {
 public:
  explicit RegistryModelFetcher(RegistryClient& client) : client_(client) {}
  absl::StatusOr<ManifestResult> GetManifest(const std::string& repository,
                                             const std::string& reference) override;
  absl::StatusOr<std::string> GetBlob(const std::string& repository, const Descriptor& d,
                                      uint64_t max_bytes) override;

 private:
  RegistryClient& client_;
};

// Fetches ref. A pinned digest is verified; a volume image's layer is fetched whole and
// verified, and its chunk indexes checked against model.json; M is fetched by digest.
// Errors: kNotFound, kDataLoss (digest mismatch), kInvalidArgument (not a model / not a
// volume image), kPermissionDenied (a layer path that escapes).
absl::StatusOr<ResolvedModel> ResolveModel(RegistryClient& client, const ImageReference& ref);
absl::StatusOr<ResolvedModel> ResolveModel(ModelFetcher& fetcher, const ImageReference& ref);

// Fetches a whole blob into memory, refusing more than max_bytes, and verifies its digest.
absl::StatusOr<std::string> FetchVerifiedBlob(RegistryClient& client, const std::string& repo,
                                              const Descriptor& d, uint64_t max_bytes);

}  // namespace modelfs
