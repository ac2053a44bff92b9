// The identity record (core/oci/model_identity.h) as the Hub states it: from a model card's
// front matter, and the hash of a model's tokenizer files.
//
// Thread safety: pure functions (TokenizerHash reads the files it is given).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/hub/model_card.h"
#include "core/oci/model_identity.h"

namespace modelfs {

// The identity a model card states: license (as SPDX), base_model(s), base_model_relation
// (normalized; an unknown one is kInvalidArgument), datasets (as URLs on `endpoint`).
absl::StatusOr<ModelIdentity> IdentityFromCard(const ModelCard& card, std::string_view endpoint);

// SHA-256 over the tokenizer files (IsTokenizerFile), in path order: of the lines
// "<sha256 hex of the file>  <path>\n", which is what `sha256sum` prints for them, so
// `sha256sum $(ls tokenizer files in C order) | sha256sum` reproduces it. `files` are
// (path in the model, file on disk). "" when there is no tokenizer file. Errors: kNotFound /
// kInternal for a file that cannot be read.
absl::StatusOr<std::string> TokenizerHash(
    const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace modelfs
