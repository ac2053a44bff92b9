// Equivalence attestations as cosign writes and reads attestations: an in-toto Statement v1 whose
// subject is the derived model's manifest digest and whose predicate (type
// kEquivalencePredicateType, docs/signing.md) records the comparison of equivalence.h; wrapped in
// a DSSE envelope (payloadType application/vnd.in-toto+json) signed with an ECDSA P-256 key over
// DSSE's pre-authentication encoding (PAE), as cosign's `attest` signs; stored in the subject's
// repository under the tag "sha256-<hex>.att", an OCI image manifest with one layer per envelope
// (media type application/vnd.dsse.envelope.v1+json, annotations `predicateType` and an empty
// `dev.cosignproject.cosign/signature`), so `cosign verify-attestation` reads it; and, where the
// registry has the OCI 1.1 referrers API, also as a referrer of the subject (artifactType the
// envelope's media type, `subject` the derived manifest).
//
// Hostile input is bounded as signatures are (signature_store.h): at most
// kMaxSignatureLayers envelopes, each at most kMaxEnvelopeSize bytes and checked against its
// descriptor; duplicate JSON keys refused.
//
// Thread safety: free functions; the RegistryClient they use is thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/attest/equivalence.h"
#include "core/oci/digest.h"
#include "core/registry/registry_client.h"
#include "core/trust/keys.h"
#include "nlohmann/json.hpp"

namespace modelfs {

inline constexpr char kEquivalencePredicateType[] =
    "https://modelfs.dev/attestations/equivalence/v1";
inline constexpr char kInTotoStatementType[] = "https://in-toto.io/Statement/v1";
// What `cosign attest` 2.5 writes; read as v1 (same subject, predicateType, predicate fields).
inline constexpr char kInTotoStatementTypeV01[] = "https://in-toto.io/Statement/v0.1";
inline constexpr char kInTotoPayloadType[] = "application/vnd.in-toto+json";
inline constexpr char kMediaTypeDsseEnvelope[] = "application/vnd.dsse.envelope.v1+json";
inline constexpr char kPredicateTypeAnnotation[] = "predicateType";
inline constexpr size_t kMaxEnvelopeSize = 16 * 1024 * 1024;

// One side of the comparison as the statement names it.
struct AttestedModel {
  std::string reference;  // as given: "host/repo:tag"
  std::string name;       // "host/repo": the subject's name
  Digest digest;          // the manifest REF resolves to (V for a volume image)
  std::string model;      // M's digest when REF is a volume image, else ""
};

// The in-toto statement: subject = derived (name, sha256), predicate = the comparison.
nlohmann::json EquivalenceStatement(const AttestedModel& source, const AttestedModel& derived,
                                    const EquivalenceReport& report, std::string_view tool_version);

// DSSE's pre-authentication encoding: "DSSEv1 <len> <type> <len> <body>".
std::string DssePae(std::string_view payload_type, std::string_view payload);
// A DSSE envelope (JSON) of `payload` signed by `key` over the PAE.
absl::StatusOr<std::string> SignDsseEnvelope(std::string_view payload_type,
                                             std::string_view payload, const PrivateKey& key);
// A DSSE envelope as parsed, before any signature is checked.
struct DsseEnvelope {
  std::string payload_type;
  std::string payload;                  // decoded
  std::vector<std::string> signatures;  // decoded DER; undecodable ones are left out
};
// Parses an envelope (untrusted bytes: strict JSON, duplicate keys refused). Errors:
// kInvalidArgument naming what is wrong.
absl::StatusOr<DsseEnvelope> ParseDsseEnvelope(std::string_view envelope);
// Judges a verified statement (in-toto JSON bytes) for `subject` and `predicate_type`: "" when it
// is acceptable, else a reason of AttestationVerdict (bad_payload, subject_mismatch,
// wrong_predicate_type, not_equivalent) with `detail` set. `statement` receives the parsed JSON.
std::string JudgeStatement(std::string_view payload, const Digest& subject,
                           std::string_view predicate_type, nlohmann::json* statement,
                           std::string* detail);
// The payload of `envelope` when one of its signatures verifies with `key` over the PAE and its
// payloadType is `payload_type`. Errors: kInvalidArgument (not a DSSE envelope, wrong
// payloadType, bad base64), kPermissionDenied (no signature verifies with the key).
absl::StatusOr<std::string> VerifyDsseEnvelope(std::string_view envelope,
                                               std::string_view payload_type, const PublicKey& key);

// "sha256-<hex>.att".
std::string AttestationTag(const Digest& subject);

struct StoredAttestation {
  std::string tag;
  Digest att_manifest;   // of the .att manifest written
  size_t envelopes = 0;  // layers in it now
  // The OCI 1.1 referrer's manifest digest, when the registry has the referrers API.
  std::optional<Digest> referrer;
};
// Appends `envelope` to the subject's .att tag (earlier envelopes kept), and pushes it as a
// referrer of `subject` where the registry answers the referrers API. `subject_media_type` and
// `subject_size` describe the subject's manifest for the referrer. Errors: the registry's;
// kFailedPrecondition when the tag already holds kMaxSignatureLayers envelopes.
absl::StatusOr<StoredAttestation> StoreAttestation(
    RegistryClient& client, const std::string& repository, const Digest& subject,
    const std::string& subject_media_type, uint64_t subject_size, const std::string& envelope,
    std::string_view predicate_type);

// What checking the attestations of one subject found.
struct AttestationVerdict {
  bool accepted = false;
  // Why not (stable reasons as the signature policy's: no_attestation, no_key_matched,
  // subject_mismatch, wrong_predicate_type, not_equivalent, bad_payload), with detail.
  std::string reason;
  std::string detail;
  size_t envelopes = 0;
  nlohmann::json statement;  // the accepted one (or the last one that verified)
  std::string key;           // the key that verified it
};
// Reads the subject's .att tag and accepts when one envelope verifies with one of `keys`, has
// payloadType in-toto, a Statement v1 (or cosign's v0.1) whose subject lists `subject`'s sha256,
// predicateType `predicate_type`, and (for the equivalence predicate) `predicate.equivalent` true.
// Errors: the registry failing (kUnavailable, ...). A refusal is a verdict, not an error; a
// malformed .att manifest (an index, no layers, over the cap) is the refusal bad_payload.
absl::StatusOr<AttestationVerdict> VerifyAttestations(RegistryClient& client,
                                                      const std::string& repository,
                                                      const Digest& subject,
                                                      const std::vector<PublicKey>& keys,
                                                      std::string_view predicate_type);

}  // namespace modelfs
