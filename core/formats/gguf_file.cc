// Reading a parsed GGUF file (gguf.h): typed access to metadata values, lookups by key and
// tensor name, size totals, and the metadata as JSON (file strings made valid UTF-8, so
// nlohmann::json::dump() never throws on file data).
#include "core/formats/gguf.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/text/utf8.h"

namespace modelfs {
namespace {

// Elements shown of an array too long for MetadataJson to list whole.
constexpr size_t kSummaryHead = 8;

// Replaces bytes that are not well-formed UTF-8 (overlongs, surrogates and > U+10FFFF
// included) with U+FFFD, so nlohmann::json::dump() never throws on file data.
std::string SanitizeUtf8(const std::string& s) {
  auto valid_at = [&](size_t i) -> size_t {  // length of a valid sequence at i, or 0
    if (static_cast<unsigned char>(s[i]) < 0x80) return 1;
    uint32_t cp = 0;
    return DecodeUtf8(s, i, &cp);
  };
  size_t i = 0;
  while (i < s.size()) {
    size_t n = valid_at(i);
    if (n == 0) break;
    i += n;
  }
  if (i == s.size()) return s;
  std::string out = s.substr(0, i);
  while (i < s.size()) {
    size_t n = valid_at(i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

nlohmann::json FloatToJson(double d) {
  if (!std::isfinite(d)) return nullptr;
  return d;
}

}  // namespace

const char* GgufValueTypeName(GgufValueType type) {
  static constexpr const char* kNames[kGgufValueTypeCount] = {
      "UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
      "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
  const auto i = static_cast<uint32_t>(type);
  return i < kGgufValueTypeCount ? kNames[i] : "UNKNOWN";
}

bool GgufValue::is_integer() const {
  switch (type()) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_number() const {
  return is_integer() || type() == GgufValueType::kFloat32 || type() == GgufValueType::kFloat64;
}

std::optional<uint64_t> GgufValue::AsUint() const {
  return std::visit(
      [](const auto& x) -> std::optional<uint64_t> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          return x ? 1 : 0;
        } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
          if (x < 0) return std::nullopt;
          return static_cast<uint64_t>(x);
        } else if constexpr (std::is_integral_v<T>) {
          return static_cast<uint64_t>(x);
        } else {
          return std::nullopt;
        }
      },
      v);
}

std::optional<int64_t> GgufValue::AsInt() const {
  return std::visit(
      [](const auto& x) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          return x ? 1 : 0;
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
          return static_cast<int64_t>(x);
        } else if constexpr (std::is_integral_v<T>) {
          return static_cast<int64_t>(x);
        } else {
          return std::nullopt;
        }
      },
      v);
}

std::optional<double> GgufValue::AsDouble() const {
  return std::visit(
      [](const auto& x) -> std::optional<double> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_arithmetic_v<T>) {
          return static_cast<double>(x);
        } else {
          return std::nullopt;
        }
      },
      v);
}

nlohmann::json GgufValueToJson(const GgufValue& value) {
  return std::visit(
      [](const auto& x) -> nlohmann::json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return SanitizeUtf8(x);
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          nlohmann::json arr = nlohmann::json::array();
          for (const GgufValue& item : x.items) arr.push_back(GgufValueToJson(item));
          return arr;
        } else if constexpr (std::is_floating_point_v<T>) {
          return FloatToJson(static_cast<double>(x));
        } else if constexpr (std::is_same_v<T, bool>) {
          return x;
        } else if constexpr (std::is_signed_v<T>) {
          return static_cast<int64_t>(x);
        } else {
          return static_cast<uint64_t>(x);
        }
      },
      value.v);
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  if (index.size() == metadata.size()) {
    auto it = index.find(key);
    return it == index.end() ? nullptr : &metadata[it->second].second;
  }
  for (const auto& [k, v] : metadata) {
    if (k == key) return &v;
  }
  return nullptr;
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  for (const GgufTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::optional<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return *v->AsString();
}

std::optional<uint64_t> GgufFile::GetUint(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::nullopt;
  return v->AsUint();
}

std::optional<double> GgufFile::GetDouble(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::nullopt;
  return v->AsDouble();
}

std::optional<uint64_t> GgufFile::GetArrayLength(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr || !v->is_array()) return std::nullopt;
  return v->AsArray()->items.size();
}

std::string GgufFile::Architecture() const {
  return GetString("general.architecture").value_or("");
}

uint64_t GgufFile::TotalElements() const {
  uint64_t n = 0;
  for (const GgufTensor& t : tensors) n += t.elements;
  return n;
}

uint64_t GgufFile::TotalTensorBytes() const {
  uint64_t n = 0;
  for (const GgufTensor& t : tensors) n += t.nbytes;
  return n;
}

uint64_t GgufFile::PaddingBytes() const {
  const uint64_t used = data_offset + TotalTensorBytes();
  return file_size > used ? file_size - used : 0;
}

nlohmann::json GgufFile::MetadataJson(size_t max_array) const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : metadata) {
    const GgufArray* arr = value.AsArray();
    const std::string k = SanitizeUtf8(key);
    if (arr == nullptr || arr->items.size() <= max_array) {
      out[k] = GgufValueToJson(value);
      continue;
    }
    nlohmann::json head = nlohmann::json::array();
    for (size_t i = 0; i < std::min(kSummaryHead, arr->items.size()); ++i) {
      head.push_back(GgufValueToJson(arr->items[i]));
    }
    out[k] = {{"type", "ARRAY"},
              {"element_type", GgufValueTypeName(arr->element_type)},
              {"length", arr->items.size()},
              {"head", std::move(head)}};
  }
  // Companion counts go in after every real key, so a real "<key>_count" always wins.
  for (const auto& [key, value] : metadata) {
    const GgufArray* arr = value.AsArray();
    if (arr == nullptr || arr->items.size() <= max_array) continue;
    const std::string count_key = SanitizeUtf8(key) + "_count";
    if (!out.contains(count_key)) out[count_key] = arr->items.size();
  }
  return out;
}

}  // namespace modelfs
