// Reading and appending cosign's .sig tag through RegistryClient.
#include "core/trust/signature_store.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/registry/registry_client.h"
#include "core/status/status_macros.h"
#include "core/trust/simple_signing.h"
#include "core/trust/strict_json.h"

namespace modelfs {

using trust_internal::Json;
using trust_internal::S;

namespace {

constexpr char kMediaTypeOciConfig[] = "application/vnd.oci.image.config.v1+json";
constexpr size_t kMaxSigConfigSize = 256 * 1024;

const std::vector<std::string>& SigAccept() {
  // The index types are accepted only to be recognised and refused by name.
  static const std::vector<std::string> accept = {kMediaTypeOciManifest, kMediaTypeDockerManifest,
                                                  kMediaTypeOciIndex, kMediaTypeDockerManifestList};
  return accept;
}

// The parsed .sig manifest: the raw layer objects, checked for shape and count.
absl::StatusOr<Json> ParseSigManifest(const ManifestResult& m, const std::string& where) {
  if (m.media_type == kMediaTypeOciIndex || m.media_type == kMediaTypeDockerManifestList) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is an index (", m.media_type, "), not a signature manifest"));
  }
  ASSIGN_OR_RETURN(Json j, trust_internal::ParseStrictObject(m.bytes, where));
  if (j.contains("manifests")) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is an index, not a signature manifest"));
  }
  if (auto mt = j.find("mediaType");
      mt != j.end() && mt->is_string() &&
      (*mt == kMediaTypeOciIndex || *mt == kMediaTypeDockerManifestList)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is an index, not a signature manifest"));
  }
  auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": no layers array"));
  }
  if (layers->size() > kMaxSignatureLayers) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", layers->size(), " signature layers, over the cap of ", kMaxSignatureLayers));
  }
  return j;
}

}  // namespace

std::string SignatureTag(const Digest& manifest_digest) {
  return absl::StrCat("sha256-", S(manifest_digest.hex()), ".sig");
}

absl::StatusOr<SignatureSet> RegistrySignatureStore::Fetch(const std::string& repository,
                                                           const Digest& manifest_digest) {
  const std::string tag = SignatureTag(manifest_digest);
  const std::string where = absl::StrCat("signature manifest ", repository, ":", tag);
  SignatureSet out;
  auto m = client_->GetManifest(repository, tag, SigAccept());
  if (!m.ok()) {
    if (m.status().code() == absl::StatusCode::kNotFound) return out;
    return absl::Status(m.status().code(), absl::StrCat(where, ": ", m.status().message()));
  }
  out.found = true;
  out.sig_manifest_digest = m->digest;
  ASSIGN_OR_RETURN(Json j, ParseSigManifest(*m, where));
  size_t index = 0;
  for (const Json& layer : j["layers"]) {
    FetchedSignature sig;
    std::string lw = absl::StrCat(where, " layers[", index++, "]");
    auto bad = [&](std::string why) {
      sig.status = absl::InvalidArgumentError(absl::StrCat(lw, ": ", why));
    };
    if (!layer.is_object()) {
      bad("not an object");
    } else if (!layer.contains("digest") || !layer["digest"].is_string()) {
      bad("no digest");
    } else if (auto d = Digest::Parse(layer["digest"].get<std::string>()); !d.ok()) {
      bad(std::string(d.status().message()));
    } else {
      sig.layer_digest = *d;
      lw = absl::StrCat(lw, " (", d->str(), ")");
      const Json* annotations = layer.contains("annotations") ? &layer["annotations"] : nullptr;
      if (layer.value("mediaType", "") != kMediaTypeCosignSimpleSigning) {
        bad(absl::StrCat("media type is not ", kMediaTypeCosignSimpleSigning));
      } else if (!layer.contains("size") || !layer["size"].is_number_unsigned()) {
        bad("no size");
      } else if (layer["size"].get<uint64_t>() > kMaxSimpleSigningPayloadSize) {
        bad(absl::StrCat("payload of ", layer["size"].get<uint64_t>(), " bytes, over the cap of ",
                         kMaxSimpleSigningPayloadSize));
      } else if (annotations == nullptr || !annotations->is_object() ||
                 !annotations->contains(kCosignSignatureAnnotation) ||
                 !(*annotations)[kCosignSignatureAnnotation].is_string()) {
        bad(absl::StrCat("no ", kCosignSignatureAnnotation, " annotation"));
      } else {
        sig.signature_b64 = (*annotations)[kCosignSignatureAnnotation].get<std::string>();
        uint64_t size = layer["size"].get<uint64_t>();
        auto payload = client_->GetSmallBlob(repository, *d, kMaxSimpleSigningPayloadSize);
        if (!payload.ok()) {
          if (payload.status().code() != absl::StatusCode::kInvalidArgument) {
            // The registry failed us: the set cannot be judged.
            return absl::Status(payload.status().code(),
                                absl::StrCat(lw, ": ", payload.status().message()));
          }
          bad(std::string(payload.status().message()));
        } else if (Digest::Of(*payload) != *d) {
          bad(absl::StrCat("payload hashes to ", Digest::Of(*payload).str()));
        } else if (payload->size() != size) {
          bad(absl::StrCat("payload is ", payload->size(), " bytes, the descriptor says ", size));
        } else {
          sig.payload = std::move(*payload);
        }
      }
    }
    out.signatures.push_back(std::move(sig));
  }
  return out;
}

absl::StatusOr<AppendResult> RegistrySignatureStore::Append(const std::string& repository,
                                                            const Digest& manifest_digest,
                                                            const std::string& payload,
                                                            const std::string& signature_der) {
  AppendResult result;
  result.tag = SignatureTag(manifest_digest);
  const std::string where = absl::StrCat("signature manifest ", repository, ":", result.tag);
  const std::string signature_b64 = absl::Base64Escape(signature_der);
  const Digest payload_digest = Digest::Of(payload);

  Json manifest = {{"schemaVersion", 2}, {"mediaType", kMediaTypeOciManifest}};
  Json layers = Json::array();
  Json config = {{"architecture", ""},
                 {"os", ""},
                 {"config", Json::object()},
                 {"rootfs", {{"type", "layers"}, {"diff_ids", Json::array()}}}};
  auto existing = client_->GetManifest(repository, result.tag, SigAccept());
  if (existing.ok()) {
    ASSIGN_OR_RETURN(Json j, ParseSigManifest(*existing, where));
    layers = j["layers"];
    for (const Json& layer : layers) {
      if (layer.is_object() && layer.value("digest", "") == payload_digest.str() &&
          layer.contains("annotations") && layer["annotations"].is_object() &&
          layer["annotations"].value(kCosignSignatureAnnotation, "") == signature_b64) {
        result.already_present = true;
        result.sig_manifest_digest = existing->digest;
        result.signatures = layers.size();
        return result;
      }
    }
    if (layers.size() >= kMaxSignatureLayers) {
      return absl::FailedPreconditionError(absl::StrCat(where, " already holds ", layers.size(),
                                                        " signatures, the most modelfs reads"));
    }
    // Keep what the config held (cosign and skopeo append to its diff_ids, as we do).
    if (auto c = j.find("config");
        c != j.end() && c->is_object() && c->contains("digest") && (*c)["digest"].is_string()) {
      if (auto cd = Digest::Parse((*c)["digest"].get<std::string>()); cd.ok()) {
        auto bytes = client_->GetSmallBlob(repository, *cd, kMaxSigConfigSize);
        if (bytes.ok() && Digest::Of(*bytes) == *cd) {
          auto parsed = trust_internal::ParseStrictObject(*bytes, "signature config");
          if (parsed.ok() && parsed->contains("rootfs") && (*parsed)["rootfs"].is_object() &&
              (*parsed)["rootfs"].contains("diff_ids") &&
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

  RETURN_IF_ERROR(client_->PushBlob(repository, payload_digest, payload.size(),
                                    BlobReadAtString(std::make_shared<std::string>(payload))));
  layers.push_back({{"mediaType", kMediaTypeCosignSimpleSigning},
                    {"digest", payload_digest.str()},
                    {"size", payload.size()},
                    {"annotations", {{kCosignSignatureAnnotation, signature_b64}}}});
  config["rootfs"]["diff_ids"].push_back(payload_digest.str());
  const std::string config_bytes = config.dump();
  const Digest config_digest = Digest::Of(config_bytes);
  ASSIGN_OR_RETURN(bool have_config, client_->BlobExists(repository, config_digest));
  if (!have_config) {
    RETURN_IF_ERROR(
        client_->PushBlob(repository, config_digest, config_bytes.size(),
                          BlobReadAtString(std::make_shared<std::string>(config_bytes))));
  }
  manifest["config"] = {{"mediaType", kMediaTypeOciConfig},
                        {"digest", config_digest.str()},
                        {"size", config_bytes.size()}};
  manifest["layers"] = layers;
  ASSIGN_OR_RETURN(
      result.sig_manifest_digest,
      client_->PutManifest(repository, result.tag, manifest.dump(), kMediaTypeOciManifest));
  result.signatures = layers.size();
  return result;
}

}  // namespace modelfs
