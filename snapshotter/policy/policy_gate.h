// PolicyGate: the node's signature policy (snapshotter.toml `policy`, a containers-policy.json)
// applied to what a Prepare is about to mount, with the verdicts it has reached kept.
//
//  - The policy file and the key files it names are re-read when any of them changes: each
//    Check stats them (device, inode, size, mtime: PolicyStamp) and reloads on a difference.
//    Verdicts are kept per (policy content, image reference, manifest digest); the policy
//    content is the SHA-256 of every file read, so touching a file without changing it keeps
//    them. A second pod naming the same image costs no registry round trip.
//  - Only acceptances are kept. A refusal is evaluated again on the next Prepare, so an image
//    signed after a first refused pull is accepted on the kubelet's retry, and a fetch that
//    failed (fail closed: refused) is retried.
//  - A policy that cannot be read or parsed refuses everything (reason "policy_unreadable")
//    until it is fixed: the node never mounts unchecked because the policy broke.
//
// Thread safety: Check may be called concurrently. mu_ is never held across signature fetches;
// two concurrent Checks of a new image may both evaluate it (both verdicts agree).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/oci/digest.h"
#include "core/registry/reference.h"
#include "core/trust/evaluate.h"
#include "core/trust/policy.h"
#include "core/trust/signature_store.h"

namespace modelfs::snapshotter {

// Reason label of a policy that could not be loaded (besides ReasonName's).
inline constexpr char kPolicyUnreadable[] = "policy_unreadable";

class PolicyGate {
 public:
  // The signature store for a registry ("host[:port]"); the gate does not own it, and it must
  // stay valid while the gate is used.
  using StoreFor = std::function<absl::StatusOr<SignatureStore*>(const std::string& registry)>;

  // `path`: the policy file (absolute). Nothing is read until the first Check. At most
  // `max_kept` acceptances are kept; past that, all are forgotten (each costs one evaluation
  // again).
  PolicyGate(std::string path, StoreFor store_for, size_t max_kept = 4096);

  struct Outcome {
    absl::Status status;  // OK: accepted; kPermissionDenied: refused (VerdictStatus)
    std::string reason;   // ReasonName of the verdict, or kPolicyUnreadable
    bool kept = false;    // answered from a kept verdict (no registry request)
  };
  // Does the policy accept `image` whose manifest digest is `digest`? A refusal message names
  // the reference, the digest, the policy file and scope, and the reason.
  Outcome Check(const ImageReference& image, const Digest& digest);

  // Refusals so far, by reason (ReasonName, or kPolicyUnreadable).
  std::map<std::string, uint64_t> refusals() const;
  // Evaluations that asked the registry (kept verdicts excluded); for tests and benches.
  uint64_t evaluations() const;

 private:
  struct Loaded {
    std::shared_ptr<const TrustPolicy> policy;
    PolicyStamp stamp;
    std::string content;  // SHA-256 of the files read, as a digest string
  };
  // The policy to use now, loaded again when its files changed. Errors: the load failure.
  absl::StatusOr<std::shared_ptr<const TrustPolicy>> Current(std::string* content);
  void CountRefusal(const std::string& reason);

  const std::string path_;
  const StoreFor store_for_;
  const size_t max_kept_;

  mutable absl::Mutex mu_;
  std::optional<Loaded> loaded_ ABSL_GUARDED_BY(mu_);
  // "<policy content> <reference> <digest>" of accepted images.
  std::set<std::string> kept_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> refusals_ ABSL_GUARDED_BY(mu_);
  uint64_t evaluations_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace modelfs::snapshotter
