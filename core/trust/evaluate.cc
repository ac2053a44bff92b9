// Policy evaluation with containers/image's semantics (see evaluate.h).
#include "core/trust/evaluate.h"

#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/trust/simple_signing.h"
#include "core/trust/strict_json.h"

namespace modelfs {

using trust_internal::S;

namespace {

// A docker reference as a signature names it: unlike ImageReference::Parse, no default tag is
// added, because "host/repo" (cosign's form) must stay distinguishable from "host/repo:latest".
struct SignedRef {
  std::string name;  // normalised: "docker.io/library/x", "reg:5000/ns/repo"
  std::string tag;
  std::string digest;
  bool name_only() const { return tag.empty() && digest.empty(); }
  std::string String() const {
    std::string s = name;
    if (!tag.empty()) s += ":" + tag;
    if (!digest.empty()) s += "@" + digest;
    return s;
  }
};

std::optional<SignedRef> ParseSignedRef(std::string_view s) {
  SignedRef out;
  std::string_view rest = s;
  if (size_t at = rest.find('@'); at != std::string_view::npos) {
    auto d = Digest::Parse(rest.substr(at + 1));
    if (!d.ok()) return std::nullopt;
    out.digest = d->str();
    rest = rest.substr(0, at);
  }
  size_t slash = rest.rfind('/');
  size_t colon = rest.rfind(':');
  std::string_view name = rest;
  if (colon != std::string_view::npos && (slash == std::string_view::npos || colon > slash)) {
    out.tag = std::string(rest.substr(colon + 1));
    name = rest.substr(0, colon);
    if (out.tag.empty()) return std::nullopt;
  }
  // Parse the name alone (with the tag, if any, to let the parser check it too).
  auto parsed = ImageReference::Parse(out.tag.empty() ? std::string(name)
                                                      : absl::StrCat(S(name), ":", out.tag));
  if (!parsed.ok()) return std::nullopt;
  out.name = parsed->Name();
  return out;
}

struct Intended {
  std::string name;
  std::string string;  // "name:tag" or "name@digest"
};

Intended IntendedOf(const ImageReference& image) {
  Intended i{image.Name(), ""};
  i.string = image.digest().has_value() ? absl::StrCat(i.name, "@", image.digest()->str())
                                        : absl::StrCat(i.name, ":", image.tag());
  return i;
}

int Severity(TrustReason r) {
  switch (r) {
    case TrustReason::kIdentityMismatch:
      return 3;
    case TrustReason::kBadPayload:
      return 2;
    case TrustReason::kNoKeyMatched:
      return 1;
    default:
      return 0;
  }
}

SignatureCheck CheckOne(const PolicyRequirement& req, const FetchedSignature& sig,
                        const ImageReference& image, const Digest& manifest_digest) {
  SignatureCheck c;
  c.layer_digest = sig.layer_digest;
  if (!sig.status.ok()) {
    c.outcome = TrustReason::kBadPayload;
    c.detail = std::string(sig.status.message());
    return c;
  }
  std::string der;
  if (!absl::Base64Unescape(sig.signature_b64, &der)) {
    c.outcome = TrustReason::kNoKeyMatched;
    c.detail = "the signature annotation is not valid base64";
    return c;
  }
  const PublicKey* verified_by = nullptr;
  for (const PublicKey& key : req.keys) {
    if (key.Verify(sig.payload, der).ok()) {
      verified_by = &key;
      break;
    }
  }
  if (verified_by == nullptr) {
    c.outcome = TrustReason::kNoKeyMatched;
    c.detail = absl::StrCat("verifies with none of the ", req.keys.size(), " policy key(s)");
    return c;
  }
  c.key = verified_by->name();
  c.key_fingerprint = verified_by->fingerprint();
  auto payload = ParseSimpleSigningPayload(sig.payload);
  if (!payload.ok()) {
    c.outcome = TrustReason::kBadPayload;
    c.detail = std::string(payload.status().message());
    return c;
  }
  c.docker_reference = payload->docker_reference;
  c.signed_digest = payload->manifest_digest;
  if (payload->manifest_digest != manifest_digest) {
    c.outcome = TrustReason::kIdentityMismatch;
    c.detail = absl::StrCat("signs manifest ", payload->manifest_digest.str(), ", not ",
                            manifest_digest.str());
    return c;
  }
  if (!IdentityMatches(req.identity, image, payload->docker_reference)) {
    c.outcome = TrustReason::kIdentityMismatch;
    c.detail =
        absl::StrCat("signed identity \"", payload->docker_reference, "\" does not match ",
                     IntendedOf(image).string, " under ", S(IdentityMatchName(req.identity)));
    return c;
  }
  c.outcome = TrustReason::kAccepted;
  return c;
}

}  // namespace

std::string_view ReasonName(TrustReason reason) {
  switch (reason) {
    case TrustReason::kAccepted:
      return "accepted";
    case TrustReason::kNoSignature:
      return "no_signature";
    case TrustReason::kNoKeyMatched:
      return "no_key_matched";
    case TrustReason::kIdentityMismatch:
      return "identity_mismatch";
    case TrustReason::kBadPayload:
      return "bad_payload";
    case TrustReason::kFetchFailed:
      return "fetch_failed";
    case TrustReason::kRejectedByPolicy:
      return "rejected_by_policy";
  }
  return "unknown";
}

bool IdentityMatches(IdentityMatch match, const ImageReference& image,
                     std::string_view signed_reference) {
  std::optional<SignedRef> sig = ParseSignedRef(signed_reference);
  if (!sig.has_value()) return false;
  Intended intended = IntendedOf(image);
  switch (match) {
    case IdentityMatch::kMatchRepository:
      return sig->name == intended.name;
    case IdentityMatch::kMatchExact:
      return !sig->name_only() && sig->String() == intended.string;
    case IdentityMatch::kMatchRepoDigestOrExact:
      if (sig->name_only()) return false;
      if (image.digest().has_value()) return sig->name == intended.name;
      return sig->String() == intended.string;
  }
  return false;
}

TrustVerdict EvaluateRequirements(const std::vector<PolicyRequirement>& requirements,
                                  std::string_view scope, const ImageReference& image,
                                  const Digest& manifest_digest, SignatureStore& store) {
  TrustVerdict v;
  v.scope = std::string(scope);
  std::optional<absl::StatusOr<SignatureSet>> fetched;  // at most one fetch per evaluation
  bool any_signed = false;
  for (const PolicyRequirement& req : requirements) {
    v.requirement = std::string(RequirementTypeName(req.type));
    v.identity = req.identity;
    if (req.type == PolicyRequirement::Type::kInsecureAcceptAnything) continue;
    if (req.type == PolicyRequirement::Type::kReject) {
      v.accepted = false;
      v.reason = TrustReason::kRejectedByPolicy;
      v.message = "the policy rejects every image in this scope";
      return v;
    }
    if (!fetched.has_value()) fetched = store.Fetch(image.repository(), manifest_digest);
    if (!fetched->ok()) {
      const absl::Status& st = fetched->status();
      v.accepted = false;
      v.reason = st.code() == absl::StatusCode::kInvalidArgument ? TrustReason::kBadPayload
                                                                 : TrustReason::kFetchFailed;
      v.message = std::string(st.message());
      return v;
    }
    const SignatureSet& set = **fetched;
    v.sig_manifest_digest = set.sig_manifest_digest;
    v.signatures.clear();
    if (set.signatures.empty()) {
      v.accepted = false;
      v.reason = TrustReason::kNoSignature;
      v.message = set.found ? absl::StrCat("signature manifest ", SignatureTag(manifest_digest),
                                           " holds no signature")
                            : absl::StrCat("no signature: tag ", SignatureTag(manifest_digest),
                                           " does not exist in ", image.repository());
      return v;
    }
    TrustReason worst = TrustReason::kNoKeyMatched;
    std::string worst_detail;
    bool accepted = false;
    for (const FetchedSignature& sig : set.signatures) {
      SignatureCheck c = CheckOne(req, sig, image, manifest_digest);
      if (c.outcome == TrustReason::kAccepted) {
        accepted = true;
      } else if (worst_detail.empty() || Severity(c.outcome) > Severity(worst)) {
        worst = c.outcome;
        worst_detail = c.detail;
      }
      v.signatures.push_back(std::move(c));
    }
    if (!accepted) {
      v.accepted = false;
      v.reason = worst;
      v.message = absl::StrCat(set.signatures.size(), " signature(s), none accepted",
                               worst_detail.empty() ? "" : ": ", worst_detail);
      return v;
    }
    any_signed = true;
  }
  v.accepted = true;
  v.reason = TrustReason::kAccepted;
  if (any_signed) v.requirement = "sigstoreSigned";
  return v;
}

TrustVerdict Evaluate(const TrustPolicy& policy, const ImageReference& image,
                      const Digest& manifest_digest, SignatureStore& store) {
  PolicyScope scope = policy.ScopeFor(image);
  return EvaluateRequirements(*scope.requirements, scope.name, image, manifest_digest, store);
}

absl::Status VerdictStatus(const TrustVerdict& verdict, const ImageReference& image,
                           const Digest& manifest_digest, std::string_view policy_source) {
  if (verdict.accepted) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(image.String(), " (", manifest_digest.str(), ") refused by policy ",
                   S(policy_source), ", scope ", verdict.scope, " (", verdict.requirement,
                   "): ", S(ReasonName(verdict.reason)), ": ", verdict.message));
}

}  // namespace modelfs
