// Where cosign keeps signatures: in the image's own repository, under the tag
// "sha256-<hex of the signed manifest digest>.sig", as an OCI image manifest with one layer per
// signature. Each layer's blob is a simple-signing payload (simple_signing.h) of media type
// application/vnd.dev.cosign.simplesigning.v1+json, and its annotation
// dev.cosignproject.cosign/signature holds the base64 DER ECDSA signature over that blob.
// skopeo 1.18 (use-sigstore-attachments) reads and writes the same.
//
// SignatureStore is the interface evaluation fetches through (tests fake it to inject faults);
// RegistrySignatureStore is the real one over RegistryClient.
//
// Hostile input is bounded: a .sig manifest over 4 MiB (RegistryClient's cap) or with more than
// kMaxSignatureLayers layers, or that is an index, is refused whole; a layer larger than
// kMaxSimpleSigningPayloadSize is not fetched; a blob that does not hash to its descriptor's
// digest, or a layer without the signature annotation, makes that one signature unusable
// (FetchedSignature::status) while the others still count.
//
// Thread safety: RegistrySignatureStore may be used concurrently (RegistryClient is).
// Append is a read-modify-write of the tag: two concurrent signers can lose one signature,
// as with cosign itself.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/oci/digest.h"

namespace modelfs {

class RegistryClient;

inline constexpr char kMediaTypeCosignSimpleSigning[] =
    "application/vnd.dev.cosign.simplesigning.v1+json";
inline constexpr char kCosignSignatureAnnotation[] = "dev.cosignproject.cosign/signature";
inline constexpr size_t kMaxSignatureLayers = 64;

// "sha256-<hex>.sig".
std::string SignatureTag(const Digest& manifest_digest);

struct FetchedSignature {
  Digest layer_digest;        // the payload blob's descriptor digest
  std::string payload;        // blob bytes, checked against layer_digest when status is OK
  std::string signature_b64;  // the annotation, as stored
  // Not OK: this layer cannot be a valid signature (payload too large, digest mismatch, wrong
  // media type, missing annotation); the message says which and names the layer digest.
  absl::Status status;
};

struct SignatureSet {
  // False when the .sig tag does not exist (no signature at all); signatures is then empty.
  bool found = false;
  Digest sig_manifest_digest;  // of the .sig manifest, when found
  std::vector<FetchedSignature> signatures;
};

class SignatureStore {
 public:
  virtual ~SignatureStore() = default;
  // The signatures stored for `manifest_digest` in `repository`. Errors (the whole set is
  // unusable): kUnavailable/kDeadlineExceeded/other transport codes (could not fetch),
  // kInvalidArgument (the .sig tag is an index, not JSON, over kMaxSignatureLayers layers).
  virtual absl::StatusOr<SignatureSet> Fetch(const std::string& repository,
                                             const Digest& manifest_digest) = 0;
};

struct AppendResult {
  std::string tag;               // SignatureTag(manifest_digest)
  Digest sig_manifest_digest;    // of the .sig manifest written
  size_t signatures = 0;         // layers in it now (the new one included)
  bool already_present = false;  // the same payload and signature were there; nothing written
};

class RegistrySignatureStore : public SignatureStore {
 public:
  // `client` must outlive the store.
  explicit RegistrySignatureStore(RegistryClient* client) : client_(client) {}

  absl::StatusOr<SignatureSet> Fetch(const std::string& repository,
                                     const Digest& manifest_digest) override;

  // Adds one signature: pushes `payload` as a blob, then writes the .sig manifest with the
  // existing layers (kept as they were) plus the new one, and a config blob as cosign writes it.
  // Refuses (kFailedPrecondition) to grow a manifest to more than kMaxSignatureLayers.
  absl::StatusOr<AppendResult> Append(const std::string& repository, const Digest& manifest_digest,
                                      const std::string& payload, const std::string& signature_der);

 private:
  RegistryClient* const client_;
};

}  // namespace modelfs
