// SeekWindowSource: the gzip seek windows of one compressed layer, fetched per point when a
// decode first starts there (core/oci/seek_windows.h, docs/seek-index.md "Windows file").
// It holds the layer's windows table (pinned by model.json, fetched at mount) and a fetch of
// byte ranges of the windows file; Window(k) fetches window k by range, checks it against the
// table's SHA-256 before anyone sees it, and keeps it (at most kMaxBytes of windows, oldest
// dropped first: a window is about 24 KB, and a span decoder holds its own inflated copy).
// Concurrent first requests for one point share one fetch (single flight); a failed fetch is
// not remembered, so the next request tries again.
//
// Thread safety: safe for concurrent calls; mu_ is a leaf lock, never held across a fetch.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/oci/seek_windows.h"

namespace modelfs {

class SeekWindowSource {
 public:
  static constexpr uint64_t kMaxBytes = 8ull << 20;
  // Bytes [offset, offset + length) of the windows file (a range of the V layer that holds it,
  // shifted by the file's offset there). Unverified: Window checks what it returns.
  using RangeFetch = std::function<absl::StatusOr<std::string>(uint64_t offset, uint64_t length,
                                                               absl::Time deadline)>;

  // `layer` names the compressed layer in errors.
  SeekWindowSource(std::shared_ptr<const SeekWindowsTable> table, RangeFetch fetch,
                   std::string layer, uint64_t max_bytes = kMaxBytes)
      : table_(std::move(table)),
        fetch_(std::move(fetch)),
        layer_(std::move(layer)),
        max_bytes_(max_bytes) {}

  // The table's index: every point, windows not inline (SpanDecoder::Create takes them apart).
  const SeekIndex& index() const { return table_->index; }
  const SeekWindowsTable& table() const { return *table_; }

  // The stored (raw deflate) window of `point`, checked against the table. Errors:
  // kInvalidArgument for a point without a window; kDataLoss naming the layer, the point and
  // the window's offset in the file when the bytes fetched are not the table's (nothing of
  // them is kept or handed out); kDeadlineExceeded waiting for another caller's fetch; the
  // fetch's errors.
  absl::StatusOr<std::shared_ptr<const std::string>> Window(size_t point, absl::Time deadline);

  struct Stats {
    uint64_t fetches = 0;        // windows fetched (one range request each)
    uint64_t fetched_bytes = 0;  // their bytes
    uint64_t hits = 0;           // requests answered from memory or from another's fetch
    uint64_t failures = 0;       // fetches that failed or did not match their hash
  };
  Stats stats() const;

 private:
  // One point's window: being fetched (done false) or held.
  struct Entry {
    bool done = false;
    absl::Status status;
    std::shared_ptr<const std::string> bytes;
  };
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<const SeekWindowsTable> table_;
  const RangeFetch fetch_;
  const std::string layer_;
  const uint64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::map<size_t, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  std::list<size_t> order_ ABSL_GUARDED_BY(mu_);  // held windows, oldest first
  uint64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> fetches_{0}, fetched_bytes_{0}, hits_{0}, failures_{0};
};

}  // namespace modelfs
