// Resolving a reference to a model: connect to its registry, fetch and verify its manifest, and
// when it is a volume image V, follow it to the ModelPack manifest M with V's chunk indexes.
// V's record names M's repository, which may be on another registry (`convert SRC --to DST`
// writes V where you can push and leaves M where it is): M and its blobs are then read from
// there, with that registry's hosts and credentials. Shared by `pull`, `convert`, `mount` and
// the snapshotter.
//
// Thread safety: ResolvedModel is a value; the clients are thread-safe (registry_clients.h).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/oci/chunk_index.h"
#include "core/oci/manifest.h"
#include "core/oci/modelpack.h"
#include "core/oci/state_artifact.h"
#include "core/oci/volume_image.h"
#include "core/registry/reference.h"
#include "core/registry/registry_client.h"
#include "core/resolve/registry_clients.h"

namespace modelfs {

struct ResolvedModel {
  ImageReference ref;           // as given
  std::string registry;         // where M lives: V's record, or ref's registry
  std::string repository;       // M's repository on `registry` (V's record, or ref's)
  Descriptor model_descriptor;  // M
  std::string model_manifest_json;
  Manifest model;
  std::vector<ModelLayer> layers;  // M's layers with paths
  std::optional<ModelPackConfig> config;
  std::string config_json;
  // Present when ref named a volume image:
  std::optional<Descriptor> volume_descriptor;
  std::string volume_manifest_json;
  std::string volume_layer_tar;  // A, verified
  // V's index layers (below A, in V's order) and V's config, verified; empty when V has none.
  std::vector<std::string> volume_index_layer_tars;
  std::string volume_config_json;
  std::map<Digest, ChunkIndex> chunk_indexes;  // by layer digest
  // Compressed layers' seek indexes, by (compressed) layer digest; such a layer's chunk index
  // covers its uncompressed tar (ChunkIndex::Content::kUncompressed).
  // Shared with the decoding source that serves the layer (a 2 GiB layer's index holds about
  // 13 MB of windows: never copied).
  std::map<Digest, std::shared_ptr<const SeekIndex>> seek_indexes;
  // Gzip layers whose windows are fetched per point (V revision 2, docs/seek-index.md
  // "Windows file"), by layer digest: the table (its index is the one in seek_indexes, every
  // point, no window inline) and where the windows file lies, in V's repository, which is M's
  // (V elsewhere: no entry, and the inline seek index serves as before).
  struct SeekWindowsLocation {
    std::shared_ptr<const SeekWindowsTable> table;
    Digest layer;         // V's windows layer
    uint64_t offset = 0;  // of the windows file in it
  };
  std::map<Digest, SeekWindowsLocation> seek_windows;
  // Tar layers' header records from V, by layer digest (core/oci/tar_headers.h): the mount
  // indexes those tars from them instead of reading their headers from the layers. Trusted as V
  // is, unless tar_headers_unpinned.
  std::map<Digest, std::shared_ptr<const TarHeaders>> tar_headers;
  // V was pinned by nobody (the lazy-image path: found among an image's referrers). The tree is
  // still built from its records, but nothing of the model is served until they are found to
  // be the layers' own bytes (LoadedModel::records_check, core/model/tar_records_check.h).
  bool tar_headers_unpinned = false;
  // V's tensor index references (revision 2, docs/tensor-index.md), by layer digest: the
  // index file's digest and tensor count, for .modelinfo.json. The indexes themselves are read
  // only by those that need them (ListModelTensors), from the verified volume layers above.
  std::map<Digest, VolumeTensorIndexRef> tensor_index_refs;
  // A tar layer's (layers[i].tensorIndexes), by (layer digest, the member's data offset in the
  // tar): the file a mount shows at that offset of that layer.
  std::map<std::pair<Digest, uint64_t>, VolumeTensorIndexRef> tar_tensor_index_refs;
  // V's record: the directory M's files appear under (mount, pull, the snapshotter); "" = root.
  std::string path_prefix;
  // M is an ordinary container image (OCI or Docker v2; a KServe modelcar), not a model
  // artifact: `layers` are its filesystem layers (kind kImage, no paths), which mount and pull
  // merge in order with whiteouts (core/oci/image_tree.h); `image_diff_ids` are its config's
  // rootfs.diff_ids, one per layer, which every decompressed layer is checked against.
  bool image = false;
  std::vector<Digest> image_diff_ids;
  // Present when M is a state artifact S (core/oci/state_artifact.h), not a model: its verified
  // config, whose model is S's subject. `model*` and `layers` then describe S.
  std::optional<StateConfig> state;
};

// True for an ordinary container image manifest: an OCI or Docker image config and every layer
// an OCI or Docker filesystem layer (tar, tar+gzip, tar+zstd). False for model artifacts and
// volume images.
bool IsContainerImageManifest(const Manifest& m);

// The diff ID M's ModelPack config (or an image's rootfs.diff_ids) gives layer `i` (the digest of
// its uncompressed content), or nullopt when the config gives none, or gives the layer's own
// digest: some publishers record the digest of the layer as stored for every layer, compressed or
// not, and that digest is checked anyway. Errors: kInvalidArgument when the config lists diffIds,
// but not one per layer.
absl::StatusOr<std::optional<Digest>> LayerDiffId(const ResolvedModel& model, size_t i);

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
  // The fetcher for another registry (a volume image whose model lives there); it stays owned
  // by this one. Default: kFailedPrecondition naming the registry.
  virtual absl::StatusOr<ModelFetcher*> OnRegistry(const std::string& registry);
};

// A ModelFetcher over a registry client; `connect` (optional) reaches other registries.
class RegistryModelFetcher final : public ModelFetcher {
 public:
  explicit RegistryModelFetcher(RegistryClient& client, RegistryConnector connect = nullptr)
      : client_(client), connect_(std::move(connect)) {}
  absl::StatusOr<ManifestResult> GetManifest(const std::string& repository,
                                             const std::string& reference) override;
  absl::StatusOr<std::string> GetBlob(const std::string& repository, const Descriptor& d,
                                      uint64_t max_bytes) override;
  absl::StatusOr<ModelFetcher*> OnRegistry(const std::string& registry) override;

 private:
  RegistryClient& client_;
  RegistryConnector connect_;
  std::map<std::string, std::shared_ptr<RegistryClient>> others_;
  std::map<std::string, std::unique_ptr<RegistryModelFetcher>> fetchers_;
};

// Fetches ref. A pinned digest is verified; a volume image's layer is fetched whole and
// verified, and its chunk indexes checked against model.json; M is fetched by digest from the
// repository V's record names (through `connect` when that is on another registry). An image
// index (a multi-platform modelcar) resolves to its manifest for this node's platform
// (SelectPlatformManifest), checked against the index's digest for it.
// Errors: kNotFound, kDataLoss (digest mismatch), kInvalidArgument (not a model / not a
// volume image / a record naming no valid repository), kPermissionDenied (a layer path that
// escapes), kFailedPrecondition (M on another registry and no way to reach it).
// `check_location` (optional) is asked, before anything of M is requested, whenever V's record
// puts M anywhere but V's own repository (registry, repository); its error ends the resolution.
using ModelLocationCheck =
    std::function<absl::Status(const std::string& registry, const std::string& repository)>;
absl::StatusOr<ResolvedModel> ResolveModel(RegistryClient& client, const ImageReference& ref,
                                           const RegistryConnector& connect = nullptr,
                                           const ModelLocationCheck& check_location = nullptr);
absl::StatusOr<ResolvedModel> ResolveModel(ModelFetcher& fetcher, const ImageReference& ref,
                                           const ModelLocationCheck& check_location = nullptr);

// The node's architecture as OCI platforms name it (GOARCH: "amd64", "arm64", ...).
std::string HostArchitecture();
// The manifest of `index` that a linux/`architecture` node runs (what containerd picks):
// attestation manifests and nested indexes are skipped, and an index holding one manifest
// without a platform gives that one. `what` names the index in errors. Errors: kNotFound
// listing the platforms offered.
absl::StatusOr<Descriptor> SelectPlatformManifest(const Index& index,
                                                  const std::string& architecture,
                                                  const std::string& what);

// Fetches a whole blob into memory, refusing more than max_bytes, and verifies its digest.
absl::StatusOr<std::string> FetchVerifiedBlob(RegistryClient& client, const std::string& repo,
                                              const Descriptor& d, uint64_t max_bytes);

}  // namespace modelfs
