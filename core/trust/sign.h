// Signing an image the way cosign and skopeo do: a simple-signing payload for the image's
// reference and manifest digest, signed with an ECDSA P-256 key, added to the .sig tag.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "core/oci/digest.h"
#include "core/registry/reference.h"
#include "core/trust/keys.h"
#include "core/trust/signature_store.h"

namespace modelfs {

// The docker-reference a signature made by modelfs names: "host/repo:tag" when `image` has a
// tag (skopeo's form, which matchRepoDigestOrExact accepts both for that tag and for pulls by
// digest), else "host/repo@sha256:...".
std::string SigningIdentity(const ImageReference& image);

struct SignResult {
  std::string docker_reference;  // what the payload names
  Digest manifest_digest;        // what was signed
  std::string payload;           // the bytes signed
  AppendResult stored;
};

// Signs `manifest_digest` (which `image` resolved to) with `key` and appends the signature to
// the .sig tag in image.repository(). The signature is verified with the key's public half
// before it is stored.
absl::StatusOr<SignResult> SignImage(RegistrySignatureStore& store, const ImageReference& image,
                                     const Digest& manifest_digest, const PrivateKey& key);

}  // namespace modelfs
