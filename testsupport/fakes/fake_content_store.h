// FakeContentStore: containerd's content store in memory, per namespace, for tests of the
// image-volume path without containerd: blobs by digest, a count of bytes read, and Corrupt to
// change a stored blob behind its digest. Reads stream in pieces of 7 bytes, as containerd
// streams in pieces.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "snapshotter/content/content_store_client.h"

namespace modelfs::testing {

class FakeContentStore final : public snapshotter::ContentStore {
 public:
  Digest Add(const std::string& ns, const std::string& bytes) {
    Digest d = Digest::Of(bytes);
    absl::MutexLock lock(&mu_);
    blobs_[ns + " " + d.str()] = bytes;
    return d;
  }
  void Corrupt(const std::string& ns, const Digest& d, size_t at) {
    absl::MutexLock lock(&mu_);
    blobs_[ns + " " + d.str()][at] ^= 1;
  }
  absl::StatusOr<uint64_t> Size(const std::string& ns, const Digest& d) override {
    absl::MutexLock lock(&mu_);
    auto it = blobs_.find(ns + " " + d.str());
    if (it == blobs_.end()) return absl::NotFoundError(d.str());
    return it->second.size();
  }
  absl::Status Read(const std::string& ns, const Digest& d, uint64_t offset, uint64_t length,
                    absl::Time,
                    const std::function<absl::Status(std::string_view)>& sink) override {
    std::string bytes;
    {
      absl::MutexLock lock(&mu_);
      auto it = blobs_.find(ns + " " + d.str());
      if (it == blobs_.end()) return absl::NotFoundError(d.str());
      if (offset + length > it->second.size()) return absl::OutOfRangeError("short");
      bytes = it->second.substr(offset, length);
      read_ += length;
    }
    // In pieces of 7 bytes, as containerd streams in pieces.
    for (size_t i = 0; i < bytes.size(); i += 7) {
      if (absl::Status st = sink(std::string_view(bytes).substr(i, 7)); !st.ok()) return st;
    }
    return absl::OkStatus();
  }
  uint64_t read() {
    absl::MutexLock lock(&mu_);
    return read_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> blobs_ ABSL_GUARDED_BY(mu_);
  uint64_t read_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace modelfs::testing
