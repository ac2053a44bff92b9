// Duplicate-key and depth checks through nlohmann's parser callback, which sees every key as it
// is read (the DOM it builds keeps only the last value of a duplicate).
#include "core/trust/strict_json.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace modelfs::trust_internal {

std::string S(std::string_view s) { return std::string(s); }

absl::StatusOr<Json> ParseStrictObject(std::string_view bytes, std::string_view what) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::string problem;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) -> bool {
    if (!problem.empty()) return false;
    if (depth > kMaxJsonDepth) {
      problem = absl::StrCat("nested deeper than ", kMaxJsonDepth);
      return false;
    }
    switch (event) {
      case Json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys.empty() && parsed.is_string() &&
            !keys.back().insert(parsed.get<std::string>()).second) {
          problem = absl::StrCat("duplicate key \"", parsed.get<std::string>(), "\"");
          return false;
        }
        break;
      default:
        break;
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(bytes.begin(), bytes.end(), callback, /*allow_exceptions=*/true);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(S(what), ": not valid JSON: ", e.what()));
  }
  if (!problem.empty()) return absl::InvalidArgumentError(absl::StrCat(S(what), ": ", problem));
  if (!j.is_object())
    return absl::InvalidArgumentError(absl::StrCat(S(what), ": not a JSON object"));
  return j;
}

absl::Status ExpectExactKeys(const Json& obj, const std::vector<std::string_view>& keys,
                             std::string_view where) {
  if (!obj.is_object())
    return absl::InvalidArgumentError(absl::StrCat(S(where), ": not an object"));
  for (std::string_view k : keys) {
    if (!obj.contains(std::string(k))) {
      return absl::InvalidArgumentError(absl::StrCat(S(where), ": missing \"", S(k), "\""));
    }
  }
  return ExpectKnownKeys(obj, keys, where);
}

absl::Status ExpectKnownKeys(const Json& obj, const std::vector<std::string_view>& allowed,
                             std::string_view where) {
  if (!obj.is_object())
    return absl::InvalidArgumentError(absl::StrCat(S(where), ": not an object"));
  for (const auto& [k, v] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      return absl::InvalidArgumentError(absl::StrCat(S(where), ": unexpected key \"", k, "\""));
    }
  }
  return absl::OkStatus();
}

}  // namespace modelfs::trust_internal
