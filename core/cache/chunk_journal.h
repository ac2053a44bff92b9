// ChunkJournal: the cache's crash-safe record of what its data files hold (SQLite, WAL), the
// `cache.db` of docs/cache-format.md. It knows rows, not files: the cache writes a row only
// after the bytes it describes are on disk (fdatasync), so a recorded chunk never points at
// bytes that were not written.
//
// Thread safety: all methods are safe to call concurrently (one internal mutex, a leaf: no
// callback runs under it except RecordChunks' `still_current`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

struct sqlite3;

namespace modelfs {

// One row of `layers` (docs/cache-format.md), and with LoadAll the chunks recorded for it.
struct LayerRecord {
  std::string digest;  // as stored: "sha256:<hex>" (LoadAll does not check it)
  uint64_t size = 0;
  uint64_t chunk_size = 0;
  int mode = 0;  // VerifyMode as stored: 0 chunk, 1 whole-layer, 2 insecure-stream
  bool whole_verified = false;
  std::string local_index;  // 32 bytes per chunk (whole-layer modes), or empty
  int64_t last_used = 0;
  std::string seal;      // "" when not sealed
  bool audited = false;  // chunk mode: the whole-layer audit (or a scrub) matched its digest
  // The data file's fs-verity digest ("sha256:<hex>") once fs-verity was enabled on it with
  // the seal below; "" when it has none.
  std::string verity;
  std::vector<uint64_t> chunks;
  // Byte ranges (offset, length) kept in member files (layer_segments.h), by offset.
  std::vector<std::pair<uint64_t, uint64_t>> members;
};

class ChunkJournal {
 public:
  ChunkJournal() = default;
  ~ChunkJournal();
  ChunkJournal(const ChunkJournal&) = delete;
  ChunkJournal& operator=(const ChunkJournal&) = delete;

  // Opens `path` (or ":memory:") with the schema, upgrading older caches (the seal, audited and
  // verity columns).
  // Errors: kInternal naming the path and SQLite's message.
  absl::Status Open(const std::string& path);

  // Every layer row with its recorded chunks, in digest order.
  absl::StatusOr<std::vector<LayerRecord>> LoadAll();
  // Inserts or replaces the row of `r.digest` (r.chunks is ignored).
  absl::Status UpsertLayer(const LayerRecord& r);
  // Records `chunks` of `digest` in one transaction, if `still_current()` says yes when asked
  // under the journal's lock: Forget runs under the same lock, so the rows of a layer dropped
  // meanwhile are either never written or deleted after.
  absl::Status RecordChunks(const std::string& digest, const std::vector<uint64_t>& chunks,
                            const std::function<bool()>& still_current);
  // Replaces the layer's member layout (offset, length pairs) in one transaction.
  absl::Status RecordMembers(const std::string& digest,
                             const std::vector<std::pair<uint64_t, uint64_t>>& members);
  // Deletes the layer's row, its chunks and its member layout. Errors are ignored: an orphan row is
  // dropped on the next Open, since its data file is gone.
  void Forget(const std::string& digest);
  // Remembers that decoding layer `source` (a compressed tar layer) gave layer `digest`, so a
  // later process finds the decoded layer without decoding again. A hint only: the decoded
  // layer is trusted through its own row and seal.
  absl::Status RecordDecoded(const std::string& source, const std::string& digest);
  // The digest RecordDecoded stored for `source`; "" when none (or on error).
  std::string DecodedOf(const std::string& source);
  // The layer's LRU stamp; a failure only costs eviction order.
  void Touch(const std::string& digest, int64_t last_used);
  // The layer was audited against its digest; a failure only costs a second audit.
  absl::Status MarkAudited(const std::string& digest);
  // fs-verity was enabled on the layer's data file: its new `seal` (enabling changes the
  // ctime) and `verity` digest. A failure only costs the layer's trust at the next Open (it is
  // re-hashed then).
  absl::Status RecordVerity(const std::string& digest, const std::string& seal,
                            const std::string& verity);

 private:
  absl::Status ExecLocked(const std::string& sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasColumnLocked(const std::string& table, const std::string& column)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::string path_ ABSL_GUARDED_BY(mu_);
  sqlite3* db_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace modelfs
