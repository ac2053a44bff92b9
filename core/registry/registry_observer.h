// RegistryObserver: what a RegistryClient tells its owner about each HTTP exchange it makes,
// so that the daemon can count requests and their latency per registry (its metrics) without
// core/registry knowing about metrics.
//
// Thread safety: OnRequest is called from whichever thread made the exchange, concurrently;
// implementations must be thread-safe and quick (no I/O).
#pragma once

#include <string_view>

#include "absl/time/time.h"

namespace modelfs {

// What an exchange was for: a blob (range reads, whole blobs, uploads), a manifest (or
// index, HEAD included), a token from the registry's token server, or anything else (the /v2/
// ping, referrers).
enum class RegistryRequestKind { kBlob, kManifest, kToken, kOther };

// "blob", "manifest", "token", "other".
std::string_view RegistryRequestKindName(RegistryRequestKind kind);

struct RegistryRequestRecord {
  // The registry as references name it (RegistryClientOptions::registry): a host[:port],
  // never a repository, a digest or a URL, so labels made of it stay few.
  std::string_view registry;
  RegistryRequestKind kind = RegistryRequestKind::kOther;
  // The HTTP status of the answer; 0 when the exchange failed without a complete answer
  // (connection refused or reset, timeout, stall).
  long status = 0;
  // From sending the request to the last byte of the answer's body.
  absl::Duration elapsed;
};

class RegistryObserver {
 public:
  virtual ~RegistryObserver() = default;
  // One call per HTTP exchange: each retry, redirect hop and token request counts.
  virtual void OnRequest(const RegistryRequestRecord& record) = 0;
};

}  // namespace modelfs
