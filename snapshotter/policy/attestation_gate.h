// AttestationGate: the node's requirement of equivalence attestations (snapshotter.toml
// `require_equivalence` and `equivalence_keys`): a volume image (or model) of a repository the
// requirement names is served only when its manifest digest carries an equivalence attestation
// (core/attest/attestation.h: `modelfs attest equivalence --sign-key`, or `cosign attest` with
// the predicate type) signed by one of the keys and saying the model is equivalent to its source.
// So a quantization nobody attested is refused at Prepare, named, before anything is mounted.
//
// Repositories are written as model_hosts entries (model_hosts.h): "host", "host/repo",
// "host/path/*". Acceptances are kept per (reference, digest), as PolicyGate keeps them; refusals
// are evaluated again on the next Prepare (an attestation stored after a refused pull is accepted
// on the kubelet's retry). Fails closed: attestations that cannot be fetched refuse.
//
// Thread safety: Check may be called concurrently; mu_ is never held across registry requests.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/oci/digest.h"
#include "core/registry/reference.h"
#include "core/registry/registry_client.h"
#include "core/trust/keys.h"

namespace modelfs::snapshotter {

class AttestationGate {
 public:
  // The registry client for "host[:port]"; it must stay valid while the gate is used.
  using ClientFor = std::function<absl::StatusOr<RegistryClient*>(const std::string& registry)>;

  // Loads the keys (ECDSA P-256 PEM public keys). Errors: kInvalidArgument for an entry of
  // `repositories` that is not a model_hosts form, no key while repositories are named, or a
  // key that does not load (naming the file).
  static absl::StatusOr<std::unique_ptr<AttestationGate>> Create(
      std::vector<std::string> repositories, const std::vector<std::string>& key_paths,
      ClientFor client_for);

  // True when `image`'s repository is one the requirement names.
  bool Applies(const ImageReference& image) const;

  struct Outcome {
    absl::Status status;  // OK: accepted or not required; kPermissionDenied: refused
    std::string reason;   // AttestationVerdict::reason, "fetch_failed", or "" when accepted
    bool kept = false;    // answered from a kept acceptance
  };
  // Does `image` (manifest digest `digest`) carry an accepted equivalence attestation, when its
  // repository requires one? A refusal names the reference, digest, the requirement and why.
  Outcome Check(const ImageReference& image, const Digest& digest);

  std::map<std::string, uint64_t> refusals() const;

 private:
  AttestationGate(std::vector<std::string> repositories, std::vector<PublicKey> keys,
                  ClientFor client_for)
      : repositories_(std::move(repositories)),
        keys_(std::move(keys)),
        client_for_(std::move(client_for)) {}

  const std::vector<std::string> repositories_;
  const std::vector<PublicKey> keys_;
  const ClientFor client_for_;

  mutable absl::Mutex mu_;
  std::set<std::string> kept_ ABSL_GUARDED_BY(mu_);  // "<reference> <digest>"
  std::map<std::string, uint64_t> refusals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace modelfs::snapshotter
