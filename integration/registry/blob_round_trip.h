// Helpers of the registry end-to-end tests: push a blob held in memory, pull one into memory.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/registry/registry_client.h"

namespace modelfs::testing {

// Pushes `bytes` to `repo` as the blob named by their digest.
inline absl::Status Push(RegistryClient& c, const std::string& repo, const std::string& bytes) {
  return c.PushBlob(repo, Digest::Of(bytes), bytes.size(),
                    BlobReadAtString(std::make_shared<const std::string>(bytes)));
}

// The whole blob `d` of `repo`, as the client verified it.
inline absl::StatusOr<std::string> Pull(RegistryClient& c, const std::string& repo,
                                        const Digest& d) {
  std::string out;
  absl::Status s = c.GetBlob(repo, d, [&](std::string_view chunk) {
    out.append(chunk.data(), chunk.size());
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

}  // namespace modelfs::testing
