// NodeStatus: what the daemon holds, as `modelfs node ls` shows it (ModelSnapshotter::Status,
// served over the admin socket, snapshotter/admin). Plain values, taken in one pass: the
// snapshotter's models and snapshots under its lock, then the cache's layer table under the
// cache's lock, so the two halves may differ by what changed in between.
//
// NodeAdmin is the interface the admin service (snapshotter/admin) serves, which
// ModelSnapshotter implements; its tests serve a fake.
//
// Thread-safety: plain values; NodeAdmin's methods may be called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace modelfs::snapshotter {

// A snapshot that holds a model: the model snapshot itself (committed, labelled with the
// model) or one on top of it (a container's root filesystem, an image volume's view).
struct NodeSnapshot {
  std::string key;
  std::string kind;       // committed | active | view
  std::string image;      // the image reference the CRI label names; "" when none
  std::string container;  // the container (or sandbox, for an image volume) the key names; ""
};

// A layer that is quarantined (failed verification) or being scrubbed now.
struct NodeLayer {
  std::string digest;
  uint64_t size = 0;
  bool quarantined = false;
  bool scrubbing = false;
  std::vector<std::string> models;  // M digests that reference it
};

struct NodeModel {
  std::string name;           // sha256-<hex of M>, the directory under <root>/mnt
  std::string model_digest;   // M
  std::string volume_digest;  // V; "" when the model was named directly (content store)
  std::string reference;      // the reference it was resolved from (V's, pinned)
  std::string registry;       // where M's layers are fetched from; "" for the content store
  std::string repository;
  std::string state;            // loading | ready | failed
  std::string error;            // why it failed ("" otherwise)
  bool prefetched = false;      // registered by `modelfs node prefetch` (held without snapshot)
  uint64_t layers = 0;          // layers of M the cache holds for it
  uint64_t size = 0;            // bytes of those layers
  uint64_t cached_bytes = 0;    // on disk
  uint64_t verified_bytes = 0;  // verified in this process (all of them once sealed)
  bool sealed = false;          // every layer verified, on disk and sealed
  uint64_t passthrough_opens = 0;
  std::vector<NodeSnapshot> snapshots;
};

struct NodeRegistryError {
  std::string registry;
  absl::Time at = absl::InfinitePast();
  std::string message;
  uint64_t count = 0;
};

struct NodeStatus {
  std::vector<NodeModel> models;  // by name
  // The cache: bytes on disk against the bound (cache.max_size_gib; 0 = unbounded), layers in
  // its table, whether the disk is full.
  uint64_t cache_bytes = 0;
  uint64_t cache_max_bytes = 0;
  uint64_t cache_layers = 0;
  bool disk_full = false;
  std::vector<NodeLayer> layers;  // quarantined or being scrubbed
  // The last error per registry: fetches of the cache and the daemon's own resolutions
  // (Prepare, prefetch), the later of the two.
  std::vector<NodeRegistryError> errors;  // by registry
};

// Progress of a prefetch (ModelSnapshotter::Prefetch), reported as it goes.
struct PrefetchProgress {
  std::string phase;  // resolving | registering | fetching | done
  std::string model_digest;
  uint64_t layers = 0;
  uint64_t layers_sealed = 0;
  uint64_t total_bytes = 0;
  uint64_t verified_bytes = 0;
};

// What an evict did (ModelSnapshotter::Evict).
struct EvictOutcome {
  std::string model_digest;
  bool was_registered = false;  // the model was registered (held by a prefetch) until now
  uint64_t layers_evicted = 0;
  uint64_t bytes_evicted = 0;
  uint64_t layers_kept = 0;  // shared with another model, or busy
};

// The node's admin verbs (ModelSnapshotter's Status, Prefetch and Evict document them).
class NodeAdmin {
 public:
  virtual ~NodeAdmin() = default;
  virtual NodeStatus Status() = 0;
  virtual absl::Status Prefetch(const std::string& reference,
                                const std::function<void(const PrefetchProgress&)>& progress,
                                const std::function<bool()>& cancelled, absl::Duration interval,
                                absl::Duration stall) = 0;
  virtual absl::StatusOr<EvictOutcome> Evict(const std::string& reference) = 0;
};

}  // namespace modelfs::snapshotter
