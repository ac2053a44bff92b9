// DecodedLayers: a compressed tar layer (.tar+gzip, .tar+zstd) served as the layer of its
// decompressed bytes, keyed by their digest, with its own data file, verified and sealed before
// it is registered (docs/cache-format.md, "Decoded layers"; BlobCache::RegisterDecodedLayer says
// what Register does and its errors).
//
// A client of the LayerTable (layer_table.h): it registers the decoded layer through the cache
// (RegisterFn: BlobCache::RegisterLayer) and checks it through LayerAudit.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/clock.h"
#include "core/cache/cache_options.h"
#include "core/cache/chunk_journal.h"
#include "core/cache/layer_audit.h"
#include "core/cache/layer_store.h"
#include "core/cache/layer_table.h"
#include "core/cache/remote_blob_source.h"
#include "core/oci/digest.h"
#include "core/oci/layer_decoder.h"

namespace modelfs {

class DecodedLayers {
 public:
  // Registers a layer for a model, as BlobCache::RegisterLayer.
  using RegisterFn = std::function<absl::Status(const LayerSpec& spec)>;

  // Every reference and `remote` must outlive it.
  DecodedLayers(LayerTable& table, const CacheOptions& options, RemoteBlobSource* remote,
                Clock* clock, const LayerStore& store, ChunkJournal& journal,
                CacheCounters& counters, LayerAudit& audit, RegisterFn register_layer)
      : table_(table),
        options_(options),
        remote_(remote),
        time_(clock),
        store_(store),
        journal_(journal),
        counters_(counters),
        audit_(audit),
        register_layer_(std::move(register_layer)) {}
  DecodedLayers(const DecodedLayers&) = delete;
  DecodedLayers& operator=(const DecodedLayers&) = delete;

  // Registers the decompressed form of a compressed tar layer for `spec.model_ref` as a layer
  // of its own, keyed by the digest of the decompressed bytes (docs/cache-format.md, "Decoded
  // layers"), and returns that digest and size. Blocks until the layer is verified and sealed:
  // the compressed layer is fetched whole and checked against its digest (whole-layer mode),
  // decompressed into its own data file (streamed, bounded memory), checked against
  // `spec.diff_id` when given, then hashed and sealed like a whole-verified layer; the compressed
  // copy is then unreferenced (evictable). A decoded layer found sealed (by its diff ID, or by
  // the record of an earlier decode of the same source) is used without any of that. Decoded
  // layers are never fetched: until the call returns OK nothing of it is served.
  // Errors: kDataLoss naming the layer (compressed layer failing its digest, a corrupt or
  // truncated stream, the diffId not matching: both digests), kResourceExhausted (disk full),
  // kDeadlineExceeded (the compressed fetch stopped making progress), RegisterLayer's errors.
  absl::StatusOr<DecodedLayer> Register(const DecodedLayerSpec& spec);

 private:
  // The decoded layer `digest` for `model_ref` if the cache holds it usable (verified and
  // sealed, or registered in this process); its size, else nullopt.
  std::optional<uint64_t> ReuseDecoded(const Digest& digest, const std::string& model_ref);
  // Decodes `spec.source` into a new data file and installs it, its compressed bytes
  // streamed from the remote through a CompressedStream.
  class CompressedStream;
  absl::StatusOr<DecodedLayer> DecodeAndInstall(const DecodedLayerSpec& spec);
  void Log(const log::Event& event) const { LogCacheEvent(options_, event); }

  LayerTable& table_;
  const CacheOptions& options_;
  RemoteBlobSource* const remote_;
  Clock* const time_;
  const LayerStore& store_;
  ChunkJournal& journal_;
  CacheCounters& counters_;
  LayerAudit& audit_;
  const RegisterFn register_layer_;
  // Compressed layers being decoded: one decode per source at a time.
  absl::flat_hash_set<Digest> decoding_ ABSL_GUARDED_BY(table_.mu());
};

}  // namespace modelfs
