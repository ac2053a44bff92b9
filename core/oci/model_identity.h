// The identity record of a model version: what a registry should know about it besides its
// weights (registries-lesson.txt): license, lineage, tokenizer, quantization, training data,
// evaluations, and where it came from.
//
// Where each field lives in a ModelPack artifact (the config's own fields where the spec has
// one, M's manifest annotations otherwise):
//   licenses            config descriptor.licenses (SPDX), and org.opencontainers.image.licenses
//   source_url          config descriptor.sourceURL, and org.opencontainers.image.source
//   revision            config descriptor.revision, and org.opencontainers.image.revision
//   datasets            config descriptor.datasetsURL
//   quantization        config config.quantization
//   base_model          dev.modelfs.base-model            (comma-separated when several)
//   base_model_relation dev.modelfs.base-model-relation   (adapter, merge, quantized, finetune)
//   tokenizer_sha256    dev.modelfs.tokenizer.sha256      ("sha256:<hex>", TokenizerHash)
//   quantization_recipe dev.modelfs.quantization.recipe
//   eval_ids            dev.modelfs.eval-ids              (comma-separated)
//
// How a model card and tokenizer files fill it in is the Hub's part (core/hub/identity.h).
//
// Thread safety: plain values and pure functions.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/oci/modelpack.h"
#include "nlohmann/json.hpp"

namespace modelfs {

inline constexpr std::string_view kAnnotationBaseModel = "dev.modelfs.base-model";
inline constexpr std::string_view kAnnotationBaseModelRelation = "dev.modelfs.base-model-relation";
inline constexpr std::string_view kAnnotationTokenizerSha256 = "dev.modelfs.tokenizer.sha256";
inline constexpr std::string_view kAnnotationQuantizationRecipe = "dev.modelfs.quantization.recipe";
inline constexpr std::string_view kAnnotationEvalIds = "dev.modelfs.eval-ids";
inline constexpr std::string_view kAnnotationOciSource = "org.opencontainers.image.source";
inline constexpr std::string_view kAnnotationOciRevision = "org.opencontainers.image.revision";
inline constexpr std::string_view kAnnotationOciLicenses = "org.opencontainers.image.licenses";

struct ModelIdentity {
  std::vector<std::string> licenses;  // SPDX expressions
  std::string source_url;
  std::string revision;
  std::vector<std::string> base_models;
  std::string base_model_relation;
  std::string tokenizer_sha256;  // "sha256:<hex>"
  std::string quantization;
  std::string quantization_recipe;
  std::vector<std::string> datasets;  // URLs
  std::vector<std::string> eval_ids;
  bool empty() const;
  friend bool operator==(const ModelIdentity&, const ModelIdentity&) = default;
};

// "fine-tune" -> "finetune", "quantization" -> "quantized", ... one of the Hub's four values.
// Errors: kInvalidArgument naming the value and the four.
absl::StatusOr<std::string> NormalizeBaseModelRelation(std::string_view relation);

// Checks an SPDX license expression's characters (ids, "AND", "OR", "WITH", parentheses).
// Errors: kInvalidArgument.
absl::Status CheckSpdxExpression(std::string_view expression);

// "org/data" -> "<endpoint>/datasets/org/data"; a URL stays as it is.
std::string DatasetUrl(std::string_view id, std::string_view endpoint);

// Fields of `over` replace those of `base` where `over` has them.
ModelIdentity MergeIdentity(ModelIdentity base, const ModelIdentity& over);

// Writes the record into a config and M's annotations (see the table above); empty fields
// leave what is there.
void ApplyIdentity(const ModelIdentity& identity, ModelPackConfig& config,
                   std::map<std::string, std::string>& annotations);

// Reads it back from an artifact (config may be null).
ModelIdentity IdentityFromArtifact(const ModelPackConfig* config,
                                   const std::map<std::string, std::string>& annotations);

// {"licenses": [...], "sourceURL", "revision", "baseModels": [...], "baseModelRelation",
//  "tokenizerSha256", "quantization", "quantizationRecipe", "datasets": [...], "evalIds": [...]}
// with null (or []) for what is absent.
nlohmann::json IdentityToJson(const ModelIdentity& identity);

}  // namespace modelfs
