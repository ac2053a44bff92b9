// The YAML front matter of a Hugging Face model card (README.md between two "---" lines): the
// few keys the identity record takes from it: license (and license_name for "other"),
// base_model, base_model_relation, datasets.
//
// Only the subset of YAML model cards use at the top level is read: `key: scalar`, quoted or
// plain, `key: [a, b]`, and `key:` followed by `- item` lines. Nested mappings and every other
// key are skipped. A card without front matter is an empty ModelCard, not an error.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace modelfs {

struct ModelCard {
  bool has_front_matter = false;
  std::string license;       // "apache-2.0", "llama3.1", "other", ...
  std::string license_name;  // with license "other"
  std::vector<std::string> base_models;
  std::string base_model_relation;  // "adapter", "merge", "quantized", "finetune"
  std::vector<std::string> datasets;
};

ModelCard ParseModelCard(std::string_view readme);

// An SPDX license expression for a Hub license id: the SPDX id for the ones SPDX has
// ("apache-2.0" -> "Apache-2.0", "gpl-3.0" -> "GPL-3.0-only", "cc-by-nc-4.0" ->
// "CC-BY-NC-4.0"), "LicenseRef-<id>" for the others ("llama3.1" -> "LicenseRef-llama3.1"),
// and "LicenseRef-<license_name>" for "other". "" for an empty id.
std::string HubLicenseToSpdx(std::string_view license, std::string_view license_name = "");

}  // namespace modelfs
