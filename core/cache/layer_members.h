// LayerMembers: a tar layer's larger members kept in files of their own (layer_segments.h,
// docs/cache-format.md, "Member files"), so that each can be served by FUSE passthrough once its
// chunks are verified. Set moves a layer's landed bytes into them while readers, flights and
// checks may be using the layer (layer_members.cc says how); OpenVerifiedFile hands one out.
//
// A client of the LayerTable (layer_table.h); it seals again through LayerAudit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/cache/cache_layer.h"
#include "core/cache/cache_options.h"
#include "core/cache/chunk_journal.h"
#include "core/cache/layer_audit.h"
#include "core/cache/layer_segments.h"
#include "core/cache/layer_store.h"
#include "core/cache/layer_table.h"
#include "core/oci/digest.h"

namespace modelfs {

// Opens the member files of `layout` for the layer `digest` whose data file is `layer_fd`
// (owned by the result, closed on error): created empty (`create`), or existing ones read-only
// or read-write. Errors: kDataLoss (a member file missing or of the wrong size), kInternal.
absl::StatusOr<std::shared_ptr<LayerSegments>> OpenMemberFiles(
    const LayerStore& store, const Digest& digest, int layer_fd,
    const std::vector<LayerMember>& layout, bool create, bool read_only);

class LayerMembers {
 public:
  // Every reference must outlive it.
  LayerMembers(LayerTable& table, const CacheOptions& options, const LayerStore& store,
               ChunkJournal& journal, LayerAudit& audit)
      : table_(table), options_(options), store_(store), journal_(journal), audit_(audit) {}
  LayerMembers(const LayerMembers&) = delete;
  LayerMembers& operator=(const LayerMembers&) = delete;

  // Keeps each of `files` of at least options.member_min_bytes in a member file of its own
  // (docs/cache-format.md): bytes already landed move there (the layer
  // file's copy is freed once no reader holds it) and the layout is journaled. Once set, a
  // layer's layout stays (a second call with other files is kFailedPrecondition). Errors:
  // kNotFound, kInvalidArgument (overlapping ranges, or past the layer's end), kDataLoss
  // (quarantined), kAborted (dropped meanwhile), kResourceExhausted (disk full); on any
  // error the layer is served from its data file as before.
  absl::Status Set(const Digest& digest, const std::vector<std::pair<uint64_t, uint64_t>>& files);
  // BlobCache::OpenVerifiedFile.
  int OpenVerifiedFile(const Digest& digest, uint64_t offset, uint64_t length);

 private:
  // The layer's local index (whole-layer modes) for its journal row; "" in chunk mode.
  static std::string LocalIndexOf(const CacheLayer& layer) ABSL_SHARED_LOCKS_REQUIRED(layer.mu);
  void Log(const log::Event& event) const { LogCacheEvent(options_, event); }

  LayerTable& table_;
  const CacheOptions& options_;
  const LayerStore& store_;
  ChunkJournal& journal_;
  LayerAudit& audit_;
  // One layout change at a time. Lock order: before the table's mutex.
  absl::Mutex mu_ ABSL_ACQUIRED_BEFORE(table_.mu());
};

}  // namespace modelfs
