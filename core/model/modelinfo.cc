// .modelinfo.json: header inspection through BlobReader and the versioned JSON document.
#include "core/model/modelinfo.h"

#include <algorithm>
#include <exception>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/formats/memory.h"
#include "core/formats/safetensors.h"
#include "core/model/blob_range_reader.h"
#include "core/oci/tensor_index.h"
#include "core/text/base_name.h"

namespace modelfs {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxConfigJsonBytes = 16u << 20;

// KV-cache element types every document reports, in this order.
constexpr const char* kKvTypes[] = {"f16", "fp8", "q8_0"};

// config.json fields that say where a checkpoint came from.
constexpr const char* kConfigProvenanceKeys[] = {"_name_or_path", "architectures", "model_type",
                                                 "torch_dtype", "transformers_version"};

bool IsModelFileName(const std::string& path) {
  std::string base = BaseName(path);
  return absl::EndsWith(base, ".safetensors") || absl::EndsWith(base, ".gguf");
}

json OrNull(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json DtypesJson(const std::map<std::string, DtypeTotals>& by_dtype) {
  json out = json::object();
  for (const auto& [dtype, t] : by_dtype) {
    out[dtype] = {{"tensors", t.tensors}, {"parameters", t.parameters}, {"bytes", t.bytes}};
  }
  return out;
}

json StringMap(const std::map<std::string, std::string>& m) {
  json out = json::object();
  for (const auto& [k, v] : m) out[k] = v;
  return out;
}

absl::StatusOr<json> ReadConfig(BlobReader& reader, const TreeFile& f) {
  if (f.size > kMaxConfigJsonBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path, ": ", f.size, " bytes is larger than the 16 MiB allowed"));
  }
  BlobRangeReader r(&reader, f.layer, f.offset_in_layer, f.size, f.path);
  absl::StatusOr<std::string> bytes = r.ReadAt(0, f.size);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<json> j = ParseStrictJson(*bytes, f.path);
  if (!j.ok()) return j.status();
  if (!j->is_object()) return absl::InvalidArgumentError(f.path + ": not a JSON object");
  return j;
}

json FileJson(const TreeFile& f, const InspectedFile* inspected, const std::string* error,
              const ModelInfoContext& context) {
  json j = {{"path", f.path},
            {"size", f.size},
            {"digest", OrNull(f.digest_of_file)},
            {"layer", f.layer.str()},
            {"layerOffset", f.offset_in_layer}};
  const ModelInfoContext::TensorIndexInfo* index = nullptr;
  if (auto t = context.tensor_indexes.find(f.layer.str()); t != context.tensor_indexes.end()) {
    index = &t->second;
  } else if (auto tt = context.tar_tensor_indexes.find({f.layer.str(), f.offset_in_layer});
             tt != context.tar_tensor_indexes.end()) {
    index = &tt->second;
  }
  if (index != nullptr) {
    j["tensorIndex"] = {{"digest", index->digest},
                        {"tensors", index->tensors},
                        {"mediaType", std::string(kTensorIndexMediaType)}};
  }
  if (inspected != nullptr) {
    j["format"] = inspected->format;
    j["tensors"] = inspected->tensor_count;
    j["parameters"] = inspected->parameters;
    j["headerBytes"] = inspected->header_bytes;
    j["tensorBytes"] = inspected->tensor_bytes;
    j["dtypes"] = DtypesJson(inspected->by_dtype);
    j["precision"] = OrNull(inspected->precision);
    j["quantization"] = OrNull(inspected->quantization);
    if (inspected->format == "gguf") {
      j["ggufVersion"] = inspected->gguf_version;
      j["architecture"] = OrNull(inspected->architecture);
      j["fileType"] = OrNull(inspected->file_type);
    }
    return j;
  }
  if (f.path == "config.json") {
    j["format"] = "config";
  } else if (IsModelFileName(f.path)) {
    j["format"] = absl::EndsWith(f.path, ".gguf") ? "gguf" : "safetensors";
  } else {
    j["format"] = "other";
  }
  if (error != nullptr) j["error"] = *error;
  return j;
}

// general.* scalars of the first GGUF file (name, organization, license, source URLs, ...).
json GgufProvenance(const InspectedModel& model) {
  for (const InspectedFile& f : model.files) {
    if (f.format != "gguf" || !f.metadata.is_object()) continue;
    json out = json::object();
    for (auto it = f.metadata.begin(); it != f.metadata.end(); ++it) {
      if (absl::StartsWith(it.key(), "general.") && it.value().is_primitive()) {
        out[it.key()] = it.value();
      }
    }
    return out;
  }
  return nullptr;
}

}  // namespace

namespace {

// The config.json that describes the weights: the top-level one, else the first one that sits
// beside a weight file (a container image keeps its model under a directory, e.g. /models).
std::string ModelConfigPath(const std::vector<TreeFile>& files) {
  std::set<std::string> weight_dirs;
  bool top = false;
  for (const TreeFile& f : files) {
    if (f.path == "config.json") top = true;
    if (IsModelFileName(f.path)) weight_dirs.insert(f.path.substr(0, f.path.rfind('/') + 1));
  }
  if (top) return "config.json";
  for (const TreeFile& f : files) {
    const size_t slash = f.path.rfind('/');
    if (slash != std::string::npos && f.path.substr(slash + 1) == "config.json" &&
        weight_dirs.count(f.path.substr(0, slash + 1)) != 0) {
      return f.path;
    }
  }
  return "config.json";
}

}  // namespace

TreeInspection InspectTreeFiles(BlobReader& reader, const std::vector<TreeFile>& files) {
  TreeInspection out;
  const std::string config_path = ModelConfigPath(files);
  for (const TreeFile& f : files) {
    if (f.kind != TreeFile::Kind::kFile) continue;
    try {
      if (IsModelFileName(f.path)) {
        BlobRangeReader r(&reader, f.layer, f.offset_in_layer, f.size, f.path);
        absl::StatusOr<InspectedFile> inspected = InspectReader(r);
        if (!inspected.ok()) {
          out.errors[f.path] = std::string(inspected.status().message());
          continue;
        }
        inspected->tensors.clear();
        inspected->tensors.shrink_to_fit();
        out.model.files.push_back(*std::move(inspected));
      } else if (f.path == config_path) {
        absl::StatusOr<json> config = ReadConfig(reader, f);
        if (config.ok()) {
          out.model.config = *std::move(config);
        } else {
          out.errors[f.path] = std::string(config.status().message());
        }
      }
    } catch (const std::exception& e) {
      // The inspectors return Status; this only guards the document against a library throw.
      out.errors[f.path] = absl::StrCat("inspection failed: ", e.what());
    }
  }
  SummarizeModel(out.model);
  return out;
}

json BuildModelInfo(const std::vector<TreeFile>& files, const TreeInspection& inspection,
                    const ModelInfoContext& context) {
  const InspectedModel& model = inspection.model;
  std::map<std::string, const InspectedFile*> by_path;
  for (const InspectedFile& f : model.files) by_path[f.location] = &f;

  std::vector<const TreeFile*> sorted;
  for (const TreeFile& f : files) sorted.push_back(&f);
  std::sort(sorted.begin(), sorted.end(),
            [](const TreeFile* a, const TreeFile* b) { return a->path < b->path; });

  json file_list = json::array();
  uint64_t total_bytes = 0;
  uint64_t tensors = 0;
  for (const TreeFile* f : sorted) {
    auto it = by_path.find(f->path);
    const InspectedFile* inspected = it == by_path.end() ? nullptr : it->second;
    auto err = inspection.errors.find(f->path);
    file_list.push_back(
        FileJson(*f, inspected, err == inspection.errors.end() ? nullptr : &err->second, context));
    total_bytes += f->size;
    if (inspected != nullptr) tensors += inspected->tensor_count;
  }

  json warnings = json::array();
  for (const std::string& w : model.warnings) warnings.push_back(w);
  for (const InspectedFile& f : model.files) {
    for (const std::string& w : f.warnings) warnings.push_back(absl::StrCat(f.location, ": ", w));
  }
  for (const auto& [path, message] : inspection.errors) {
    warnings.push_back(absl::StrCat(path, ": ", message));
  }

  json shape = nullptr;
  json shape_source = nullptr;
  json kv = nullptr;
  if (model.shape) {
    shape = ModelShapeToJson(*model.shape);
    shape_source = model.config && ShapeFromConfigJson(*model.config).ok() ? "config.json" : "gguf";
    kv = json::object();
    for (const char* type : kKvTypes) {
      absl::StatusOr<uint64_t> bytes = KvBytesPerToken(*model.shape, type);
      if (bytes.ok()) {
        kv[type] = *bytes;
      } else {
        kv[type] = nullptr;
        warnings.push_back(absl::StrCat("kv cache ", type, ": ", bytes.status().message()));
      }
    }
  }

  json provenance = {{"annotations", StringMap(context.provenance)}};
  json config_fields = nullptr;
  if (model.config) {
    config_fields = json::object();
    for (const char* key : kConfigProvenanceKeys) {
      if (model.config->contains(key)) config_fields[key] = (*model.config)[key];
    }
  }
  provenance["config"] = config_fields;
  provenance["gguf"] = GgufProvenance(model);

  json totals = {{"files", files.size()},
                 {"modelFiles", model.files.size()},
                 {"bytes", total_bytes},
                 {"tensors", tensors},
                 {"parameters", model.parameters},
                 {"tensorBytes", model.tensor_bytes},
                 {"dtypes", DtypesJson(model.by_dtype)},
                 {"precision", OrNull(model.precision)},
                 {"quantization", OrNull(model.quantization)}};

  json out{{"schemaVersion", kModelInfoSchemaVersion},
           {"generator", "modelfs"},
           {"reference", OrNull(context.reference)},
           {"verification", context.verification},
           {"chunkDigest", context.chunk_digests.empty()
                               ? json(nullptr)
                               : json(absl::StrJoin(context.chunk_digests, ","))},
           {"digests", StringMap(context.digests)},
           {"provenance", std::move(provenance)},
           {"identity", context.identity},
           {"format", OrNull(model.format)},
           {"architecture", OrNull(model.architecture)},
           {"shape", std::move(shape)},
           {"shapeSource", std::move(shape_source)},
           {"kvCacheBytesPerToken", std::move(kv)},
           {"totals", std::move(totals)},
           {"files", std::move(file_list)},
           {"warnings", std::move(warnings)}};
  if (!context.layer_serving.empty()) out["layerServing"] = StringMap(context.layer_serving);
  return out;
}

std::string MakeModelInfoFile(BlobReader& reader, const std::vector<TreeFile>& files,
                              const ModelInfoContext& context) {
  json doc = BuildModelInfo(files, InspectTreeFiles(reader, files), context);
  if (!context.state.is_null()) doc["state"] = context.state;
  // Strings come from files: replace invalid UTF-8 rather than throw.
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace modelfs
