// The equivalence statement, DSSE signing and checking, and cosign's .att tag.
#include "core/attest/attestation.h"

#include <cmath>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/formats/safetensors.h"
#include "core/status/status_macros.h"
#include "core/trust/signature_store.h"

namespace modelfs {
namespace {

using Json = nlohmann::json;

absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr char kMediaTypeOciConfig[] = "application/vnd.oci.image.config.v1+json";
constexpr char kMediaTypeOciEmpty[] = "application/vnd.oci.empty.v1+json";
constexpr size_t kMaxAttConfigSize = 256 * 1024;

// JSON has no inf/NaN: a metric that is not finite is recorded as null.
Json Number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

Json ToleranceJson(const Tolerance& t) {
  return {{"maxRelL2", t.max_rel_l2}, {"minCosine", t.min_cosine}, {"maxAbsRel", t.max_abs_rel}};
}

Json ModelJson(const AttestedModel& m) {
  Json j = {{"reference", m.reference}, {"digest", m.digest.str()}};
  if (!m.model.empty()) j["model"] = m.model;
  return j;
}

// A small blob (an envelope, a config), capped and checked against its digest.
absl::StatusOr<std::string> GetCappedBlob(RegistryClient& client, const std::string& repo,
                                          const Digest& digest, size_t cap) {
  ASSIGN_OR_RETURN(std::string out, client.GetSmallBlob(repo, digest, cap));
  if (Digest::Of(out) != digest) {
    return absl::DataLossError(
        absl::StrCat("blob ", digest.str(), " in ", repo, " does not hash to its digest"));
  }
  return out;
}

absl::Status PushBytes(RegistryClient& client, const std::string& repo, const std::string& bytes) {
  const Digest d = Digest::Of(bytes);
  ASSIGN_OR_RETURN(bool have, client.BlobExists(repo, d));
  if (have) return absl::OkStatus();
  return client.PushBlob(repo, d, bytes.size(),
                         BlobReadAtString(std::make_shared<std::string>(bytes)));
}

const std::vector<std::string>& AttAccept() {
  static const std::vector<std::string> accept = {kMediaTypeOciManifest};
  return accept;
}

// The .att manifest's layers, checked for shape and count.
absl::StatusOr<Json> ParseAttManifest(const ManifestResult& m, const std::string& where) {
  ASSIGN_OR_RETURN(Json j, ParseStrictJson(m.bytes, where));
  if (!j.is_object() || j.contains("manifests")) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is not an image manifest"));
  }
  auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": no layers array"));
  }
  if (layers->size() > kMaxSignatureLayers) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", layers->size(), " attestation layers, over the cap of ", kMaxSignatureLayers));
  }
  return j;
}

}  // namespace

Json EquivalenceStatement(const AttestedModel& source, const AttestedModel& derived,
                          const EquivalenceReport& report, std::string_view tool_version) {
  Json tensors = Json::array();
  double worst_rel_l2 = 0, min_cosine = 1;
  std::string worst_tensor;
  for (const TensorComparison& t : report.tensors) {
    Json j = {{"derived", t.derived},
              {"source", t.source},
              {"sourceType", t.source_type},
              {"derivedType", t.derived_type},
              {"shape", t.shape},
              {"elements", t.elements},
              {"transform", t.transform},
              {"relL2", Number(t.rel_l2)},
              {"maxAbs", Number(t.max_abs)},
              {"maxAbsRel", Number(t.max_abs_rel)},
              {"cosine", Number(t.cosine)},
              {"pass", t.pass}};
    if (!t.pass) j["reason"] = t.reason;
    tensors.push_back(std::move(j));
    if (!(t.rel_l2 <= worst_rel_l2)) {
      worst_rel_l2 = t.rel_l2;
      worst_tensor = t.derived;
    }
    if (t.cosine < min_cosine) min_cosine = t.cosine;
  }
  Json tolerances = Json::object();
  for (const auto& [pair, tol] : report.tolerances) tolerances[pair] = ToleranceJson(tol);
  Json name_map = {{"map", report.name_map}};
  if (report.name_map != "identity") {
    name_map["nHead"] = report.arch_params.n_head;
    name_map["nHeadKv"] = report.arch_params.n_head_kv;
    name_map["nExpert"] = report.arch_params.n_expert;
    name_map["definition"] = "https://modelfs.dev/docs/tensor-names";
  }
  Json predicate = {
      {"source", ModelJson(source)},
      {"derived", ModelJson(derived)},
      {"nameMap", name_map},
      {"tolerances", tolerances},
      {"tensors", tensors},
      {"missing", report.missing},
      {"extra", report.extra},
      {"summary",
       {{"tensors", report.tensors.size()},
        {"passed", report.tensors.size() - report.failed()},
        {"failed", report.failed()},
        {"missing", report.missing.size()},
        {"extra", report.extra.size()},
        {"worstRelL2", Number(worst_rel_l2)},
        {"worstTensor", worst_tensor},
        {"minCosine", Number(min_cosine)},
        {"sourceBytesRead", report.source_bytes_read},
        {"derivedBytesRead", report.derived_bytes_read}}},
      {"equivalent", report.equivalent},
      {"tool", {{"name", "modelfs"}, {"version", std::string(tool_version)}}},
  };
  return {{"_type", kInTotoStatementType},
          {"subject", Json::array({{{"name", derived.name},
                                    {"digest", {{"sha256", std::string(derived.digest.hex())}}}}})},
          {"predicateType", kEquivalencePredicateType},
          {"predicate", predicate}};
}

std::string DssePae(std::string_view payload_type, std::string_view payload) {
  return absl::StrCat("DSSEv1 ", payload_type.size(), " ", Av(payload_type), " ", payload.size(),
                      " ", Av(payload));
}

absl::StatusOr<std::string> SignDsseEnvelope(std::string_view payload_type,
                                             std::string_view payload, const PrivateKey& key) {
  ASSIGN_OR_RETURN(std::string sig, key.Sign(DssePae(payload_type, payload)));
  RETURN_IF_ERROR(key.public_key().Verify(DssePae(payload_type, payload), sig));
  Json env = {{"payloadType", std::string(payload_type)},
              {"payload", absl::Base64Escape(Av(payload))},
              {"signatures", Json::array({{{"keyid", ""}, {"sig", absl::Base64Escape(sig)}}})}};
  return env.dump();
}

absl::StatusOr<DsseEnvelope> ParseDsseEnvelope(std::string_view envelope) {
  ASSIGN_OR_RETURN(Json env, ParseStrictJson(envelope, "DSSE envelope"));
  if (!env.is_object() || !env.contains("payloadType") || !env["payloadType"].is_string() ||
      !env.contains("payload") || !env["payload"].is_string() || !env.contains("signatures") ||
      !env["signatures"].is_array()) {
    return absl::InvalidArgumentError("DSSE envelope: want payloadType, payload and signatures");
  }
  DsseEnvelope out;
  out.payload_type = env["payloadType"].get<std::string>();
  // DSSE allows either base64 alphabet.
  const std::string b64 = env["payload"].get<std::string>();
  if (!absl::Base64Unescape(b64, &out.payload) && !absl::WebSafeBase64Unescape(b64, &out.payload)) {
    return absl::InvalidArgumentError("DSSE envelope: payload is not base64");
  }
  for (const Json& s : env["signatures"]) {
    if (!s.is_object() || !s.contains("sig") || !s["sig"].is_string()) continue;
    std::string sig;
    if (absl::Base64Unescape(s["sig"].get<std::string>(), &sig)) out.signatures.push_back(sig);
  }
  return out;
}

absl::StatusOr<std::string> VerifyDsseEnvelope(std::string_view envelope,
                                               std::string_view payload_type,
                                               const PublicKey& key) {
  ASSIGN_OR_RETURN(DsseEnvelope env, ParseDsseEnvelope(envelope));
  if (env.payload_type != payload_type) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DSSE envelope: payloadType \"", env.payload_type, "\", want \"", Av(payload_type), "\""));
  }
  const std::string pae = DssePae(env.payload_type, env.payload);
  for (const std::string& sig : env.signatures) {
    if (key.Verify(pae, sig).ok()) return env.payload;
  }
  return absl::PermissionDeniedError(
      absl::StrCat("no signature of the DSSE envelope verifies with key ", key.name()));
}

std::string JudgeStatement(std::string_view payload, const Digest& subject,
                           std::string_view predicate_type, Json* statement, std::string* detail) {
  auto parsed = ParseStrictJson(payload, "in-toto statement");
  if (!parsed.ok() || !parsed->is_object() ||
      (parsed->value("_type", "") != kInTotoStatementType &&
       parsed->value("_type", "") != kInTotoStatementTypeV01) ||
      !parsed->contains("subject") || !(*parsed)["subject"].is_array()) {
    *detail = "not an in-toto Statement (v1 or v0.1)";
    return "bad_payload";
  }
  *statement = *parsed;
  bool names_subject = false;
  for (const Json& s : (*parsed)["subject"]) {
    if (s.is_object() && s.contains("digest") && s["digest"].is_object() &&
        s["digest"].contains("sha256") && s["digest"]["sha256"].is_string() &&
        s["digest"]["sha256"].get<std::string>() == std::string(subject.hex())) {
      names_subject = true;
    }
  }
  if (!names_subject) {
    *detail = absl::StrCat("the statement's subject is not ", subject.str());
    return "subject_mismatch";
  }
  const Json& type = (*parsed)["predicateType"];
  if (!type.is_string() || type.get<std::string>() != predicate_type) {
    *detail = absl::StrCat("predicateType ", type.is_string() ? type.get<std::string>() : "?",
                           ", want ", Av(predicate_type));
    return "wrong_predicate_type";
  }
  if (predicate_type == kEquivalencePredicateType) {
    const Json& p = (*parsed)["predicate"];
    if (!p.is_object() || !p.contains("equivalent") || p["equivalent"] != true) {
      *detail = "the attestation says the model is not equivalent to its source";
      return "not_equivalent";
    }
  }
  return "";
}

std::string AttestationTag(const Digest& subject) {
  return absl::StrCat("sha256-", Av(subject.hex()), ".att");
}

absl::StatusOr<StoredAttestation> StoreAttestation(
    RegistryClient& client, const std::string& repository, const Digest& subject,
    const std::string& subject_media_type, uint64_t subject_size, const std::string& envelope,
    std::string_view predicate_type) {
  StoredAttestation out;
  out.tag = AttestationTag(subject);
  const std::string where = absl::StrCat("attestation manifest ", repository, ":", out.tag);
  const Digest env_digest = Digest::Of(envelope);
  const Json layer = {{"mediaType", kMediaTypeDsseEnvelope},
                      {"digest", env_digest.str()},
                      {"size", envelope.size()},
                      {"annotations",
                       {{kCosignSignatureAnnotation, ""},
                        {kPredicateTypeAnnotation, std::string(predicate_type)}}}};
  Json layers = Json::array();
  Json config = {{"architecture", ""},
                 {"os", ""},
                 {"config", Json::object()},
                 {"rootfs", {{"type", "layers"}, {"diff_ids", Json::array()}}}};
  auto existing = client.GetManifest(repository, out.tag, AttAccept());
  if (existing.ok()) {
    ASSIGN_OR_RETURN(Json j, ParseAttManifest(*existing, where));
    layers = j["layers"];
    if (layers.size() >= kMaxSignatureLayers) {
      return absl::FailedPreconditionError(absl::StrCat(where, " already holds ", layers.size(),
                                                        " attestations, the most modelfs reads"));
    }
    // Keep the config's diff_ids, as cosign appends to them.
    if (auto c = j.find("config");
        c != j.end() && c->is_object() && c->contains("digest") && (*c)["digest"].is_string()) {
      if (auto cd = Digest::Parse((*c)["digest"].get<std::string>()); cd.ok()) {
        auto bytes = GetCappedBlob(client, repository, *cd, kMaxAttConfigSize);
        if (bytes.ok()) {
          auto parsed = ParseStrictJson(*bytes, "attestation config");
          if (parsed.ok() && parsed->is_object() && parsed->contains("rootfs") &&
              (*parsed)["rootfs"].is_object() && (*parsed)["rootfs"].contains("diff_ids") &&
              (*parsed)["rootfs"]["diff_ids"].is_array()) {
            config = *parsed;
          }
        }
      }
    }
  } else if (existing.status().code() != absl::StatusCode::kNotFound) {
    return absl::Status(existing.status().code(),
                        absl::StrCat(where, ": ", existing.status().message()));
  }
  RETURN_IF_ERROR(PushBytes(client, repository, envelope));
  layers.push_back(layer);
  config["rootfs"]["diff_ids"].push_back(env_digest.str());
  const std::string config_bytes = config.dump();
  RETURN_IF_ERROR(PushBytes(client, repository, config_bytes));
  Json manifest = {{"schemaVersion", 2},
                   {"mediaType", kMediaTypeOciManifest},
                   {"config",
                    {{"mediaType", kMediaTypeOciConfig},
                     {"digest", Digest::Of(config_bytes).str()},
                     {"size", config_bytes.size()}}},
                   {"layers", layers}};
  ASSIGN_OR_RETURN(out.att_manifest,
                   client.PutManifest(repository, out.tag, manifest.dump(), kMediaTypeOciManifest));
  out.envelopes = layers.size();

  // OCI 1.1: the envelope as a referrer of the subject, where the registry indexes them.
  ASSIGN_OR_RETURN(const bool api, client.HasReferrersApi(repository, subject));
  if (api) {
    const std::string empty = "{}";
    RETURN_IF_ERROR(PushBytes(client, repository, empty));
    Json referrer = {
        {"schemaVersion", 2},
        {"mediaType", kMediaTypeOciManifest},
        {"artifactType", kMediaTypeDsseEnvelope},
        {"config",
         {{"mediaType", kMediaTypeOciEmpty},
          {"digest", Digest::Of(empty).str()},
          {"size", empty.size()}}},
        {"layers", Json::array({{{"mediaType", kMediaTypeDsseEnvelope},
                                 {"digest", env_digest.str()},
                                 {"size", envelope.size()}}})},
        {"subject",
         {{"mediaType", subject_media_type}, {"digest", subject.str()}, {"size", subject_size}}},
        {"annotations", {{kPredicateTypeAnnotation, std::string(predicate_type)}}}};
    const std::string bytes = referrer.dump();
    const Digest d = Digest::Of(bytes);
    ASSIGN_OR_RETURN(out.referrer,
                     client.PutManifest(repository, d.str(), bytes, kMediaTypeOciManifest));
  }
  return out;
}

absl::StatusOr<AttestationVerdict> VerifyAttestations(RegistryClient& client,
                                                      const std::string& repository,
                                                      const Digest& subject,
                                                      const std::vector<PublicKey>& keys,
                                                      std::string_view predicate_type) {
  AttestationVerdict v;
  const std::string tag = AttestationTag(subject);
  const std::string where = absl::StrCat("attestation manifest ", repository, ":", tag);
  auto m = client.GetManifest(repository, tag, AttAccept());
  if (absl::IsNotFound(m.status())) {
    v.reason = "no_attestation";
    v.detail = absl::StrCat("tag ", tag, " does not exist in ", repository);
    return v;
  }
  if (!m.ok()) {
    return absl::Status(m.status().code(), absl::StrCat(where, ": ", m.status().message()));
  }
  // A malformed .att manifest (an index, no layers, over the cap) is a refusal, not bad input.
  absl::StatusOr<Json> parsed = ParseAttManifest(*m, where);
  if (!parsed.ok()) {
    v.reason = "bad_payload";
    v.detail = std::string(parsed.status().message());
    return v;
  }
  Json j = *std::move(parsed);
  // The most telling refusal seen: a later check failing beats an earlier one.
  int rank = 0;
  auto refuse = [&](int r, std::string reason, std::string detail) {
    if (r >= rank) {
      rank = r;
      v.reason = std::move(reason);
      v.detail = std::move(detail);
    }
  };
  refuse(0, "no_attestation", absl::StrCat(where, " holds no DSSE envelope"));
  for (const Json& layer : j["layers"]) {
    if (!layer.is_object() || layer.value("mediaType", "") != kMediaTypeDsseEnvelope) continue;
    ++v.envelopes;
    auto d = Digest::Parse(layer.value("digest", ""));
    const uint64_t size = layer.value("size", uint64_t{0});
    if (!d.ok() || size > kMaxEnvelopeSize) {
      refuse(
          1, "bad_payload",
          absl::StrCat(where, ": a layer with a bad digest or over ", kMaxEnvelopeSize, " bytes"));
      continue;
    }
    auto envelope = GetCappedBlob(client, repository, *d, kMaxEnvelopeSize);
    if (!envelope.ok()) {
      if (absl::IsDataLoss(envelope.status()) || absl::IsInvalidArgument(envelope.status())) {
        refuse(1, "bad_payload", std::string(envelope.status().message()));
        continue;
      }
      return envelope.status();
    }
    std::string payload;
    std::string key_name;
    absl::Status last = absl::PermissionDeniedError("no key");
    for (const PublicKey& k : keys) {
      auto p = VerifyDsseEnvelope(*envelope, kInTotoPayloadType, k);
      if (p.ok()) {
        payload = *std::move(p);
        key_name = k.name();
        break;
      }
      last = p.status();
    }
    if (key_name.empty()) {
      refuse(absl::IsPermissionDenied(last) ? 2 : 1,
             absl::IsPermissionDenied(last) ? "no_key_matched" : "bad_payload",
             absl::StrCat("envelope ", d->str(), ": ", last.message()));
      continue;
    }
    Json statement;
    std::string detail;
    const std::string reason =
        JudgeStatement(payload, subject, predicate_type, &statement, &detail);
    if (statement.is_object()) {
      v.statement = statement;
      v.key = key_name;
    }
    if (!reason.empty()) {
      const int r = reason == "bad_payload" ? 3 : reason == "not_equivalent" ? 5 : 4;
      refuse(r, reason, absl::StrCat("envelope ", d->str(), ": ", detail));
      continue;
    }
    v.accepted = true;
    v.reason.clear();
    v.detail = absl::StrCat("envelope ", d->str(), " verified with key ", key_name);
    return v;
  }
  return v;
}

}  // namespace modelfs
