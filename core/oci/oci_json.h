// Internal to modelfs_oci: checked accessors over nlohmann::json for the OCI/ModelPack parsers,
// and descriptor <-> JSON conversion. Every accessor returns kInvalidArgument naming `where`
// (a JSON path such as "manifest.layers[2].digest") instead of throwing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/oci/descriptor.h"

namespace modelfs::oci_json {

using Json = nlohmann::json;

// Our abseil's string_view is not std::string_view; this bridges the two for StrCat.
inline absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Parses bytes as a JSON object. Errors: kInvalidArgument "<what>: not valid JSON ...".
absl::StatusOr<Json> ParseObject(std::string_view bytes, std::string_view what);

// Compact dump; invalid UTF-8 is replaced rather than thrown.
std::string Dump(const Json& j);

// The member `key` of object `obj`, or nullptr when absent (or null).
const Json* Find(const Json& obj, std::string_view key);

absl::StatusOr<std::string> GetString(const Json& obj, std::string_view key, std::string_view where,
                                      bool required);
absl::StatusOr<std::optional<uint64_t>> GetSize(const Json& obj, std::string_view key,
                                                std::string_view where, bool required);
absl::StatusOr<std::optional<int64_t>> GetInt(const Json& obj, std::string_view key,
                                              std::string_view where, bool required);
absl::StatusOr<std::optional<bool>> GetBool(const Json& obj, std::string_view key,
                                            std::string_view where);
absl::StatusOr<std::vector<std::string>> GetStringArray(const Json& obj, std::string_view key,
                                                        std::string_view where);
absl::StatusOr<std::map<std::string, std::string>> GetStringMap(const Json& obj,
                                                                std::string_view key,
                                                                std::string_view where);
absl::StatusOr<Digest> GetDigest(const Json& obj, std::string_view key, std::string_view where);

absl::StatusOr<Descriptor> DescriptorFromJson(const Json& j, std::string_view where);
Json DescriptorToJson(const Descriptor& d);

std::string Field(std::string_view where, std::string_view key);  // "where.key"

}  // namespace modelfs::oci_json
