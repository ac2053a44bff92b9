#include "core/formats/sharded_index.h"

#include <cmath>
#include <set>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/formats/safetensors.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

using Json = nlohmann::json;

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Reads an optional non-negative integer field; a present but unusable value becomes a warning.
std::optional<uint64_t> ReadCount(const Json& metadata, const char* field, std::string_view name,
                                  std::vector<std::string>& warnings) {
  auto it = metadata.find(field);
  if (it == metadata.end() || it->is_null()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_float()) {
    // Some exporters write 1.6e10; accept an exact, representable integer.
    double d = it->get<double>();
    if (d >= 0 && d < 18446744073709551616.0 && std::floor(d) == d) {
      return static_cast<uint64_t>(d);
    }
  }
  warnings.push_back(absl::StrCat(AV(name), ": metadata.", field,
                                  " is not a non-negative integer (", it->dump(), "); ignored"));
  return std::nullopt;
}

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~' || c == '/';
}

std::string PercentEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (IsUnreserved(c)) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

absl::Status CheckShardName(const std::string& shard) {
  auto refuse = [&](std::string_view why) {
    return absl::PermissionDeniedError(
        absl::StrCat("shard name \"", shard, "\" refused: ", AV(why)));
  };
  if (shard.empty()) return refuse("empty");
  if (shard.front() == '/') return refuse("absolute path");
  if (shard.find('\\') != std::string::npos) return refuse("contains a backslash");
  if (shard.find('\0') != std::string::npos) return refuse("contains a NUL byte");
  if (shard.find("://") != std::string::npos || shard.find(':') == 1) {
    return refuse("absolute URL or drive path");
  }
  for (absl::string_view part : absl::StrSplit(shard, '/')) {
    if (part == "..") return refuse("contains a \"..\" component");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardedIndex> ParseShardedIndex(std::string_view json, std::string_view name) {
  auto parsed = ParseStrictJson(json, "index");
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(AV(name), ": ", parsed.status().message()));
  }
  const Json& root = *parsed;
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(AV(name), ": index is not a JSON object"));
  }
  ShardedIndex index;
  if (auto md = root.find("metadata"); md != root.end() && !md->is_null()) {
    if (!md->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(AV(name), ": \"metadata\" is not a JSON object"));
    }
    index.total_size = ReadCount(*md, "total_size", name, index.warnings);
    index.total_parameters = ReadCount(*md, "total_parameters", name, index.warnings);
  }
  auto wm = root.find("weight_map");
  if (wm == root.end() || !wm->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(AV(name), ": index has no \"weight_map\" object"));
  }
  for (const auto& [tensor, shard] : wm->items()) {
    if (!shard.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(AV(name), ": weight_map entry for tensor '", tensor, "' is not a string"));
    }
    index.weight_map.emplace(tensor, shard.get<std::string>());
  }
  return index;
}

absl::StatusOr<std::string> ResolveShardLocation(const std::string& index_path_or_url,
                                                 const std::string& shard) {
  RETURN_IF_ERROR(CheckShardName(shard));
  if (IsHttpUrl(index_path_or_url)) {
    std::string base = index_path_or_url.substr(0, index_path_or_url.find_first_of("?#"));
    base.resize(base.rfind('/') + 1);  // "http://" guarantees a '/'
    return base + PercentEncode(shard);
  }
  const size_t slash = index_path_or_url.rfind('/');
  if (slash == std::string::npos) return shard;
  return index_path_or_url.substr(0, slash + 1) + shard;
}

absl::StatusOr<ShardedCheckpoint> InspectShardedIndex(const std::string& index_path_or_url,
                                                      const ShardedIndexOptions& options) {
  auto open = [&](const std::string& location) -> absl::StatusOr<std::unique_ptr<RangeReader>> {
    if (options.open) return options.open(location);
    return OpenRangeReader(location, options.http);
  };

  ASSIGN_OR_RETURN(std::unique_ptr<RangeReader> index_reader, open(index_path_or_url));
  ASSIGN_OR_RETURN(uint64_t index_size, index_reader->Size());
  if (index_size > options.max_index_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(index_path_or_url, ": index is ", index_size,
                                                   " bytes, more than the limit of ",
                                                   options.max_index_bytes));
  }
  ASSIGN_OR_RETURN(std::string index_json, index_reader->ReadAt(0, index_size));
  ASSIGN_OR_RETURN(ShardedIndex index, ParseShardedIndex(index_json, index_path_or_url));

  ShardedCheckpoint out;
  out.index_location = index_path_or_url;
  out.declared_total_size = index.total_size;
  out.declared_total_parameters = index.total_parameters;
  out.warnings = std::move(index.warnings);

  std::set<std::string> shard_files;
  for (const auto& [tensor, shard] : index.weight_map) shard_files.insert(shard);

  // tensor -> the shard file that actually holds it.
  std::unordered_map<std::string, const std::string*> found;
  found.reserve(index.weight_map.size());
  for (const std::string& shard : shard_files) {
    ASSIGN_OR_RETURN(std::string location, ResolveShardLocation(index_path_or_url, shard));
    auto reader = open(location);
    if (!reader.ok()) {
      return absl::Status(reader.status().code(),
                          absl::StrCat("shard \"", shard, "\": ", reader.status().message()));
    }
    auto file = ParseSafetensors(**reader);
    if (!file.ok()) {
      return absl::Status(file.status().code(),
                          absl::StrCat("shard \"", shard, "\": ", file.status().message()));
    }
    ShardSummary summary;
    summary.file = shard;
    summary.location = location;
    summary.file_size = file->file_size;
    summary.header_size = file->header_size;
    for (const SafetensorsTensor& t : file->tensors) {
      auto [it, inserted] = found.emplace(t.name, &shard);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name,
                                                       "' appears in two shards: \"", *it->second,
                                                       "\" and \"", shard, "\""));
      }
      auto wm = index.weight_map.find(t.name);
      if (wm == index.weight_map.end()) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' in shard \"", shard,
                                                       "\" is missing from the weight_map of ",
                                                       index_path_or_url));
      }
      if (wm->second != shard) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' is in shard \"",
                                                       shard, "\" but the weight_map names \"",
                                                       wm->second, "\""));
      }
      ++summary.tensors;
      summary.parameters += t.elements;
      summary.tensor_bytes += t.size();
      DtypeTotals& d = out.by_dtype[t.dtype];
      ++d.tensors;
      d.parameters += t.elements;
      d.bytes += t.size();
    }
    out.tensors += summary.tensors;
    out.parameters += summary.parameters;
    out.tensor_bytes += summary.tensor_bytes;
    out.file_bytes += summary.file_size;
    out.shards.push_back(std::move(summary));
  }

  for (const auto& [tensor, shard] : index.weight_map) {
    if (!found.count(tensor)) {
      return absl::InvalidArgumentError(absl::StrCat("weight_map names tensor '", tensor,
                                                     "' in shard \"", shard,
                                                     "\", which does not contain it"));
    }
  }

  if (out.declared_total_size && *out.declared_total_size != out.tensor_bytes) {
    out.warnings.push_back(absl::StrCat("metadata.total_size is ", *out.declared_total_size,
                                        " but the tensors total ", out.tensor_bytes, " bytes"));
  }
  if (out.declared_total_parameters && *out.declared_total_parameters != out.parameters) {
    out.warnings.push_back(absl::StrCat("metadata.total_parameters is ",
                                        *out.declared_total_parameters, " but the tensors hold ",
                                        out.parameters, " parameters"));
  }
  return out;
}

}  // namespace modelfs
