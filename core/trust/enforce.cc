// Resolve, evaluate, pin.
#include "core/trust/enforce.h"

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs {

absl::StatusOr<Digest> ResolveManifestDigest(RegistryClient& client, const ImageReference& image) {
  if (image.digest().has_value()) return *image.digest();
  ASSIGN_OR_RETURN(ManifestHead head, client.HeadManifest(image.repository(), image.tag()));
  return head.digest;
}

absl::StatusOr<TrustCheck> EnforcePolicy(const TrustPolicy& policy, RegistryClient& client,
                                         const ImageReference& image) {
  TrustCheck check{Digest(), image, TrustVerdict()};
  ASSIGN_OR_RETURN(check.manifest_digest, ResolveManifestDigest(client, image));
  RegistrySignatureStore store(&client);
  check.verdict = Evaluate(policy, image, check.manifest_digest, store);
  RETURN_IF_ERROR(VerdictStatus(check.verdict, image, check.manifest_digest, policy.source()));
  if (!image.digest().has_value()) {
    ASSIGN_OR_RETURN(check.pinned, ImageReference::Parse(absl::StrCat(
                                       image.String(), "@", check.manifest_digest.str())));
  }
  return check;
}

}  // namespace modelfs
