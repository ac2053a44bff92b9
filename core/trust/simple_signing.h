// The simple-signing payload that cosign and containers/image sign: a small JSON document naming
// an image by reference and manifest digest. This is what a signature's bytes cover.
//
//   {"critical":{"identity":{"docker-reference":"reg/ns/repo:tag"},
//                "image":{"docker-manifest-digest":"sha256:..."},
//                "type":"cosign container image signature"},
//    "optional":null}
//
// Parsing follows containers/image (signature/internal/sigstore_json.go): the top level holds
// exactly "critical" and "optional"; "critical" exactly "identity", "image" and "type"; "image"
// exactly "docker-manifest-digest"; "identity" exactly "docker-reference". "optional" is null or
// an object (its "creator" must be a string and "timestamp" a number; other keys are free).
// Unknown or duplicate keys where the set is exact, a wrong type string, or a payload over
// kMaxSimpleSigningPayloadSize are refused.
//
// Thread safety: free functions over values.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/oci/digest.h"

namespace modelfs {

inline constexpr char kSimpleSigningType[] = "cosign container image signature";
// Payloads beyond this are refused unparsed (and unfetched, by the signature store). Real
// payloads are a few hundred bytes; c/image caps a whole signature body at 4 MiB.
inline constexpr size_t kMaxSimpleSigningPayloadSize = 64 * 1024;

struct SimpleSigningPayload {
  // critical.identity.docker-reference as written ("reg/ns/repo:tag" from skopeo, "reg/ns/repo"
  // from cosign). Not parsed here: the policy's signedIdentity decides what it must be.
  std::string docker_reference;
  // critical.image.docker-manifest-digest. Parsed strictly (sha256 only).
  Digest manifest_digest;
  // optional.creator, optional.timestamp when present.
  std::optional<std::string> creator;
  std::optional<int64_t> timestamp;
};

// The payload bytes to sign for `manifest_digest` under `docker_reference`. Deterministic:
// key order as cosign writes it; `optional` carries creator "modelfs <version>" when
// `creator` is set, else null.
std::string BuildSimpleSigningPayload(std::string_view docker_reference,
                                      const Digest& manifest_digest,
                                      std::optional<std::string> creator = std::nullopt);

// Parses `bytes` as above. Errors: kInvalidArgument naming the offending field, or the size
// cap (which is checked before parsing).
absl::StatusOr<SimpleSigningPayload> ParseSimpleSigningPayload(std::string_view bytes);

}  // namespace modelfs
