// The volume image V (docs/volume-image.md): an ordinary OCI image that stands for a ModelPack
// artifact M, so containerd's CRI path (which only hands image layers to a snapshotter) can
// reach the modelfs snapshotter. V's top layer A, a small uncompressed tar, holds `.modelfs/`:
// model.json (M's digest, repository and layers), one chunk index per layer of M, and a README
// explaining that the directory is only a pointer. A carries `containerd.io/snapshot/modelfs.*`
// annotations, which containerd passes to the snapshotter as Prepare labels; V's `subject` is M.
// Below A there may be index layers (the chunk indexes, when they would make A pass 4 MiB) and,
// in the image-compatible profile, M's own tar blobs, each annotated with kLabelRole.
//
// Everything here is deterministic: the same M, repository and chunk indexes give the same V
// digest. Trust: V is pinned by digest; its config's diff_ids[0] names A; A (verified whole)
// names M and each chunk index by digest; ParseVolumeLayer checks every index against
// model.json and CheckVolumeMatchesModel checks model.json against the verified M.
//
// The parts: building V (volume_image.cc), model.json and reading V's files back
// (volume_model_json.cc), and the snapshotter's checks of V: labels, A's place, the chain-ID
// bindings, model.json against M (volume_binding.cc).
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/oci/chunk_index.h"
#include "core/oci/descriptor.h"
#include "core/oci/manifest.h"
#include "core/oci/seek_index.h"
#include "core/oci/seek_windows.h"
#include "core/oci/tar_headers.h"
#include "core/oci/tensor_index.h"

namespace modelfs {

// Paths inside layer A.
inline constexpr std::string_view kVolumeDir = ".modelfs";
inline constexpr std::string_view kVolumeModelJsonPath = ".modelfs/model.json";
inline constexpr std::string_view kVolumeReadmePath = ".modelfs/README.txt";
inline constexpr std::string_view kVolumeChunksDir = ".modelfs/chunks";
inline constexpr std::string_view kVolumeSeekDir = ".modelfs/seek";
inline constexpr std::string_view kVolumeTarDir = ".modelfs/tar";
inline constexpr std::string_view kVolumeTensorsDir = ".modelfs/tensors";
// Layer A must stay small: containerd unpacks it on nodes without modelfs.
inline constexpr uint64_t kMaxVolumeLayerBytes = 4ull << 20;
// Index files that would make A larger go into index layers below A (docs/volume-image.md,
// "Index layers"): each holds at most this many bytes of files, and all of them together at
// most kMaxVolumeIndexBytes (what a reader keeps in memory for one model).
inline constexpr uint64_t kMaxIndexLayerBytes = 64ull << 20;
inline constexpr uint64_t kMaxVolumeIndexBytes = 256ull << 20;
// The index bytes ChunkSizeForLayers aims for when no chunk size is asked for: 1 MiB chunks up
// to about 1.5 TiB of weights.
inline constexpr uint64_t kAutoVolumeIndexBytes = 48ull << 20;
// The inline seek indexes of a model's compressed layers together, at most (push and convert
// thin each layer's index to its share by compressed size, ThinSeekIndex): a reader without
// windows support fetches every inline window when the model mounts. At gzip's 4 MiB spacing a
// layer's windows are about 0.6% of it, so layers up to about 10 GiB in all keep every point (as
// before there was a budget: one layer's index may not pass kMaxIndexLayerBytes anyway); a
// 140 GB gzip layer keeps about one in 13 (a point every ~52 MiB). With kAutoVolumeIndexBytes
// this stays within kMaxVolumeIndexBytes. The windows files (revision 2) keep every point.
inline constexpr uint64_t kSeekIndexBudgetBytes = 64ull << 20;
// Past this many bytes of inline seek indexes (gzip layers given seek windows; about ten 4 MiB
// points, a 40 MiB layer), V carries windows files (revision 2) and a mount fetches their
// tables only: below it, the inline indexes cost a mount less than a range request per window.
inline constexpr uint64_t kSeekWindowsMinInlineBytes = 256ull << 10;

// Annotations on A (and so snapshotter Prepare labels). containerd forwards annotations with
// the prefix "containerd.io/snapshot/" when snapshot annotations are enabled.
inline constexpr std::string_view kLabelModel = "containerd.io/snapshot/modelfs.model";
inline constexpr std::string_view kLabelModelSize = "containerd.io/snapshot/modelfs.model.size";
inline constexpr std::string_view kLabelModelMediaType =
    "containerd.io/snapshot/modelfs.model.mediatype";
inline constexpr std::string_view kLabelRepository = "containerd.io/snapshot/modelfs.repository";
inline constexpr std::string_view kLabelProfile = "containerd.io/snapshot/modelfs.profile";
inline constexpr std::string_view kVolumeProfileV1 = "v1";
// The role of a layer of V below A, on that layer (so a Prepare label): "index" for an index
// layer. A itself carries none.
inline constexpr std::string_view kLabelRole = "containerd.io/snapshot/modelfs.role";
inline constexpr std::string_view kVolumeRoleIndex = "index";
// A layer holding one gzip layer's seek windows file (`.modelfs/seek/<hex>.win`, revision 2):
// read by range, a window at a time, never whole. Readers without windows support ignore it
// (they only fetch "index" layers), and a snapshotter answers for it as for any role.
inline constexpr std::string_view kVolumeRoleWindows = "windows";
// On an index layer that holds only the inline seek indexes of layers that also have windows
// (value "true"): the fallback for readers without windows support, which a reader using the
// windows does not fetch (docs/volume-image.md, "Seek windows").
inline constexpr std::string_view kAnnotationSeekFallback = "dev.modelfs.volume.seek-fallback";
// The image-compatible profile: a layer of V that is one of M's own tar blobs.
inline constexpr std::string_view kVolumeRoleModel = "model";
// On V's manifest: "image-compatible" for that profile (docs/volume-image.md).
inline constexpr std::string_view kAnnotationVolumeProfile = "dev.modelfs.volume.profile";
inline constexpr std::string_view kVolumeProfileImageCompatible = "image-compatible";
// Annotation on V's manifest naming M (for humans and referrer listings).
inline constexpr std::string_view kAnnotationVolumeModel = "dev.modelfs.volume.model";

// model.json, schemaVersion 1. `schemaVersion` changes only for what a reader of the older tree
// could not serve correctly (it refuses any other value); additive content raises `revision`
// instead, which readers take whatever its value (docs/volume-image.md, "Revisions").
inline constexpr int kVolumeRevisionTensorIndex = 2;
inline constexpr int kVolumeRevisionSeekWindows = 2;
// "seekIndex.windows" in model.json (revision 2): the gzip layer's seek windows file
// (core/oci/seek_windows.h). The table (every point, each window's place and SHA-256) is also
// an index file of its own, `table_path`, fetched at mount like the other indexes; the windows
// file sits alone in the windows layer `layer` of V at byte `offset`, and a decode fetches a
// window from there by range when it first starts at its point.
struct VolumeSeekWindowsRef {
  std::string path;        // ".modelfs/seek/<layer hex>.win", in the windows layer
  Digest digest;           // SHA-256 of the table (the file's first table_size bytes)
  uint64_t points = 0;     // every 4 MiB point of the layer (the seek index may keep fewer)
  std::string table_path;  // ".modelfs/seek/<layer hex>.wt": the table alone, an index file
  uint64_t table_size = 0;
  Digest layer;         // the windows layer of V (kVolumeRoleWindows) holding `path`
  uint64_t offset = 0;  // where the file's bytes start in that layer (a tar)
  friend bool operator==(const VolumeSeekWindowsRef&, const VolumeSeekWindowsRef&) = default;
};
struct VolumeChunkIndexRef {
  std::string path;  // ".modelfs/chunks/<layer hex>.idx"
  Digest digest;     // SHA-256 of the index file
  uint64_t chunk_size = 0;
  // The chunk hashes' algorithm, "algorithm" in model.json (written only for BLAKE3, so a V
  // with SHA-256 indexes keeps the bytes it had before the field existed).
  ChunkDigestAlgorithm algorithm = ChunkDigestAlgorithm::kSha256;
  // What the hashes cover, "content" in model.json: written only as "uncompressed", for the
  // index of a compressed layer's tar (which then has a seek index too).
  ChunkIndex::Content content = ChunkIndex::Content::kStored;
  friend bool operator==(const VolumeChunkIndexRef&, const VolumeChunkIndexRef&) = default;
};
// "seekIndex" in model.json: the entry points into a compressed (.tar+gzip, .tar+zstd) layer
// (docs/seek-index.md), so its uncompressed bytes are served lazily.
struct VolumeSeekIndexRef {
  std::string path;  // ".modelfs/seek/<layer hex>.idx"
  Digest digest;     // SHA-256 of the seek index file
  // A compressed codec, by its seek_name: "gzip" or "zstd".
  LayerEncoding encoding = LayerEncoding::kTarGzip;
  Digest diff_id;  // SHA-256 of the uncompressed tar
  uint64_t uncompressed_size = 0;
  uint64_t points = 0;  // 1: a single zstd frame, which can only be decoded whole
  // Revision 2, gzip layers only (a codec with windowed_points).
  std::optional<VolumeSeekWindowsRef> windows;
  friend bool operator==(const VolumeSeekIndexRef&, const VolumeSeekIndexRef&) = default;
};
// "tarHeaders" in model.json: the header bytes of a tar layer's tar (core/oci/tar_headers.h),
// so a mount indexes it without reading the layer.
struct VolumeTarHeadersRef {
  std::string path;  // ".modelfs/tar/<layer hex>.hdr"
  Digest digest;     // SHA-256 of the file
  uint64_t entries = 0;
  friend bool operator==(const VolumeTarHeadersRef&, const VolumeTarHeadersRef&) = default;
};
// "tensorIndex" in model.json (revision 2): the weight file's tensor index
// (core/oci/tensor_index.h), so diff and inspect --tensors read no weight.
// In "tensorIndexes" (a tar layer's weight files, one index each), also `file`.
struct VolumeTensorIndexRef {
  std::string path;  // ".modelfs/tensors/<layer hex>.tidx" ("<layer hex>-<i>.tidx" in a tar)
  Digest digest;     // SHA-256 of the file
  uint64_t tensors = 0;
  std::string file;  // "tensorIndexes" only: the member's path in the tar (normalized)
  friend bool operator==(const VolumeTensorIndexRef&, const VolumeTensorIndexRef&) = default;
};
struct VolumeLayerRecord {
  Digest digest;  // the layer of M
  uint64_t size = 0;
  std::string media_type;
  std::string path;  // org.cncf.model.filepath of the layer ("" for a tar layer without one)
  std::optional<VolumeChunkIndexRef> chunk_index;  // absent: verify the layer whole
  // Compressed layers: with it, chunk_index covers the uncompressed tar (content kUncompressed,
  // blob digest = seek_index->diff_id).
  std::optional<VolumeSeekIndexRef> seek_index;
  // A tar layer's header records: of the layer itself when uncompressed, else of the tar its
  // seek index names (a compressed layer has them only beside a seek index).
  std::optional<VolumeTarHeadersRef> tar_headers;
  std::optional<VolumeTensorIndexRef> tensor_index;  // revision 2; absent: no index
  // "tensorIndexes" (revision 2): a tar layer's weight files, in tar order; each index
  // describes the tar (the layer's own digest, or its seek index's diffId) and the member.
  // Empty: the tar was followed and holds none; absent: not known (readers stream the layer).
  std::optional<std::vector<VolumeTensorIndexRef>> tar_tensor_indexes;
  friend bool operator==(const VolumeLayerRecord&, const VolumeLayerRecord&) = default;
};
struct VolumeModelInfo {
  int schema_version = 1;
  // 1 (written as no field) for V without revision-2 content; kVolumeRevisionTensorIndex when
  // a layer has a tensor index.
  int revision = 1;
  Descriptor manifest;                    // M: mediaType, digest, size (artifactType when known)
  std::string repository;                 // where M lives, "host[:port]/path" without tag or digest
  std::vector<VolumeLayerRecord> layers;  // M's layers, in M's order
  // A directory V shows M's files under ("models" for KServe's oci+native://, which mounts
  // the image with subPath: models); empty: at the root. Written only when set.
  std::string path_prefix;
  friend bool operator==(const VolumeModelInfo&, const VolumeModelInfo&) = default;
};
std::string SerializeVolumeModelJson(const VolumeModelInfo& info);
// Errors: kInvalidArgument naming the field; unsafe paths are kPermissionDenied.
absl::StatusOr<VolumeModelInfo> ParseVolumeModelJson(std::string_view bytes);

struct VolumeImageInput {
  Descriptor model_manifest;  // M's descriptor (mediaType, digest, size[, artifactType])
  Manifest model;             // M itself, for its layers
  std::string repository;
  std::string path_prefix;  // VolumeModelInfo::path_prefix; must pass CheckRelativePath
  // Any order, matched to M's layers by blob digest. A layer without one is verified whole.
  std::vector<ChunkIndex> chunk_indexes;
  // Any order, matched to M's compressed layers by layer digest; each needs the chunk index of
  // its uncompressed bytes in chunk_indexes (content kUncompressed, blob digest = diff_id).
  std::vector<SeekIndex> seek_indexes;
  // Revision 2: gzip seek indexes with every point (before ThinSeekIndexes), matched to
  // seek_indexes by layer digest. Used when their layers' inline seek indexes are over
  // kSeekWindowsMinInlineBytes in all: then each becomes a windows file in a windows layer,
  // with its table among the index files, and the layer's (thinned) seek index moves to a
  // seek-fallback index layer.
  std::vector<SeekIndex> seek_windows;
  // Any order, matched to M's tar layers by the digest of the tar (an uncompressed layer's
  // digest, a compressed one's diffId from its seek index). A layer without them is indexed
  // from its own bytes at mount.
  std::vector<TarHeaders> tar_headers;
  // Any order, matched to M's layers by layer digest (TensorIndex::layer_digest).
  std::vector<TensorIndex> tensor_indexes;
  // The weight files inside tar layers, matched to M's tar layers by the digest of the tar as
  // tar_headers are (TarTensorIndexes::tar_digest).
  std::vector<TarTensorIndexes> tar_tensor_indexes;
  std::string architecture = "amd64";
  std::string os = "linux";
  // RFC 3339; when set, V's org.opencontainers.image.created annotation (the model's own time,
  // so the same M always gives the same V).
  std::string created;
  // The image-compatible profile: V's layers are M's own tar blobs (as
  // application/vnd.oci.image.layer.v1.tar, annotated kLabelRole = "model"), then any index
  // layers, then A; containerd without modelfs unpacks the model itself. Every layer of M must
  // be an uncompressed tar (anything else would copy its bytes). The tars' members carry any
  // path prefix themselves (the caller checks that), so model.json records none.
  bool image_compatible = false;
};

// A blob of V and its descriptor.
struct VolumeBlob {
  Descriptor descriptor;
  std::string bytes;
};

struct VolumeImage {
  std::string layer;            // A, an uncompressed tar
  Descriptor layer_descriptor;  // with the containerd.io/snapshot/modelfs.* annotations
  // Uncompressed tars below A, in V's layer order, each annotated kLabelRole = "index": the
  // index files when A would exceed kMaxVolumeLayerBytes with them (then A holds none). The
  // windows layers (kLabelRole = "windows") come first, then the seek-fallback index layers.
  std::vector<VolumeBlob> index_layers;
  std::string config;  // OCI image config JSON
  Descriptor config_descriptor;
  Manifest manifest;
  std::string manifest_json;       // the bytes to push; their digest is V's digest
  Descriptor manifest_descriptor;  // OCI manifest media type, artifactType = volume type
  VolumeModelInfo model_info;
};

// A holds every index file when it stays within kMaxVolumeLayerBytes with them (so a V that
// fits is byte for byte what it was before index layers existed); otherwise every index file
// goes into index layers below A, packed in path order, at most kMaxIndexLayerBytes each.
// Errors: kInvalidArgument when a chunk index names no layer of M or disagrees with the layer's
// size, when one index file is over kMaxIndexLayerBytes or all of them over
// kMaxVolumeIndexBytes, or when A would exceed kMaxVolumeLayerBytes without them, or (image
// compatible) when a layer of M is not an uncompressed tar;
// kPermissionDenied for an unsafe layer path in M.
absl::StatusOr<VolumeImage> BuildVolumeImage(const VolumeImageInput& input);

// The chunk size for the indexes of layers of these sizes: the smallest power of two from
// `at_least` (ChunkIndex::kDefaultChunkSize when 0) up to ChunkIndex::kMaxChunkSize with which
// no layer's index is over kMaxIndexLayerBytes and all of them are within
// kAutoVolumeIndexBytes (no `at_least`) or kMaxVolumeIndexBytes (an asked-for size). So a
// model of up to about 1.5 TiB keeps 1 MiB chunks; one of up to 96 TiB gets a chunk size by
// itself, and one of up to 512 TiB with --chunk-size 64MiB. Errors: kInvalidArgument when even 64
// MiB chunks do not fit, naming the model's size, or when `at_least` is not a valid chunk size.
absl::StatusOr<uint64_t> ChunkSizeForLayers(const std::vector<uint64_t>& layer_sizes,
                                            ChunkDigestAlgorithm algorithm, uint64_t at_least = 0);
// The bytes of A that indexes of these layers at `chunk_size` need (an upper bound).
uint64_t VolumeLayerBytesFor(const std::vector<uint64_t>& layer_sizes, uint64_t chunk_size,
                             ChunkDigestAlgorithm algorithm);
// The bytes of the index files themselves.
uint64_t VolumeIndexBytesFor(const std::vector<uint64_t>& layer_sizes, uint64_t chunk_size,
                             ChunkDigestAlgorithm algorithm);

// The README text written to .modelfs/README.txt for M.
std::string VolumeReadme(const Descriptor& model_manifest, std::string_view repository);

struct VolumeLayerContents {
  VolumeModelInfo model;
  std::map<Digest, ChunkIndex> chunk_indexes;  // by layer digest
  std::map<Digest, SeekIndex> seek_indexes;    // by (compressed) layer digest
  // Revision 2: windows tables, by layer digest, checked against model.json and the layer.
  std::map<Digest, SeekWindowsTable> seek_windows;
  std::map<Digest, TarHeaders> tar_headers;      // by layer digest
  std::map<Digest, TensorIndex> tensor_indexes;  // by layer digest (revision 2)
  // A tar layer's weight files, by layer digest (revision 2); an empty list: none in the tar.
  std::map<Digest, std::vector<TarTensorIndex>> tar_tensor_indexes;
};
// Reads A (already verified against its digest by the caller). Each chunk index file is
// checked against model.json: digest (kDataLoss on mismatch), and blob digest, size and chunk
// size (kInvalidArgument). A seek index likewise (digest; layer digest and size, encoding,
// diffId, uncompressed size), and it must agree with its layer's chunk index of the
// uncompressed bytes. Tar headers likewise (digest; the tar they describe and its size), and
// tensor indexes (digest, kDataLoss; layer digest and size and tensor count, kInvalidArgument;
// a tar layer's describe its tar: the layer's digest and size, or its seek index's diffId and
// uncompressed size). A windows table likewise (digest, kDataLoss; layer, diffId, sizes and
// point count, kInvalidArgument); a layer with one may lack its inline seek index file (its
// seek-fallback layer was not read). A missing model.json or index file is kInvalidArgument.
absl::StatusOr<VolumeLayerContents> ParseVolumeLayer(std::string_view tar);
// The same over A and V's index layers (each verified by the caller), as containerd would
// unpack them: a file is looked up by path in A, then in the layers below it.
absl::StatusOr<VolumeLayerContents> ParseVolumeLayers(std::string_view a,
                                                      const std::vector<std::string>& index_layers);
// The files of V's `.modelfs/` by path: a tar's regular files, added over what `files` holds
// (an entry of another type hides the path). Views into `tar`, which must outlive them.
using VolumeFiles = std::map<std::string, std::string_view>;
absl::Status AddVolumeLayerFiles(std::string_view tar, VolumeFiles& files);
absl::StatusOr<VolumeLayerContents> ParseVolumeFiles(const VolumeFiles& files);

// What the snapshotter learns from Prepare labels (or from A's annotations in V's manifest).
struct VolumeLabels {
  Descriptor model;  // mediaType, digest, size
  std::string repository;
  std::string profile;
  friend bool operator==(const VolumeLabels&, const VolumeLabels&) = default;
};
std::map<std::string, std::string> MakeVolumeLabels(const Descriptor& model_manifest,
                                                    std::string_view repository);
// nullopt when there is no kLabelModel (an ordinary layer). Errors: kInvalidArgument for a
// malformed digest or size, or an unknown profile.
absl::StatusOr<std::optional<VolumeLabels>> ParseVolumeLabels(
    const std::map<std::string, std::string>& labels);

// True for a manifest shaped like V: artifactType is the volume type, or one tar layer carrying
// kLabelModel.
bool IsVolumeImageManifest(const Manifest& v);
// True for V of the image-compatible profile: a layer below A has kLabelRole = "model".
bool IsImageCompatibleVolume(const Manifest& v);

// The index of V's volume layer A: the one layer annotated with kLabelModel. Errors:
// kInvalidArgument when no layer, or more than one, carries it.
absl::StatusOr<size_t> VolumeLayerIndex(const Manifest& v);
// The positions of V's index layers (annotated kLabelRole = "index"), in order. Errors:
// kInvalidArgument when one is above A or is not an uncompressed tar.
absl::StatusOr<std::vector<size_t>> VolumeIndexLayerIndexes(const Manifest& v);

// What must hold before a snapshotter answers "already exists" for `target` with an empty
// snapshot for V's lower layer: the layer at the position whose chain ID is `target` carries
// kLabelRole, is an uncompressed tar below A, diff_ids names it there, and `parent` is the
// chain below it (as for CheckVolumeSnapshotBinding). Returns that position. Errors:
// kFailedPrecondition naming the first condition that fails.
absl::StatusOr<size_t> CheckVolumeLowerBinding(const Manifest& v,
                                               const std::vector<Digest>& diff_ids,
                                               std::string_view parent, std::string_view target);

// The chain ID of a stack of diff IDs (OCI image spec, config.md): chainID(L0) = diffID(L0),
// chainID(L0..n) = sha256(chainID(L0..n-1) + " " + diffID(n)). `diff_ids` must not be empty.
Digest ChainIdOf(const std::vector<Digest>& diff_ids);

// rootfs.diff_ids of an OCI image config. Errors: kInvalidArgument naming the field.
absl::StatusOr<std::vector<Digest>> ParseImageConfigDiffIds(std::string_view config_json);

// What must hold before a snapshotter answers "already exists" for `target` with the model
// that V's layer A points to (docs/volume-image.md): that answer promises
// containerd the snapshot holds A's content, so a wrong binding would let one image take over
// another image's chain ID. Given V's verified manifest and the diff_ids of its verified
// config:
//   - A is a layer of V, uncompressed (so its diff ID is its digest), and diff_ids has one
//     entry per layer with diff_ids[i] = A's digest;
//   - `parent` is the chain ID of the layers below A ("" when A is the first), as it is or as
//     containerd's metadata store names it in the backend ("<namespace>/<id>/<chain ID>");
//   - `target` is the chain ID of the layers up to and including A.
// Errors: kFailedPrecondition naming the first condition that fails.
absl::Status CheckVolumeSnapshotBinding(const Manifest& v, const std::vector<Digest>& diff_ids,
                                        std::string_view parent, std::string_view target);

// Checks model.json against the verified M: same digest as `model_manifest` and the same layers
// (digest, size, media type) in the same order. Errors: kDataLoss naming the first difference.
absl::Status CheckVolumeMatchesModel(const VolumeModelInfo& info, const Descriptor& model_manifest,
                                     const Manifest& model);

}  // namespace modelfs
