// A minimal JSON Schema checker for the schemas in integration/schemas/ (no JSON Schema library
// is packaged for this project). It knows the keywords those schemas use: type, required,
// properties, additionalProperties (bool or schema), patternProperties, items, minItems,
// maxItems, enum, const, minLength, pattern (ECMAScript regex via std::regex), minimum,
// maximum and local $ref ("#/$defs/Name"). Keywords that only annotate ($schema, $id, title,
// description, format, $comment, examples) are ignored; any other keyword is reported as
// unsupported, so a schema can never silently check less than it says.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace modelfs::testing {

// Every violation of `schema` by `doc`, each naming the JSON path ("$.layers[1].digest: ...");
// empty when the document is valid.
std::vector<std::string> CheckJsonSchema(const nlohmann::json& schema, const nlohmann::json& doc);

// Reads and parses a JSON file. Errors: kNotFound, kInvalidArgument (not JSON).
absl::StatusOr<nlohmann::json> LoadJsonFile(const std::string& path);

// integration/schemas in the source tree.
std::string SchemaDir();

}  // namespace modelfs::testing
