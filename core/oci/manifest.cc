#include "core/oci/manifest.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/oci/media_types.h"
#include "core/oci/oci_json.h"
#include "core/status/status_macros.h"

namespace modelfs {

using oci_json::AV;
using oci_json::Json;

namespace {

absl::Status CheckSchemaVersion(const Json& j, std::string_view where) {
  ASSIGN_OR_RETURN(std::optional<int64_t> v, oci_json::GetInt(j, "schemaVersion", where, true));
  if (*v != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(AV(where), ".schemaVersion: is ", *v, ", want 2"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Descriptor>> DescriptorArray(const Json& j, std::string_view key,
                                                        std::string_view where) {
  const Json* arr = oci_json::Find(j, key);
  const std::string field = oci_json::Field(where, key);
  if (arr == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(field, ": required field missing"));
  if (!arr->is_array()) return absl::InvalidArgumentError(absl::StrCat(field, ": not an array"));
  std::vector<Descriptor> out;
  out.reserve(arr->size());
  for (size_t i = 0; i < arr->size(); ++i) {
    ASSIGN_OR_RETURN(Descriptor d,
                     oci_json::DescriptorFromJson((*arr)[i], absl::StrCat(field, "[", i, "]")));
    out.push_back(std::move(d));
  }
  return out;
}

absl::StatusOr<std::optional<Descriptor>> OptionalDescriptor(const Json& j, std::string_view key,
                                                             std::string_view where) {
  const Json* v = oci_json::Find(j, key);
  if (v == nullptr) return std::optional<Descriptor>();
  ASSIGN_OR_RETURN(Descriptor d, oci_json::DescriptorFromJson(*v, oci_json::Field(where, key)));
  return std::optional<Descriptor>(std::move(d));
}

void PutCommon(Json& j, int schema_version, const std::string& media_type,
               const std::string& artifact_type, const std::optional<Descriptor>& subject,
               const std::map<std::string, std::string>& annotations) {
  j["schemaVersion"] = schema_version;
  if (!media_type.empty()) j["mediaType"] = media_type;
  if (!artifact_type.empty()) j["artifactType"] = artifact_type;
  if (subject.has_value()) j["subject"] = oci_json::DescriptorToJson(*subject);
  if (!annotations.empty()) j["annotations"] = annotations;
}

}  // namespace

absl::StatusOr<Manifest> ParseManifest(std::string_view bytes) {
  constexpr std::string_view kWhere = "manifest";
  ASSIGN_OR_RETURN(Json j, oci_json::ParseObject(bytes, kWhere));
  RETURN_IF_ERROR(CheckSchemaVersion(j, kWhere));
  Manifest m;
  ASSIGN_OR_RETURN(m.media_type, oci_json::GetString(j, "mediaType", kWhere, false));
  if (!m.media_type.empty() && !IsManifestMediaType(m.media_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest.mediaType: '", m.media_type, "' is not an image manifest",
                     IsIndexMediaType(m.media_type) ? " (it is an index; use ParseIndex)" : ""));
  }
  if (oci_json::Find(j, "manifests") != nullptr) {
    return absl::InvalidArgumentError(
        "manifest.manifests: present, so this is an index, not a manifest");
  }
  ASSIGN_OR_RETURN(m.artifact_type, oci_json::GetString(j, "artifactType", kWhere, false));
  const Json* config = oci_json::Find(j, "config");
  if (config == nullptr)
    return absl::InvalidArgumentError("manifest.config: required field missing");
  ASSIGN_OR_RETURN(m.config, oci_json::DescriptorFromJson(*config, "manifest.config"));
  ASSIGN_OR_RETURN(m.layers, DescriptorArray(j, "layers", kWhere));
  ASSIGN_OR_RETURN(m.subject, OptionalDescriptor(j, "subject", kWhere));
  ASSIGN_OR_RETURN(m.annotations, oci_json::GetStringMap(j, "annotations", kWhere));
  return m;
}

absl::StatusOr<Index> ParseIndex(std::string_view bytes) {
  constexpr std::string_view kWhere = "index";
  ASSIGN_OR_RETURN(Json j, oci_json::ParseObject(bytes, kWhere));
  RETURN_IF_ERROR(CheckSchemaVersion(j, kWhere));
  Index index;
  ASSIGN_OR_RETURN(index.media_type, oci_json::GetString(j, "mediaType", kWhere, false));
  if (!index.media_type.empty() && !IsIndexMediaType(index.media_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("index.mediaType: '", index.media_type, "' is not an image index"));
  }
  ASSIGN_OR_RETURN(index.artifact_type, oci_json::GetString(j, "artifactType", kWhere, false));
  ASSIGN_OR_RETURN(index.manifests, DescriptorArray(j, "manifests", kWhere));
  ASSIGN_OR_RETURN(index.subject, OptionalDescriptor(j, "subject", kWhere));
  ASSIGN_OR_RETURN(index.annotations, oci_json::GetStringMap(j, "annotations", kWhere));
  return index;
}

std::string SerializeManifest(const Manifest& m) {
  Json j = Json::object();
  PutCommon(j, m.schema_version, m.media_type, m.artifact_type, m.subject, m.annotations);
  j["config"] = oci_json::DescriptorToJson(m.config);
  Json layers = Json::array();
  for (const Descriptor& d : m.layers) layers.push_back(oci_json::DescriptorToJson(d));
  j["layers"] = std::move(layers);
  return oci_json::Dump(j);
}

std::string SerializeIndex(const Index& index) {
  Json j = Json::object();
  PutCommon(j, index.schema_version, index.media_type, index.artifact_type, index.subject,
            index.annotations);
  Json manifests = Json::array();
  for (const Descriptor& d : index.manifests) manifests.push_back(oci_json::DescriptorToJson(d));
  j["manifests"] = std::move(manifests);
  return oci_json::Dump(j);
}

Descriptor DescribeBlob(std::string_view media_type, std::string_view bytes) {
  Descriptor d;
  d.media_type = std::string(media_type);
  d.digest = Digest::Of(bytes);
  d.size = bytes.size();
  return d;
}

std::string_view EffectiveArtifactType(const Manifest& m) {
  if (!m.artifact_type.empty()) return m.artifact_type;
  return m.config.media_type;
}

// --- descriptor.h ---------------------------------------------------------------------------

const std::string* Descriptor::Annotation(std::string_view key) const {
  auto it = annotations.find(std::string(key));
  return it == annotations.end() ? nullptr : &it->second;
}

absl::StatusOr<Descriptor> ParseDescriptor(std::string_view json) {
  ASSIGN_OR_RETURN(Json j, oci_json::ParseObject(json, "descriptor"));
  return oci_json::DescriptorFromJson(j, "descriptor");
}

std::string SerializeDescriptor(const Descriptor& d) {
  return oci_json::Dump(oci_json::DescriptorToJson(d));
}

std::string ReferrersFallbackTag(const Digest& subject) {
  return absl::StrCat("sha256-", AV(subject.hex()));
}

}  // namespace modelfs
