// RegistryRangeReader: a RangeReader over one blob of a registry, read by range. Its bytes are
// NOT verified: it is for reads whose result is checked otherwise (a weight file's header that
// the layer's stream is then checked against, TensorIndexBuilder; a header read only to refuse
// a layer). Internal to core/publish (push, convert and the tensor listing).
//
// Thread safety: like every RangeReader, one thread at a time (plain counters).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/io/range_reader.h"
#include "core/oci/descriptor.h"
#include "core/registry/registry_client.h"

namespace modelfs {

class RegistryRangeReader final : public RangeReader {
 public:
  // Blob `d` of `repo` through `client` (which must outlive this object); `name` is used in
  // messages and for format sniffing.
  RegistryRangeReader(RegistryClient& client, std::string repo, const Descriptor& d,
                      std::string name)
      : client_(client), repo_(std::move(repo)), d_(d), name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  absl::StatusOr<uint64_t> Size() override { return d_.size; }
  // Errors: kOutOfRange past the blob's end (descriptor size); the client's (GetBlobRange).
  absl::StatusOr<std::string> ReadAt(uint64_t offset, uint64_t length) override {
    if (offset > d_.size || length > d_.size - offset) {
      return absl::OutOfRangeError(absl::StrCat(name_, ": read past the end"));
    }
    if (length == 0) return std::string();
    ++stats_.requests;
    stats_.bytes += length;
    return client_.GetBlobRange(repo_, d_.digest, offset, length);
  }
  RangeReadStats stats() const override { return stats_; }

 private:
  RegistryClient& client_;
  const std::string repo_;
  const Descriptor d_;
  const std::string name_;
  RangeReadStats stats_;
};

}  // namespace modelfs
