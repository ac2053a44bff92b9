#include "core/oci/model_identity.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace modelfs {
namespace {

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::vector<std::string> SplitList(const std::string* v) {
  std::vector<std::string> out;
  if (v == nullptr) return out;
  for (absl::string_view p : absl::StrSplit(*v, ',')) {
    p = absl::StripAsciiWhitespace(p);
    if (!p.empty()) out.emplace_back(p);
  }
  return out;
}

const std::string* Find(const std::map<std::string, std::string>& m, std::string_view key) {
  auto it = m.find(std::string(key));
  return it == m.end() ? nullptr : &it->second;
}

nlohmann::json OrNull(const std::string& s) {
  return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
}

}  // namespace

bool ModelIdentity::empty() const { return *this == ModelIdentity{}; }

absl::StatusOr<std::string> NormalizeBaseModelRelation(std::string_view relation) {
  std::string r = absl::AsciiStrToLower(absl::StripAsciiWhitespace(AV(relation)));
  r.erase(std::remove(r.begin(), r.end(), '-'), r.end());
  r.erase(std::remove(r.begin(), r.end(), '_'), r.end());
  if (r == "finetune" || r == "finetuned") return std::string("finetune");
  if (r == "quantized" || r == "quantization" || r == "quantize") return std::string("quantized");
  if (r == "merge" || r == "merged") return std::string("merge");
  if (r == "adapter" || r == "lora") return std::string("adapter");
  return absl::InvalidArgumentError(absl::StrCat("base model relation '", AV(relation),
                                                 "': want finetune, quantized, merge or adapter"));
}

absl::Status CheckSpdxExpression(std::string_view e) {
  if (absl::StripAsciiWhitespace(AV(e)).empty()) {
    return absl::InvalidArgumentError("empty license expression");
  }
  for (char c : e) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '+' &&
        c != '(' && c != ')' && c != ' ' && c != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("license '", AV(e),
                       "' is not an SPDX license expression (e.g. Apache-2.0, MIT, "
                       "LicenseRef-llama3.1)"));
    }
  }
  return absl::OkStatus();
}

std::string DatasetUrl(std::string_view id, std::string_view endpoint) {
  if (id.find("://") != std::string_view::npos) return std::string(id);
  return absl::StrCat(AV(endpoint), "/datasets/", AV(id));
}

ModelIdentity MergeIdentity(ModelIdentity base, const ModelIdentity& over) {
  auto take = [](auto& dst, const auto& src) {
    if (!src.empty()) dst = src;
  };
  take(base.licenses, over.licenses);
  take(base.source_url, over.source_url);
  take(base.revision, over.revision);
  take(base.base_models, over.base_models);
  take(base.base_model_relation, over.base_model_relation);
  take(base.tokenizer_sha256, over.tokenizer_sha256);
  take(base.quantization, over.quantization);
  take(base.quantization_recipe, over.quantization_recipe);
  take(base.datasets, over.datasets);
  take(base.eval_ids, over.eval_ids);
  return base;
}

void ApplyIdentity(const ModelIdentity& id, ModelPackConfig& config,
                   std::map<std::string, std::string>& annotations) {
  ModelDescriptor& d = config.descriptor;
  if (!id.licenses.empty()) {
    d.licenses = id.licenses;
    annotations[std::string(kAnnotationOciLicenses)] = absl::StrJoin(id.licenses, " AND ");
  }
  if (!id.source_url.empty()) {
    d.source_url = id.source_url;
    annotations[std::string(kAnnotationOciSource)] = id.source_url;
  }
  if (!id.revision.empty()) {
    d.revision = id.revision;
    annotations[std::string(kAnnotationOciRevision)] = id.revision;
  }
  if (!id.datasets.empty()) d.datasets_url = id.datasets;
  if (!id.quantization.empty()) config.config.quantization = id.quantization;
  if (!id.base_models.empty()) {
    annotations[std::string(kAnnotationBaseModel)] = absl::StrJoin(id.base_models, ",");
  }
  if (!id.base_model_relation.empty()) {
    annotations[std::string(kAnnotationBaseModelRelation)] = id.base_model_relation;
  }
  if (!id.tokenizer_sha256.empty()) {
    annotations[std::string(kAnnotationTokenizerSha256)] = id.tokenizer_sha256;
  }
  if (!id.quantization_recipe.empty()) {
    annotations[std::string(kAnnotationQuantizationRecipe)] = id.quantization_recipe;
  }
  if (!id.eval_ids.empty()) {
    annotations[std::string(kAnnotationEvalIds)] = absl::StrJoin(id.eval_ids, ",");
  }
}

ModelIdentity IdentityFromArtifact(const ModelPackConfig* config,
                                   const std::map<std::string, std::string>& a) {
  ModelIdentity id;
  if (config != nullptr) {
    id.licenses = config->descriptor.licenses;
    id.source_url = config->descriptor.source_url;
    id.revision = config->descriptor.revision;
    id.datasets = config->descriptor.datasets_url;
    id.quantization = config->config.quantization;
  }
  if (id.licenses.empty()) {
    if (const std::string* l = Find(a, kAnnotationOciLicenses)) id.licenses = {*l};
  }
  if (id.source_url.empty()) {
    if (const std::string* s = Find(a, kAnnotationOciSource)) id.source_url = *s;
  }
  if (id.revision.empty()) {
    if (const std::string* r = Find(a, kAnnotationOciRevision)) id.revision = *r;
  }
  id.base_models = SplitList(Find(a, kAnnotationBaseModel));
  if (const std::string* r = Find(a, kAnnotationBaseModelRelation)) id.base_model_relation = *r;
  if (const std::string* t = Find(a, kAnnotationTokenizerSha256)) id.tokenizer_sha256 = *t;
  if (const std::string* q = Find(a, kAnnotationQuantizationRecipe)) id.quantization_recipe = *q;
  id.eval_ids = SplitList(Find(a, kAnnotationEvalIds));
  return id;
}

nlohmann::json IdentityToJson(const ModelIdentity& id) {
  return {{"licenses", id.licenses},
          {"sourceURL", OrNull(id.source_url)},
          {"revision", OrNull(id.revision)},
          {"baseModels", id.base_models},
          {"baseModelRelation", OrNull(id.base_model_relation)},
          {"tokenizerSha256", OrNull(id.tokenizer_sha256)},
          {"quantization", OrNull(id.quantization)},
          {"quantizationRecipe", OrNull(id.quantization_recipe)},
          {"datasets", id.datasets},
          {"evalIds", id.eval_ids}};
}

}  // namespace modelfs
