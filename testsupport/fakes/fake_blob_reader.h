// FakeBlobReader: in-memory blobs for filesystem tests, with per-blob fault injection and a
// count of calls, so that tests can check which bytes went through the verified path.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <fcntl.h>

#include <atomic>
#include <map>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/cache/blob_reader.h"

namespace modelfs::testing {

class FakeBlobReader : public BlobReader {
 public:
  // Adds a blob and returns its digest.
  Digest Add(const std::string& bytes) {
    Digest d = Digest::Of(bytes);
    absl::MutexLock lock(&mu_);
    blobs_[d] = bytes;
    return d;
  }
  // Every later read of `d` fails with `s` (OK clears the fault).
  void Fail(const Digest& d, absl::Status s) {
    absl::MutexLock lock(&mu_);
    faults_[d] = std::move(s);
  }
  int reads() const { return reads_.load(); }
  // From now on OpenVerifiedBlob of the whole of `d` opens `path` (a file with its bytes).
  void SetVerifiedFile(const Digest& d, std::string path) {
    absl::MutexLock lock(&mu_);
    verified_[d] = std::move(path);
  }

  // From now on OpenVerifiedFile of bytes [offset, offset + length) of `d` opens `path`.
  void SetVerifiedMember(const Digest& d, uint64_t offset, uint64_t length, std::string path) {
    absl::MutexLock lock(&mu_);
    members_[{d, offset, length}] = std::move(path);
  }
  int OpenVerifiedFile(const Digest& digest, uint64_t offset, uint64_t length) override {
    absl::MutexLock lock(&mu_);
    auto m = members_.find({digest, offset, length});
    return m == members_.end() ? -1 : open(m->second.c_str(), O_RDONLY | O_CLOEXEC);
  }

  int OpenVerifiedBlob(const Digest& digest, uint64_t offset, uint64_t length) override {
    absl::MutexLock lock(&mu_);
    auto v = verified_.find(digest);
    auto b = blobs_.find(digest);
    if (v == verified_.end() || b == blobs_.end() || offset != 0 || length != b->second.size()) {
      return -1;
    }
    return open(v->second.c_str(), O_RDONLY | O_CLOEXEC);
  }

  absl::StatusOr<std::string> Read(const Digest& digest, uint64_t offset,
                                   uint64_t length) override {
    ++reads_;
    absl::MutexLock lock(&mu_);
    auto f = faults_.find(digest);
    if (f != faults_.end() && !f->second.ok()) return f->second;
    auto it = blobs_.find(digest);
    if (it == blobs_.end()) return absl::NotFoundError(absl::StrCat("no blob ", digest.str()));
    const std::string& b = it->second;
    if (offset >= b.size()) return std::string();
    return b.substr(offset, length);
  }

 private:
  std::atomic<int> reads_{0};
  absl::Mutex mu_;
  std::map<Digest, std::string> blobs_ ABSL_GUARDED_BY(mu_);
  std::map<Digest, absl::Status> faults_ ABSL_GUARDED_BY(mu_);
  std::map<Digest, std::string> verified_ ABSL_GUARDED_BY(mu_);
  std::map<std::tuple<Digest, uint64_t, uint64_t>, std::string> members_ ABSL_GUARDED_BY(mu_);
};

}  // namespace modelfs::testing
