// Building and strictly parsing simple-signing payloads.
#include "core/trust/simple_signing.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"
#include "core/trust/strict_json.h"

namespace modelfs {

using trust_internal::ExpectExactKeys;
using trust_internal::Json;
using trust_internal::S;

std::string BuildSimpleSigningPayload(std::string_view docker_reference,
                                      const Digest& manifest_digest,
                                      std::optional<std::string> creator) {
  Json j;
  j["critical"]["identity"]["docker-reference"] = std::string(docker_reference);
  j["critical"]["image"]["docker-manifest-digest"] = manifest_digest.str();
  j["critical"]["type"] = kSimpleSigningType;
  if (creator.has_value()) {
    j["optional"]["creator"] = *creator;
  } else {
    j["optional"] = nullptr;
  }
  return j.dump();  // nlohmann orders keys, which is cosign's order too
}

absl::StatusOr<SimpleSigningPayload> ParseSimpleSigningPayload(std::string_view bytes) {
  if (bytes.size() > kMaxSimpleSigningPayloadSize) {
    return absl::InvalidArgumentError(absl::StrCat("signature payload: ", bytes.size(),
                                                   " bytes, over the cap of ",
                                                   kMaxSimpleSigningPayloadSize));
  }
  ASSIGN_OR_RETURN(Json j, trust_internal::ParseStrictObject(bytes, "signature payload"));
  RETURN_IF_ERROR(ExpectExactKeys(j, {"critical", "optional"}, "signature payload"));
  SimpleSigningPayload out;

  const Json& optional = j["optional"];
  if (!optional.is_null()) {
    if (!optional.is_object()) {
      return absl::InvalidArgumentError(
          "signature payload: optional is neither null nor an object");
    }
    if (auto it = optional.find("creator"); it != optional.end()) {
      if (!it->is_string()) {
        return absl::InvalidArgumentError("signature payload: optional.creator is not a string");
      }
      out.creator = it->get<std::string>();
    }
    if (auto it = optional.find("timestamp"); it != optional.end()) {
      if (!it->is_number()) {
        return absl::InvalidArgumentError("signature payload: optional.timestamp is not a number");
      }
      double t = it->get<double>();
      if (!std::isfinite(t) || t < -9.2e18 || t > 9.2e18) {
        return absl::InvalidArgumentError("signature payload: optional.timestamp out of range");
      }
      out.timestamp = static_cast<int64_t>(t);
    }
  }

  const Json& critical = j["critical"];
  RETURN_IF_ERROR(
      ExpectExactKeys(critical, {"identity", "image", "type"}, "signature payload critical"));
  const Json& type = critical["type"];
  if (!type.is_string()) {
    return absl::InvalidArgumentError("signature payload: critical.type is not a string");
  }
  if (type.get<std::string>() != kSimpleSigningType) {
    return absl::InvalidArgumentError(absl::StrCat("signature payload: critical.type is \"",
                                                   type.get<std::string>(), "\", not \"",
                                                   kSimpleSigningType, "\""));
  }
  const Json& image = critical["image"];
  RETURN_IF_ERROR(
      ExpectExactKeys(image, {"docker-manifest-digest"}, "signature payload critical.image"));
  if (!image["docker-manifest-digest"].is_string()) {
    return absl::InvalidArgumentError(
        "signature payload: critical.image.docker-manifest-digest is not a string");
  }
  auto digest = Digest::Parse(image["docker-manifest-digest"].get<std::string>());
  if (!digest.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "signature payload: critical.image.docker-manifest-digest: ", digest.status().message()));
  }
  out.manifest_digest = *digest;
  const Json& identity = critical["identity"];
  RETURN_IF_ERROR(
      ExpectExactKeys(identity, {"docker-reference"}, "signature payload critical.identity"));
  if (!identity["docker-reference"].is_string()) {
    return absl::InvalidArgumentError(
        "signature payload: critical.identity.docker-reference is not a string");
  }
  out.docker_reference = identity["docker-reference"].get<std::string>();
  return out;
}

}  // namespace modelfs
