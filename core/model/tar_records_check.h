// TarRecordsCheck: serves a model whose tar layers were indexed from header records nobody
// pinned (a volume image found among an image's referrers, lazy_images) only once those
// records are found to be the layers' own bytes (docs/design.md, "Lazy plain images").
//
// Why checking the bytes the scan read is enough: ScanTarHeaders is a function of the bytes it
// reads (and the tar's size, which the records must match). Each header says where the next one
// is, so the scan over the records reads a chain of ranges starting at offset 0. If the layer
// holds the same bytes at every one of those ranges, the scan over the layer reads the same
// ranges, gets the same bytes and yields the same entries: no path, size, mode, link target or
// data offset can differ, and no entry can be left out or made up (a made-up header inside a
// file's data is reached only through a header before it whose size lies, and that header is
// checked too). So the check compares the ranges the scan used (UsedRanges) with the
// layer's verified bytes read through the cache, and nothing less than all of them: one
// file's own header proves nothing unless every header before it is right as well.
//
// Before the check has passed, the tree shows the records' names and sizes (lookups, listings
// and stat are answered at once: that is the point of the records) but serves no content: a
// read or readlink of any file of the model waits for the check (ServeGate), and the fd of a
// file is not handed out for passthrough. A failed check fails every later read of the model
// (kDataLoss naming the layer, the entry and the offset); the verdict is reported once. A check
// that could not read the layer (a registry down) is no verdict: the next read tries again.
//
// Thread safety: every method of TarRecordsCheck and GatedBlobReader is safe to call
// concurrently. UsedRanges belongs to one caller at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/cache/blob_reader.h"
#include "core/model/tree_file.h"
#include "core/oci/digest.h"
#include "core/oci/tar.h"
#include "core/oci/tar_headers.h"

namespace modelfs {

// The ranges of a tar a scan used (TarReadOptions::on_bytes_used).
class UsedRanges {
 public:
  void Add(uint64_t offset, uint64_t length) {
    if (length > 0) ranges_.emplace_back(offset, length);
  }
  // (offset, length), sorted, overlapping and touching ones merged.
  std::vector<std::pair<uint64_t, uint64_t>> Merged() const;

 private:
  std::vector<std::pair<uint64_t, uint64_t>> ranges_;
};

class TarRecordsCheck final : public ServeGate {
 public:
  // One tar layer indexed from records: the blob whose bytes are the tar (a compressed layer's
  // diff ID), its name for messages ("layer sha256:..."), the records, the ranges the scan used
  // of them and the entries it found (to name the one at fault).
  struct Tar {
    Digest blob;
    std::string name;
    std::shared_ptr<const TarHeaders> headers;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    std::vector<TarEntry> entries;
  };
  // `reader` (not owned) serves the layers verified and must outlive the check. `model` names
  // the model in messages. `on_checked` is called once with `model` and the verdict (OK or
  // kDataLoss), from the thread that ran the check.
  TarRecordsCheck(BlobReader* reader, std::string model, std::vector<Tar> tars,
                  std::function<void(const std::string& model, const absl::Status&)> on_checked);
  // Waits for a check started in the background.
  ~TarRecordsCheck() override;
  TarRecordsCheck(const TarRecordsCheck&) = delete;
  TarRecordsCheck& operator=(const TarRecordsCheck&) = delete;

  // Runs the check on a thread of its own unless it has started already.
  void StartInBackground();
  // Runs the check (or waits for the one running) and returns its result: OK, or kDataLoss
  // naming the model, layer, entry and offset where the layer's bytes differ from the records
  // (or fail verification). Both are final. Any other error reading the layer (kUnavailable,
  // kDeadlineExceeded) is returned with the same names and is not: the next Wait runs the
  // check again, and nothing is served meanwhile.
  absl::Status Wait() override;
  bool Passed() const override;

 private:
  enum class State { kIdle, kRunning, kDone };
  absl::Status Run() const;
  absl::Status CheckRange(const Tar& tar, uint64_t offset, uint64_t length) const;
  void RunAndPublish();

  BlobReader* const reader_;
  const std::string model_;
  const std::vector<Tar> tars_;
  const std::function<void(const std::string& model, const absl::Status&)> on_checked_;

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kIdle;
  absl::Status result_ ABSL_GUARDED_BY(mu_);       // the verdict, once kDone
  absl::Status last_result_ ABSL_GUARDED_BY(mu_);  // of the last run, for its waiters
  uint64_t finished_runs_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread background_ ABSL_GUARDED_BY(mu_);
};

// A BlobReader that serves `inner`'s bytes (`inner` not owned) only once `gate` has passed: for
// what reads a gated model's files besides the filesystem (.modelinfo.json). Errors: the gate's,
// then `inner`'s.
class GatedBlobReader final : public BlobReader {
 public:
  GatedBlobReader(BlobReader* inner, std::shared_ptr<ServeGate> gate)
      : inner_(inner), gate_(std::move(gate)) {}
  absl::StatusOr<std::string> Read(const Digest& digest, uint64_t offset, uint64_t length) override;
  absl::StatusOr<std::vector<BlobSpan>> ReadSpans(const Digest& digest, uint64_t offset,
                                                  uint64_t length) override;
  bool IsReady(const Digest& digest, uint64_t offset, uint64_t length) override;

 private:
  BlobReader* const inner_;
  const std::shared_ptr<ServeGate> gate_;
};

}  // namespace modelfs
