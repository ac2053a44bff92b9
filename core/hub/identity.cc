#include "core/hub/identity.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/hub/file_selection.h"
#include "core/oci/digest.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

absl::StatusOr<ModelIdentity> IdentityFromCard(const ModelCard& card, std::string_view endpoint) {
  ModelIdentity id;
  if (!card.license.empty())
    id.licenses.push_back(HubLicenseToSpdx(card.license, card.license_name));
  id.base_models = card.base_models;
  if (!card.base_model_relation.empty()) {
    absl::StatusOr<std::string> r = NormalizeBaseModelRelation(card.base_model_relation);
    if (!r.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("README.md front matter: ", r.status().message()));
    }
    id.base_model_relation = *r;
  }
  for (const std::string& d : card.datasets) id.datasets.push_back(DatasetUrl(d, endpoint));
  return id;
}

absl::StatusOr<std::string> TokenizerHash(
    const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<std::pair<std::string, std::string>> tok;
  for (const auto& f : files) {
    if (IsTokenizerFile(f.first)) tok.push_back(f);
  }
  if (tok.empty()) return std::string();
  std::sort(tok.begin(), tok.end());
  std::string lines;
  for (const auto& [rel, path] : tok) {
    ASSIGN_OR_RETURN(Digest d, DigestFile(path));
    absl::StrAppend(&lines, AV(d.hex()), "  ", rel, "\n");
  }
  return Digest::Of(lines).str();
}

}  // namespace modelfs
