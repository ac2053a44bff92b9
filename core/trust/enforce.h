// Enforcing a policy on what a command is about to fetch: resolve the reference to a manifest
// digest, evaluate, and hand back the reference pinned to that digest, so what is then fetched
// is exactly what was verified (a tag moved in between cannot slip another manifest in).
#pragma once

#include "absl/status/statusor.h"
#include "core/oci/digest.h"
#include "core/registry/reference.h"
#include "core/registry/registry_client.h"
#include "core/trust/evaluate.h"
#include "core/trust/policy.h"

namespace modelfs {

struct TrustCheck {
  Digest manifest_digest;
  ImageReference pinned;  // the reference with manifest_digest (and its tag, when it had one)
  TrustVerdict verdict;
};

// The manifest digest `image` names on `client`: its digest when pinned, else a HEAD of the tag.
absl::StatusOr<Digest> ResolveManifestDigest(RegistryClient& client, const ImageReference& image);

// Resolves, then evaluates `policy` for `image`, reading signatures through `client`.
// Errors: resolution errors as RegistryClient's; a refusal is kPermissionDenied
// (VerdictStatus: reference, digest, policy file, scope, reason).
absl::StatusOr<TrustCheck> EnforcePolicy(const TrustPolicy& policy, RegistryClient& client,
                                         const ImageReference& image);

}  // namespace modelfs
