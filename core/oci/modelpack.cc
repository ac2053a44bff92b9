#include "core/oci/modelpack.h"

#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/oci/oci_json.h"
#include "core/oci/path_safety.h"
#include "core/status/status_macros.h"
#include "core/text/base_name.h"

namespace modelfs {

using oci_json::AV;
using oci_json::Json;

namespace {

const Json* ObjectField(const Json& j, std::string_view key) {
  const Json* v = oci_json::Find(j, key);
  return v;
}

absl::Status NotObject(std::string_view where) {
  return absl::InvalidArgumentError(absl::StrCat(AV(where), ": not an object"));
}

absl::StatusOr<ModelCapabilities> ParseCapabilities(const Json& j, std::string_view where) {
  if (!j.is_object()) return NotObject(where);
  ModelCapabilities c;
  ASSIGN_OR_RETURN(c.input_types, oci_json::GetStringArray(j, "inputTypes", where));
  ASSIGN_OR_RETURN(c.output_types, oci_json::GetStringArray(j, "outputTypes", where));
  ASSIGN_OR_RETURN(c.knowledge_cutoff, oci_json::GetString(j, "knowledgeCutoff", where, false));
  ASSIGN_OR_RETURN(c.reasoning, oci_json::GetBool(j, "reasoning", where));
  ASSIGN_OR_RETURN(c.tool_usage, oci_json::GetBool(j, "toolUsage", where));
  ASSIGN_OR_RETURN(c.reward, oci_json::GetBool(j, "reward", where));
  ASSIGN_OR_RETURN(c.languages, oci_json::GetStringArray(j, "languages", where));
  return c;
}

void PutIf(Json& j, const char* key, const std::string& v) {
  if (!v.empty()) j[key] = v;
}
void PutIf(Json& j, const char* key, const std::vector<std::string>& v) {
  if (!v.empty()) j[key] = v;
}
void PutIf(Json& j, const char* key, const std::optional<bool>& v) {
  if (v.has_value()) j[key] = *v;
}

bool EndsWithAny(std::string_view s, std::initializer_list<std::string_view> suffixes) {
  for (std::string_view x : suffixes) {
    if (s.size() >= x.size() && s.substr(s.size() - x.size()) == x) return true;
  }
  return false;
}
bool StartsWithAny(std::string_view s, std::initializer_list<std::string_view> prefixes) {
  for (std::string_view x : prefixes) {
    if (s.substr(0, x.size()) == x) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<ModelPackConfig> ParseModelPackConfig(std::string_view bytes) {
  constexpr std::string_view kWhere = "config";
  ASSIGN_OR_RETURN(Json j, oci_json::ParseObject(bytes, "model config"));
  ModelPackConfig c;
  if (const Json* d = ObjectField(j, "descriptor")) {
    const std::string w = "config.descriptor";
    if (!d->is_object()) return NotObject(w);
    ModelDescriptor& md = c.descriptor;
    if (oci_json::Find(*d, "createdAt") != nullptr) {
      ASSIGN_OR_RETURN(md.created_at, oci_json::GetString(*d, "createdAt", w, true));
    }
    ASSIGN_OR_RETURN(md.authors, oci_json::GetStringArray(*d, "authors", w));
    ASSIGN_OR_RETURN(md.family, oci_json::GetString(*d, "family", w, false));
    ASSIGN_OR_RETURN(md.name, oci_json::GetString(*d, "name", w, false));
    ASSIGN_OR_RETURN(md.doc_url, oci_json::GetString(*d, "docURL", w, false));
    ASSIGN_OR_RETURN(md.source_url, oci_json::GetString(*d, "sourceURL", w, false));
    ASSIGN_OR_RETURN(md.datasets_url, oci_json::GetStringArray(*d, "datasetsURL", w));
    ASSIGN_OR_RETURN(md.version, oci_json::GetString(*d, "version", w, false));
    ASSIGN_OR_RETURN(md.revision, oci_json::GetString(*d, "revision", w, false));
    ASSIGN_OR_RETURN(md.vendor, oci_json::GetString(*d, "vendor", w, false));
    ASSIGN_OR_RETURN(md.licenses, oci_json::GetStringArray(*d, "licenses", w));
    ASSIGN_OR_RETURN(md.title, oci_json::GetString(*d, "title", w, false));
    ASSIGN_OR_RETURN(md.description, oci_json::GetString(*d, "description", w, false));
  }
  if (const Json* m = ObjectField(j, "config")) {
    const std::string w = "config.config";
    if (!m->is_object()) return NotObject(w);
    ModelConfig& mc = c.config;
    ASSIGN_OR_RETURN(mc.architecture, oci_json::GetString(*m, "architecture", w, false));
    ASSIGN_OR_RETURN(mc.format, oci_json::GetString(*m, "format", w, false));
    ASSIGN_OR_RETURN(mc.param_size, oci_json::GetString(*m, "paramSize", w, false));
    ASSIGN_OR_RETURN(mc.precision, oci_json::GetString(*m, "precision", w, false));
    ASSIGN_OR_RETURN(mc.quantization, oci_json::GetString(*m, "quantization", w, false));
    if (const Json* cap = oci_json::Find(*m, "capabilities")) {
      ASSIGN_OR_RETURN(mc.capabilities, ParseCapabilities(*cap, "config.config.capabilities"));
    }
  }
  const Json* fs = ObjectField(j, "modelfs");
  if (fs == nullptr) return absl::InvalidArgumentError("config.modelfs: required field missing");
  if (!fs->is_object()) return NotObject("config.modelfs");
  ASSIGN_OR_RETURN(c.modelfs.type, oci_json::GetString(*fs, "type", "config.modelfs", true));
  if (c.modelfs.type != "layers") {
    return absl::InvalidArgumentError(
        absl::StrCat("config.modelfs.type: is '", c.modelfs.type, "', want 'layers'"));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> ids,
                   oci_json::GetStringArray(*fs, "diffIds", "config.modelfs"));
  for (size_t i = 0; i < ids.size(); ++i) {
    absl::StatusOr<Digest> d = Digest::Parse(ids[i]);
    if (!d.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.modelfs.diffIds[", i, "]: ", d.status().message()));
    }
    c.modelfs.diff_ids.push_back(*d);
  }
  (void)kWhere;
  return c;
}

std::string SerializeModelPackConfig(const ModelPackConfig& c) {
  Json d = Json::object();
  const ModelDescriptor& md = c.descriptor;
  if (md.created_at.has_value()) d["createdAt"] = *md.created_at;
  PutIf(d, "authors", md.authors);
  PutIf(d, "family", md.family);
  PutIf(d, "name", md.name);
  PutIf(d, "docURL", md.doc_url);
  PutIf(d, "sourceURL", md.source_url);
  PutIf(d, "datasetsURL", md.datasets_url);
  PutIf(d, "version", md.version);
  PutIf(d, "revision", md.revision);
  PutIf(d, "vendor", md.vendor);
  PutIf(d, "licenses", md.licenses);
  PutIf(d, "title", md.title);
  PutIf(d, "description", md.description);

  Json m = Json::object();
  const ModelConfig& mc = c.config;
  PutIf(m, "architecture", mc.architecture);
  PutIf(m, "format", mc.format);
  PutIf(m, "paramSize", mc.param_size);
  PutIf(m, "precision", mc.precision);
  PutIf(m, "quantization", mc.quantization);
  if (mc.capabilities.has_value()) {
    const ModelCapabilities& cap = *mc.capabilities;
    Json cj = Json::object();
    PutIf(cj, "inputTypes", cap.input_types);
    PutIf(cj, "outputTypes", cap.output_types);
    PutIf(cj, "knowledgeCutoff", cap.knowledge_cutoff);
    PutIf(cj, "reasoning", cap.reasoning);
    PutIf(cj, "toolUsage", cap.tool_usage);
    PutIf(cj, "reward", cap.reward);
    PutIf(cj, "languages", cap.languages);
    m["capabilities"] = std::move(cj);
  }

  Json fs = Json::object();
  fs["type"] = c.modelfs.type;
  Json ids = Json::array();
  for (const Digest& id : c.modelfs.diff_ids) ids.push_back(id.str());
  fs["diffIds"] = std::move(ids);

  Json j = Json::object();
  j["descriptor"] = std::move(d);
  j["config"] = std::move(m);
  j["modelfs"] = std::move(fs);
  return oci_json::Dump(j);
}

std::string SerializeFileMetadata(const FileMetadata& m) {
  Json j = Json::object();
  j["name"] = m.name;
  j["mode"] = m.mode;
  j["uid"] = m.uid;
  j["gid"] = m.gid;
  j["size"] = m.size;
  j["mtime"] = m.mtime;
  j["typeflag"] = m.typeflag;
  return oci_json::Dump(j);
}

absl::StatusOr<FileMetadata> ParseFileMetadata(std::string_view json) {
  constexpr std::string_view w = "file metadata";
  ASSIGN_OR_RETURN(Json j, oci_json::ParseObject(json, w));
  FileMetadata m;
  ASSIGN_OR_RETURN(m.name, oci_json::GetString(j, "name", w, false));
  auto u32 = [&](std::string_view key, uint32_t* out) -> absl::Status {
    ASSIGN_OR_RETURN(std::optional<int64_t> v, oci_json::GetInt(j, key, w, false));
    if (v.has_value()) {
      if (*v < 0 || *v > 0xffffffffll) {
        return absl::InvalidArgumentError(
            absl::StrCat("file metadata.", AV(key), ": ", *v, " is out of range"));
      }
      *out = static_cast<uint32_t>(*v);
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(u32("mode", &m.mode));
  RETURN_IF_ERROR(u32("uid", &m.uid));
  RETURN_IF_ERROR(u32("gid", &m.gid));
  ASSIGN_OR_RETURN(std::optional<int64_t> size, oci_json::GetInt(j, "size", w, false));
  m.size = size.value_or(0);
  ASSIGN_OR_RETURN(m.mtime, oci_json::GetString(j, "mtime", w, false));
  uint32_t typeflag = '0';
  RETURN_IF_ERROR(u32("typeflag", &typeflag));
  if (typeflag > 0xff) return absl::InvalidArgumentError("file metadata.typeflag: out of range");
  m.typeflag = static_cast<uint8_t>(typeflag);
  return m;
}

LayerKind ClassifyFile(std::string_view path) {
  const std::string base = absl::AsciiStrToLower(BaseName(path));
  if (base == "dockerfile" || EndsWithAny(base, {".py", ".sh", ".ipynb", ".js", ".ts", ".c", ".cc",
                                                 ".cpp", ".h", ".cu", ".go", ".rs"})) {
    return LayerKind::kCode;
  }
  if (EndsWithAny(base, {".parquet", ".arrow", ".csv", ".jsonl"})) return LayerKind::kDataset;
  // Tokenizer names before extensions: merges.txt and vocab.txt are not docs.
  if (base == "merges.txt" || StartsWithAny(base, {"vocab.", "tokenizer"}) ||
      EndsWithAny(base, {".json", ".model", ".tiktoken", ".jinja", ".yaml", ".yml"})) {
    return LayerKind::kWeightConfig;
  }
  if (EndsWithAny(base, {".safetensors", ".gguf", ".bin", ".pt", ".pth", ".ckpt", ".onnx", ".h5",
                         ".msgpack", ".npz", ".tflite", ".mlmodel", ".nemo", ".ot"})) {
    return LayerKind::kWeight;
  }
  return LayerKind::kDoc;
}

absl::StatusOr<Manifest> BuildModelManifest(std::string_view config_blob,
                                            const std::vector<ModelLayerInput>& layers,
                                            const std::map<std::string, std::string>& annotations) {
  Manifest m;
  m.schema_version = 2;
  m.media_type = std::string(kOciManifestMediaType);
  m.artifact_type = std::string(kModelArtifactType);
  m.config = DescribeBlob(kModelConfigMediaType, config_blob);
  m.annotations = annotations;
  std::set<std::string> seen;
  for (const ModelLayerInput& in : layers) {
    RETURN_IF_ERROR(CheckRelativePath(in.path));
    if (in.kind == LayerKind::kImage) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer '", in.path, "': an image layer cannot be part of a model"));
    }
    if (!seen.insert(in.path).second) {
      return absl::InvalidArgumentError(absl::StrCat("layer '", in.path, "': duplicate path"));
    }
    Descriptor d;
    d.media_type = ModelLayerMediaType(in.kind, in.encoding);
    d.digest = in.digest;
    d.size = in.size;
    d.annotations[std::string(kAnnotationFilepath)] = in.path;
    d.annotations[std::string(kAnnotationTitle)] = in.path;
    if (!in.file_metadata_json.empty()) {
      d.annotations[std::string(kAnnotationFileMetadata)] = in.file_metadata_json;
    } else if (in.encoding == LayerEncoding::kRaw) {
      FileMetadata fm;
      fm.name = BaseName(in.path);
      fm.size = static_cast<int64_t>(in.size);
      d.annotations[std::string(kAnnotationFileMetadata)] = SerializeFileMetadata(fm);
    }
    m.layers.push_back(std::move(d));
  }
  return m;
}

bool IsModelManifest(const Manifest& m) {
  return IsModelArtifactType(m.artifact_type) || IsModelConfigMediaType(m.config.media_type) ||
         IsDockerModelConfigMediaType(m.config.media_type);
}

std::vector<std::string> DockerLayerPaths(const Manifest& m) {
  std::vector<std::string> out(m.layers.size());
  if (!IsDockerModelConfigMediaType(m.config.media_type)) return out;
  // docker/model-runner's bundle layout: one weight file is model.<ext>, shards are
  // model-00001-of-0000N.<ext> in layer order; the projector is model.mmproj and the chat
  // template template.jinja. Licenses are not part of that layout; they become LICENSE
  // (LICENSE-2, ... when there are several). A layer with a path annotation keeps its path.
  struct Family {
    std::vector<std::string_view> media_types;
    const char* stem;
    const char* ext;
  };
  const Family families[] = {
      {{kDockerGgufMediaType}, "model", ".gguf"},
      {{kDockerSafetensorsMediaType}, "model", ".safetensors"},
      {{kDockerDdufMediaType}, "model", ".dduf"},
      {{kDockerGgufLoraMediaType}, "adapter", ".gguf"},
      {{kDockerMmprojMediaType, kDockerGgufMmprojMediaType}, "model", ".mmproj"},
      {{kDockerChatTemplateMediaType}, "template", ".jinja"},
  };
  auto annotated = [](const Descriptor& d) {
    return d.Annotation(kAnnotationFilepath) != nullptr ||
           d.Annotation(kLegacyAnnotationFilepath) != nullptr ||
           d.Annotation(kAnnotationTitle) != nullptr;
  };
  for (const Family& f : families) {
    std::vector<size_t> members;
    for (size_t i = 0; i < m.layers.size(); ++i) {
      for (std::string_view mt : f.media_types) {
        if (m.layers[i].media_type == mt && !annotated(m.layers[i])) members.push_back(i);
      }
    }
    for (size_t n = 0; n < members.size(); ++n) {
      out[members[n]] = members.size() == 1 ? absl::StrCat(f.stem, f.ext)
                                            : absl::StrFormat("%s-%05d-of-%05d%s", f.stem, n + 1,
                                                              members.size(), f.ext);
    }
  }
  int licenses = 0;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    if (m.layers[i].media_type == kDockerLicenseMediaType && !annotated(m.layers[i])) {
      out[i] = ++licenses == 1 ? "LICENSE" : absl::StrCat("LICENSE-", licenses);
    }
  }
  return out;
}

absl::Status CheckNotReservedModelPath(std::string_view path, std::string_view where) {
  if (path == kReservedModelInfoPath ||
      (path.size() > kReservedModelInfoPath.size() &&
       path.substr(0, kReservedModelInfoPath.size()) == kReservedModelInfoPath &&
       path[kReservedModelInfoPath.size()] == '/')) {
    return absl::InvalidArgumentError(
        absl::StrCat(AV(where), ": path '", AV(path), "' is reserved: modelfs serves its own ",
                     AV(kReservedModelInfoPath), " at the root of a mounted model"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ModelLayer>> ResolveModelLayers(const Manifest& m) {
  std::vector<ModelLayer> out;
  std::set<std::string> raw_paths;
  const std::vector<std::string> docker_paths = DockerLayerPaths(m);
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const Descriptor& d = m.layers[i];
    const std::string where = absl::StrCat("manifest.layers[", i, "] (", d.digest.str(), ")");
    const std::string* path = d.Annotation(kAnnotationFilepath);
    if (path == nullptr) path = d.Annotation(kLegacyAnnotationFilepath);
    if (path == nullptr) path = d.Annotation(kAnnotationTitle);
    if (path == nullptr && !docker_paths[i].empty()) path = &docker_paths[i];
    ModelLayer layer;
    layer.descriptor = d;
    std::optional<LayerMediaTypeInfo> info = ClassifyLayerMediaType(d.media_type);
    if (info.has_value()) {
      layer.kind = info->kind;
      layer.encoding = info->encoding;
    } else if (path != nullptr) {
      layer.kind = LayerKind::kDoc;
      layer.encoding = LayerEncoding::kRaw;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown media type '", d.media_type, "' and no path annotation"));
    }
    if (path != nullptr) {
      absl::StatusOr<std::string> norm = NormalizeRelativePath(*path);
      if (!norm.ok()) {
        return absl::PermissionDeniedError(absl::StrCat(where, ": ", norm.status().message()));
      }
      layer.path = *std::move(norm);
    }
    if (d.size > kMaxModelLayerBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, layer.path.empty() ? "" : absl::StrCat(" '", layer.path, "'"), ": declared size ",
          d.size, " bytes is over the limit of ", kMaxModelLayerBytes, " bytes (4 TiB) per layer"));
    }
    if (layer.encoding == LayerEncoding::kRaw) {
      RETURN_IF_ERROR(CheckNotReservedModelPath(layer.path, where));
      if (layer.path.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": raw layer has no org.cncf.model.filepath or title annotation"));
      }
      if (!raw_paths.insert(layer.path).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": path '", layer.path, "' is used by an earlier layer"));
      }
    }
    out.push_back(std::move(layer));
  }
  return out;
}

}  // namespace modelfs
