#include "core/oci/oci_json.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs::oci_json {
namespace {

absl::Status Bad(std::string_view where, std::string_view key, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(Field(where, key), ": ", AV(what)));
}

}  // namespace

std::string Field(std::string_view where, std::string_view key) {
  if (where.empty()) return std::string(key);
  return absl::StrCat(AV(where), ".", AV(key));
}

absl::StatusOr<Json> ParseObject(std::string_view bytes, std::string_view what) {
  Json j = Json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat(AV(what), ": not valid JSON (", bytes.size(), " bytes)"));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(AV(what), ": not a JSON object"));
  }
  return j;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

const Json* Find(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::string> GetString(const Json& obj, std::string_view key, std::string_view where,
                                      bool required) {
  const Json* v = Find(obj, key);
  if (v == nullptr) {
    if (required) return Bad(where, key, "required field missing");
    return std::string();
  }
  if (!v->is_string()) return Bad(where, key, "not a string");
  return v->get_ref<const std::string&>();
}

absl::StatusOr<std::optional<uint64_t>> GetSize(const Json& obj, std::string_view key,
                                                std::string_view where, bool required) {
  const Json* v = Find(obj, key);
  if (v == nullptr) {
    if (required) return Bad(where, key, "required field missing");
    return std::optional<uint64_t>();
  }
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Bad(where, key, absl::StrCat("size ", u, " exceeds int64"));
    }
    return std::optional<uint64_t>(u);
  }
  if (v->is_number_integer()) return Bad(where, key, "negative size");
  return Bad(where, key, "not a non-negative integer");
}

absl::StatusOr<std::optional<int64_t>> GetInt(const Json& obj, std::string_view key,
                                              std::string_view where, bool required) {
  const Json* v = Find(obj, key);
  if (v == nullptr) {
    if (required) return Bad(where, key, "required field missing");
    return std::optional<int64_t>();
  }
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Bad(where, key, "integer out of range");
    }
    return std::optional<int64_t>(static_cast<int64_t>(u));
  }
  if (v->is_number_integer()) return std::optional<int64_t>(v->get<int64_t>());
  return Bad(where, key, "not an integer");
}

absl::StatusOr<std::optional<bool>> GetBool(const Json& obj, std::string_view key,
                                            std::string_view where) {
  const Json* v = Find(obj, key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return Bad(where, key, "not a boolean");
  return std::optional<bool>(v->get<bool>());
}

absl::StatusOr<std::vector<std::string>> GetStringArray(const Json& obj, std::string_view key,
                                                        std::string_view where) {
  std::vector<std::string> out;
  const Json* v = Find(obj, key);
  if (v == nullptr) return out;
  if (!v->is_array()) return Bad(where, key, "not an array");
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& e = (*v)[i];
    if (!e.is_string()) return Bad(where, absl::StrCat(AV(key), "[", i, "]"), "not a string");
    out.push_back(e.get<std::string>());
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> GetStringMap(const Json& obj,
                                                                std::string_view key,
                                                                std::string_view where) {
  std::map<std::string, std::string> out;
  const Json* v = Find(obj, key);
  if (v == nullptr) return out;
  if (!v->is_object()) return Bad(where, key, "not an object");
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it.value().is_string()) {
      return Bad(where, absl::StrCat(AV(key), "[\"", it.key(), "\"]"), "not a string");
    }
    out.emplace(it.key(), it.value().get<std::string>());
  }
  return out;
}

absl::StatusOr<Digest> GetDigest(const Json& obj, std::string_view key, std::string_view where) {
  ASSIGN_OR_RETURN(std::string s, GetString(obj, key, where, /*required=*/true));
  absl::StatusOr<Digest> d = Digest::Parse(s);
  if (!d.ok()) return Bad(where, key, std::string(d.status().message()));
  return d;
}

namespace {

absl::StatusOr<Platform> PlatformFromJson(const Json& j, std::string_view where) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(AV(where), ": not an object"));
  Platform p;
  ASSIGN_OR_RETURN(p.architecture, GetString(j, "architecture", where, true));
  ASSIGN_OR_RETURN(p.os, GetString(j, "os", where, true));
  ASSIGN_OR_RETURN(p.os_version, GetString(j, "os.version", where, false));
  ASSIGN_OR_RETURN(p.os_features, GetStringArray(j, "os.features", where));
  ASSIGN_OR_RETURN(p.variant, GetString(j, "variant", where, false));
  return p;
}

}  // namespace

absl::StatusOr<Descriptor> DescriptorFromJson(const Json& j, std::string_view where) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(AV(where), ": not an object"));
  Descriptor d;
  ASSIGN_OR_RETURN(d.media_type, GetString(j, "mediaType", where, true));
  ASSIGN_OR_RETURN(d.digest, GetDigest(j, "digest", where));
  ASSIGN_OR_RETURN(std::optional<uint64_t> size, GetSize(j, "size", where, true));
  d.size = *size;
  ASSIGN_OR_RETURN(d.urls, GetStringArray(j, "urls", where));
  ASSIGN_OR_RETURN(d.annotations, GetStringMap(j, "annotations", where));
  ASSIGN_OR_RETURN(d.artifact_type, GetString(j, "artifactType", where, false));
  if (const Json* p = Find(j, "platform")) {
    ASSIGN_OR_RETURN(d.platform, PlatformFromJson(*p, Field(where, "platform")));
  }
  if (Find(j, "data") != nullptr) {
    ASSIGN_OR_RETURN(std::string b64, GetString(j, "data", where, true));
    std::string raw;
    if (!absl::Base64Unescape(b64, &raw)) return Bad(where, "data", "not valid base64");
    if (raw.size() != d.size || Digest::Of(raw) != d.digest) {
      return absl::DataLossError(absl::StrCat(Field(where, "data"), ": embedded ", raw.size(),
                                              " bytes do not match ", d.digest.str(), " size ",
                                              d.size));
    }
    d.data = std::move(raw);
  }
  return d;
}

Json DescriptorToJson(const Descriptor& d) {
  Json j = Json::object();
  j["mediaType"] = d.media_type;
  j["digest"] = d.digest.str();
  j["size"] = d.size;
  if (!d.urls.empty()) j["urls"] = d.urls;
  if (!d.annotations.empty()) j["annotations"] = d.annotations;
  if (d.data.has_value()) j["data"] = absl::Base64Escape(*d.data);
  if (!d.artifact_type.empty()) j["artifactType"] = d.artifact_type;
  if (d.platform.has_value()) {
    Json p = Json::object();
    p["architecture"] = d.platform->architecture;
    p["os"] = d.platform->os;
    if (!d.platform->os_version.empty()) p["os.version"] = d.platform->os_version;
    if (!d.platform->os_features.empty()) p["os.features"] = d.platform->os_features;
    if (!d.platform->variant.empty()) p["variant"] = d.platform->variant;
    j["platform"] = std::move(p);
  }
  return j;
}

}  // namespace modelfs::oci_json
