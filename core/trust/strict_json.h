// Internal to modelfs_trust: JSON parsing as containers/image does it for signatures and
// policies ("paranoid"): duplicate keys in an object are an error, not last-one-wins, so two
// parsers can never read different values from the same signed bytes; nesting is bounded.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace modelfs::trust_internal {

using Json = nlohmann::json;

inline constexpr int kMaxJsonDepth = 32;

// Parses `bytes`; the top level must be an object. Errors: kInvalidArgument "<what>: ...".
absl::StatusOr<Json> ParseStrictObject(std::string_view bytes, std::string_view what);

// OK when `obj` (an object) has exactly the keys in `keys`. Errors: kInvalidArgument naming
// `where` and the missing or unexpected key.
absl::Status ExpectExactKeys(const Json& obj, const std::vector<std::string_view>& keys,
                             std::string_view where);

// OK when every key of `obj` is in `allowed`. Errors: kInvalidArgument naming the key.
absl::Status ExpectKnownKeys(const Json& obj, const std::vector<std::string_view>& allowed,
                             std::string_view where);

std::string S(std::string_view s);  // std::string(s): abseil's StrCat takes no std::string_view

}  // namespace modelfs::trust_internal
