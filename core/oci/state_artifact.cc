#include "core/oci/state_artifact.h"

#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/oci/media_types.h"
#include "core/oci/modelpack.h"
#include "core/oci/oci_json.h"
#include "core/oci/path_safety.h"
#include "core/status/status_macros.h"

namespace modelfs {

using oci_json::AV;
using oci_json::Json;

namespace {

absl::Status Bad(std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("state config.", AV(field), ": ", AV(why)));
}

// Refuses members of `obj` that are not in `known`: a reader of v1 cannot know what a field it
// has never seen means for whether the state loads.
absl::Status OnlyKnownFields(const Json& obj, std::string_view where,
                             std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : obj.items()) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || key == k;
    if (!ok) return Bad(where.empty() ? key : absl::StrCat(AV(where), ".", key), "unknown field");
  }
  return absl::OkStatus();
}

// A short printable-ASCII label (format, precision): shown to users and compared by runtimes.
absl::Status CheckLabel(std::string_view field, std::string_view v) {
  if (v.empty()) return Bad(field, "empty");
  if (v.size() > kMaxStateFieldBytes) {
    return Bad(field, absl::StrCat("longer than ", kMaxStateFieldBytes, " bytes"));
  }
  for (char c : v) {
    if (c < 0x21 || c > 0x7e) return Bad(field, "not printable ASCII without spaces");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RequiredString(const Json& j, std::string_view key) {
  const Json* v = oci_json::Find(j, key);
  if (v == nullptr) return Bad(key, "required field missing");
  if (!v->is_string()) return Bad(key, "not a string");
  return v->get<std::string>();
}

}  // namespace

absl::Status CheckStateName(std::string_view name) {
  if (name.empty() || name.size() > kMaxStateFieldBytes) {
    return absl::InvalidArgumentError(absl::StrCat("state name \"", AV(name.substr(0, 200)),
                                                   "\": want 1 to ", kMaxStateFieldBytes,
                                                   " characters"));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "state name: only letters, digits, '_', '.' and '-' are allowed (it becomes a tag)"));
    }
  }
  if (name[0] == '.' || name[0] == '-') {
    return absl::InvalidArgumentError(
        absl::StrCat("state name \"", AV(name), "\": must not start with '.' or '-'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<StateConfig> ParseStateConfig(std::string_view bytes) {
  if (bytes.size() > kMaxStateConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("state config: ", bytes.size(), " bytes, more than ", kMaxStateConfigBytes));
  }
  ASSIGN_OR_RETURN(Json j, oci_json::ParseObject(bytes, "state config"));
  RETURN_IF_ERROR(
      OnlyKnownFields(j, "", {"schemaVersion", "name", "format", "model", "tokens", "precision"}));
  StateConfig c;
  const Json* version = oci_json::Find(j, "schemaVersion");
  if (version == nullptr) return Bad("schemaVersion", "required field missing");
  if (!version->is_number_unsigned() || version->get<uint64_t>() != 1) {
    return Bad("schemaVersion", absl::StrCat("is ", oci_json::Dump(*version), ", want 1"));
  }
  ASSIGN_OR_RETURN(c.name, RequiredString(j, "name"));
  if (absl::Status st = CheckStateName(c.name); !st.ok())
    return Bad("name", std::string(st.message()));
  ASSIGN_OR_RETURN(c.format, RequiredString(j, "format"));
  RETURN_IF_ERROR(CheckLabel("format", c.format));
  if (const Json* p = oci_json::Find(j, "precision")) {
    if (!p->is_string()) return Bad("precision", "not a string");
    c.precision = p->get<std::string>();
    RETURN_IF_ERROR(CheckLabel("precision", c.precision));
  }
  if (const Json* t = oci_json::Find(j, "tokens")) {
    // Integers only (a float or a negative number is refused), at most 2^53 so every JSON
    // reader sees the same value.
    if (!t->is_number_unsigned()) return Bad("tokens", "not a non-negative integer");
    const uint64_t tokens = t->get<uint64_t>();
    if (tokens > (1ull << 53)) return Bad("tokens", "larger than 2^53");
    c.tokens = tokens;
  }
  const Json* model = oci_json::Find(j, "model");
  if (model == nullptr) return Bad("model", "required field missing");
  if (!model->is_object()) return Bad("model", "not an object");
  RETURN_IF_ERROR(OnlyKnownFields(*model, "model", {"mediaType", "digest", "size"}));
  ASSIGN_OR_RETURN(c.model.media_type,
                   oci_json::GetString(*model, "mediaType", "state config.model", true));
  if (!IsManifestMediaType(c.model.media_type)) {
    return Bad("model.mediaType", absl::StrCat("\"", c.model.media_type.substr(0, 200),
                                               "\" is not a manifest media type"));
  }
  ASSIGN_OR_RETURN(c.model.digest, oci_json::GetDigest(*model, "digest", "state config.model"));
  ASSIGN_OR_RETURN(std::optional<uint64_t> size,
                   oci_json::GetSize(*model, "size", "state config.model", true));
  c.model.size = size.value_or(0);
  return c;
}

std::string SerializeStateConfig(const StateConfig& c) {
  Json j = Json::object();
  j["schemaVersion"] = c.schema_version;
  j["name"] = c.name;
  j["format"] = c.format;
  j["model"] = {
      {"mediaType", c.model.media_type}, {"digest", c.model.digest.str()}, {"size", c.model.size}};
  if (c.tokens) j["tokens"] = *c.tokens;
  if (!c.precision.empty()) j["precision"] = c.precision;
  return oci_json::Dump(j);
}

absl::StatusOr<Manifest> BuildStateManifest(std::string_view config_blob, const Descriptor& model,
                                            const std::vector<StateFile>& files) {
  ASSIGN_OR_RETURN(StateConfig config, ParseStateConfig(config_blob));
  if (config.model.digest != model.digest || config.model.size != model.size ||
      config.model.media_type != model.media_type) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state config names model ", config.model.digest.str(), ", not ", model.digest.str()));
  }
  if (files.empty()) return absl::InvalidArgumentError("a state needs at least one file");
  Manifest m;
  m.schema_version = 2;
  m.media_type = std::string(kOciManifestMediaType);
  m.artifact_type = std::string(kStateArtifactType);
  m.config = DescribeBlob(kStateConfigMediaType, config_blob);
  Descriptor subject;
  subject.media_type = model.media_type;
  subject.digest = model.digest;
  subject.size = model.size;
  subject.artifact_type = model.artifact_type;
  m.subject = subject;
  m.annotations[std::string(kAnnotationStateName)] = config.name;
  m.annotations[std::string(kAnnotationStateFormat)] = config.format;
  std::set<std::string> seen;
  for (const StateFile& f : files) {
    RETURN_IF_ERROR(CheckRelativePath(f.path));
    RETURN_IF_ERROR(CheckNotReservedModelPath(f.path, absl::StrCat("state file ", f.path)));
    if (!seen.insert(f.path).second) {
      return absl::InvalidArgumentError(absl::StrCat("state file '", f.path, "': duplicate path"));
    }
    Descriptor d;
    d.media_type = std::string(kStateLayerMediaType);
    d.digest = f.digest;
    d.size = f.size;
    d.annotations[std::string(kAnnotationFilepath)] = f.path;
    d.annotations[std::string(kAnnotationTitle)] = f.path;
    m.layers.push_back(std::move(d));
  }
  return m;
}

bool IsStateManifest(const Manifest& m) {
  return m.artifact_type == kStateArtifactType || m.config.media_type == kStateConfigMediaType;
}

absl::Status CheckStateMatchesSubject(const Manifest& s, const StateConfig& config) {
  if (!s.subject) {
    return absl::DataLossError(absl::StrCat(
        "state manifest has no subject; its config names model ", config.model.digest.str()));
  }
  if (s.subject->digest != config.model.digest || s.subject->size != config.model.size ||
      s.subject->media_type != config.model.media_type) {
    return absl::DataLossError(absl::StrCat("state manifest's subject ", s.subject->digest.str(),
                                            " is not the model its config names, ",
                                            config.model.digest.str()));
  }
  return absl::OkStatus();
}

}  // namespace modelfs
