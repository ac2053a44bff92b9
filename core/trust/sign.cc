// Signing: payload, signature, self-check, store.
#include "core/trust/sign.h"

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"
#include "core/trust/simple_signing.h"

namespace modelfs {

std::string SigningIdentity(const ImageReference& image) {
  if (!image.tag().empty()) return absl::StrCat(image.Name(), ":", image.tag());
  return absl::StrCat(image.Name(), "@", image.digest()->str());
}

absl::StatusOr<SignResult> SignImage(RegistrySignatureStore& store, const ImageReference& image,
                                     const Digest& manifest_digest, const PrivateKey& key) {
  SignResult out;
  out.docker_reference = SigningIdentity(image);
  out.manifest_digest = manifest_digest;
  out.payload = BuildSimpleSigningPayload(out.docker_reference, manifest_digest);
  ASSIGN_OR_RETURN(std::string der, key.Sign(out.payload));
  RETURN_IF_ERROR(key.public_key().Verify(out.payload, der));
  ASSIGN_OR_RETURN(out.stored, store.Append(image.repository(), manifest_digest, out.payload, der));
  return out;
}

}  // namespace modelfs
