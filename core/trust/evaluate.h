// Evaluate: does a policy accept an image, given the signatures stored for its manifest?
// containers/image's semantics (signature/policy_eval*.go): every requirement of the scope that
// applies must accept; "sigstoreSigned" accepts when at least one stored signature verifies with
// one of its keys, its payload names this manifest digest, and its docker-reference matches
// the image under the requirement's signedIdentity.
//
// Per signature, in c/image's order: the signature must verify with a key over the payload
// bytes (else "no key matched"); then the payload must parse (else "bad payload"); then its
// manifest digest must be this one and its identity must match (else "identity mismatch").
// signedIdentity (c/image policy_reference_match.go; both references parsed, docker.io
// normalised):
//  - matchRepoDigestOrExact: a signature identity with neither tag nor digest ("host/repo", as
//    cosign writes it) never matches. An image named by digest matches any identity in the
//    same repository; an image named by tag only needs the identical "host/repo:tag".
//  - matchRepository: same repository, whatever tag or digest either names.
//  - matchExact: both have a tag or digest and the references are identical.
//  An image reference with both a tag and a digest is evaluated as named by its digest (which is
//  what modelfs fetches; skopeo refuses such references outright).
//
// Fail closed: a signature set that cannot be fetched, while a requirement needs it, refuses
// with kFetchFailed. Nothing is fetched for scopes that need no signature.
//
// Thread safety: Evaluate is reentrant; the store's own contract applies.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/oci/digest.h"
#include "core/registry/reference.h"
#include "core/trust/policy.h"
#include "core/trust/signature_store.h"

namespace modelfs {

// Why an image was refused. Stable strings (ReasonName) for metrics and JSON.
enum class TrustReason {
  kAccepted,          // "accepted"
  kNoSignature,       // "no_signature": no .sig tag, or it holds no layer
  kNoKeyMatched,      // "no_key_matched": signatures exist, none verifies with a policy key
  kIdentityMismatch,  // "identity_mismatch": verified, but for another image or digest
  kBadPayload,        // "bad_payload": verified (or unusable layer) but malformed payload
  kFetchFailed,       // "fetch_failed": the signatures could not be fetched
  kRejectedByPolicy,  // "rejected_by_policy": the scope says "reject"
};
std::string_view ReasonName(TrustReason reason);

// One stored signature and what became of it.
struct SignatureCheck {
  Digest layer_digest;
  TrustReason outcome = TrustReason::kNoKeyMatched;  // kAccepted when this one was accepted
  std::string key;               // name of the key that verified it (empty: none did)
  std::string key_fingerprint;   // its fingerprint
  std::string docker_reference;  // the payload's identity, when the payload parsed
  Digest signed_digest;          // the payload's manifest digest, when it parsed
  std::string detail;            // why, when not accepted
};

struct TrustVerdict {
  bool accepted = false;
  TrustReason reason = TrustReason::kRejectedByPolicy;
  std::string scope;        // PolicyScope::name that applied
  std::string requirement;  // the requirement type that decided (the first refusing one)
  IdentityMatch identity = IdentityMatch::kMatchRepoDigestOrExact;  // for sigstoreSigned
  std::string message;  // one line: why (empty when accepted)
  Digest sig_manifest_digest;
  std::vector<SignatureCheck> signatures;  // of the sigstoreSigned requirement that decided
};

// Evaluates `policy` for `image` whose manifest has digest `manifest_digest` (the caller
// resolved and checked it), fetching signatures from `store` in image.repository() at most once.
TrustVerdict Evaluate(const TrustPolicy& policy, const ImageReference& image,
                      const Digest& manifest_digest, SignatureStore& store);

// Checks one requirement list against already-fetched signatures (Evaluate's core, exposed so
// `modelfs verify --key` can build a one-key requirement).
TrustVerdict EvaluateRequirements(const std::vector<PolicyRequirement>& requirements,
                                  std::string_view scope, const ImageReference& image,
                                  const Digest& manifest_digest, SignatureStore& store);

// Whether `signed_reference` (a payload's docker-reference) matches `image` under `match`.
bool IdentityMatches(IdentityMatch match, const ImageReference& image,
                     std::string_view signed_reference);

// OK when accepted; otherwise kPermissionDenied: "<ref>@<digest> refused by policy <file>
// (scope <scope>): <reason_name>: <message>".
absl::Status VerdictStatus(const TrustVerdict& verdict, const ImageReference& image,
                           const Digest& manifest_digest, std::string_view policy_source);

}  // namespace modelfs
