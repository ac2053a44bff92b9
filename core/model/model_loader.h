// ModelLoader: turns a resolved model (M, and V's chunk indexes when present) into what the
// filesystem serves: layers registered with the verified cache, the file extents of every raw
// and tar layer, and the synthetic .modelinfo.json. Used by `modelfs mount` and the
// snapshotter's daemon, which mounts many models in one tree.
//
// Thread safety: LoadModel is a free function; the cache it is given is thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cache/blob_cache.h"
#include "core/cache/decoding_blob_source.h"
#include "core/model/tar_records_check.h"
#include "core/model/tree_file.h"
#include "core/oci/image_tree.h"
#include "core/resolve/model_ref.h"

namespace modelfs {

struct LoadOptions {
  // Serve bytes before they are verified (still checked when the layer completes). Opt-in only.
  bool insecure_stream = false;
  std::string reference;  // shown in .modelinfo.json
  // The cache's remote source, when it is a DecodingBlobSource: compressed layers with a seek
  // index (V's) are then served lazily through it. nullptr: decoded whole.
  DecodingBlobSource* decoding = nullptr;
  // Called once with M's digest and the result of checking tar header records nobody pinned
  // (ResolvedModel::tar_headers_unpinned) against the layers (LoadedModel::records_check): the
  // caller logs it (a failure is a refusal: the model serves no byte). May be empty.
  std::function<void(const std::string& model, const absl::Status&)> on_records_checked;
};

struct LoadedModel {
  std::string name;  // "sha256-<hex of M>": the model's directory in a multi-model tree
  std::vector<TreeFile> files;
  SyntheticFiles synthetic;    // .modelinfo.json
  std::vector<Digest> layers;  // registered with the cache under model_ref = M's digest
  std::string verification;    // "chunk-index", "whole-layer" or "unverified"
  // The mtime of every file and directory of the model (core/oci/model_time.h).
  int64_t mtime_sec = 0;
  // How each layer of M (by digest) is served: "chunk-index", "whole-layer", "unverified",
  // "lazy-seek-index" (a compressed layer decoded span by span through its seek index, each
  // chunk of the uncompressed bytes checked), or "decoded-whole" (a compressed layer fetched
  // whole, checked and decompressed first: a single zstd frame, or no seek index).
  std::map<std::string, std::string> layer_serving;
  // An ordinary image (ResolvedModel::image), and what merging its layers skipped or removed.
  bool image = false;
  ImageTreeCounts image_counts;
  // When tar layers were indexed from records nobody pinned: the check every file (and
  // .modelinfo.json) waits for before serving content, shared as their TreeFile::gate. The
  // caller starts it once the model is served (StartInBackground); a first read starts it
  // otherwise. nullptr: nothing to check.
  std::shared_ptr<TarRecordsCheck> records_check;
};

// Registers M's layers with the cache (chunk mode where V has an index, else whole-layer),
// indexes tar layers by range reads through the cache (so their headers are verified too), and
// makes .modelinfo.json from the files' headers on its first lookup. A compressed tar layer with
// a seek index in V (more than one point) is registered as a chunk-mode layer of its
// uncompressed bytes, named by its diffId, and served through options.decoding when given;
// otherwise it is fetched whole, checked against its digest, decompressed into a layer of its own
// and checked against M's diffId for it before the load returns (BlobCache::RegisterDecodedLayer);
// its files are served from that layer. An ordinary image (ResolvedModel::image) shows the
// merged tree of its layers (core/oci/image_tree.h): files, directories and symlinks. Errors:
// kDataLoss (a layer failing its checks, naming both digests), kInvalidArgument (a config whose
// diffIds are not one per layer), kPermissionDenied for unsafe paths; the cache's errors. A failed
// load takes back every cache reference held under M's digest (UnregisterModel), so the caller is
// left with nothing to undo; a caller must not load a model that is still registered in the same
// cache.
absl::StatusOr<LoadedModel> LoadModel(const ResolvedModel& model, BlobCache& cache,
                                      const LoadOptions& options);

// The part of LoadModel after the layers are registered, for any BlobReader that serves M's
// layers verified (the cache, or containerd's content store for an image volume naming M):
// the files of raw and tar layers (tar headers read through `reader`), V's path prefix, and a
// lazy .modelinfo.json that reads the headers through `reader` on first lookup (so `reader`
// must outlive the tree the files go to). `verification` is shown in .modelinfo.json.
// `layers` is left empty. Errors: kUnimplemented for compressed tar layers; kPermissionDenied
// for unsafe or duplicate paths; the reader's errors.
absl::StatusOr<LoadedModel> AssembleModel(const ResolvedModel& model, BlobReader& reader,
                                          const std::string& verification,
                                          const LoadOptions& options);

}  // namespace modelfs
