#include "core/formats/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/formats/safetensors_dtypes.h"
#include "core/io/header_cursor.h"
#include "core/status/status_macros.h"
#include "core/text/utf8.h"

namespace modelfs {
namespace {

using Json = nlohmann::json;
using safetensors_internal::ComputeSize;
using safetensors_internal::DtypeRank;
using safetensors_internal::ShapeString;
using safetensors_internal::SizeResult;

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Builds a DOM like nlohmann's own SAX DOM parser, but stops at a duplicate key or at excessive
// nesting instead of silently keeping the last value.
class StrictDomSax {
 public:
  static constexpr size_t kMaxDepth = 128;  // serde_json's recursion limit

  Json root;
  std::string error;

  bool null() { return Put(Json(nullptr)); }
  bool boolean(bool v) { return Put(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return Put(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return Put(Json(v)); }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return Put(Json(v)); }
  bool string(Json::string_t& v) { return Put(Json(std::move(v))); }
  bool binary(Json::binary_t& v) { return Put(Json::binary(std::move(v))); }
  bool start_object(std::size_t) { return Open(Json::value_t::object); }
  bool start_array(std::size_t) { return Open(Json::value_t::array); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(Json::string_t& k) {
    Json& obj = *stack_.back();
    if (obj.contains(k)) {
      error = absl::StrCat("duplicate key \"", k, "\"", Where());
      return false;
    }
    pending_ = &obj[k];
    pending_key_ = k;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    error = absl::StrCat(e.what(), " (byte ", position, " of the JSON)");
    return false;
  }

 private:
  std::string Where() const {
    if (stack_.size() <= 1) return " at the top level";
    return absl::StrCat(" inside \"", parent_keys_.back(), "\"");
  }
  Json* Place(Json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    Json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    *pending_ = std::move(v);
    return pending_;
  }
  bool Put(Json&& v) {
    Place(std::move(v));
    return true;
  }
  bool Open(Json::value_t type) {
    if (stack_.size() >= kMaxDepth) {
      error = absl::StrCat("JSON nested deeper than ", kMaxDepth, " levels");
      return false;
    }
    const bool in_object = !stack_.empty() && stack_.back()->is_object();
    parent_keys_.push_back(in_object ? pending_key_ : std::string());
    stack_.push_back(Place(Json(type)));
    return true;
  }
  bool Close() {
    stack_.pop_back();
    parent_keys_.pop_back();
    return true;
  }

  std::vector<Json*> stack_;
  std::vector<std::string> parent_keys_;
  Json* pending_ = nullptr;
  std::string pending_key_;
};

// Reads an array of unsigned JSON integers (the reference's Vec<usize> / (usize, usize)).
bool ReadU64Array(const Json& v, std::vector<uint64_t>& out) {
  if (!v.is_array()) return false;
  out.clear();
  out.reserve(v.size());
  for (const Json& e : v) {
    if (!e.is_number_unsigned()) {
      // nlohmann stores non-negative literals as unsigned; a negative or fractional number is
      // not a usize.
      return false;
    }
    out.push_back(e.get<uint64_t>());
  }
  return true;
}

absl::Status Invalid(std::string_view name, std::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(AV(name), ": ", AV(msg)));
}

// Reference order: length > 100 MB is "too large" before the header is compared to the file.
absl::Status CheckHeaderLength(uint64_t n, uint64_t file_size, std::string_view name) {
  if (n > kSafetensorsMaxHeaderSize) {
    return Invalid(name, absl::StrCat("safetensors header too large: length field says ", n,
                                      " bytes, the limit is ", kSafetensorsMaxHeaderSize));
  }
  if (8 + n > file_size) {
    return absl::OutOfRangeError(absl::StrCat(AV(name), ": truncated: safetensors header of ", n,
                                              " bytes ends at byte ", 8 + n, " but the file is ",
                                              file_size, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckFileSizeAtLeast8(uint64_t file_size, std::string_view name) {
  if (file_size < 8) {
    return absl::OutOfRangeError(absl::StrCat(AV(name), ": truncated: file is ", file_size,
                                              " bytes, too small for the 8-byte header length"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsTensor> ReadTensorEntry(const std::string& key, const Json& v,
                                                  std::string_view name) {
  auto bad = [&](std::string_view why) {
    return Invalid(name, absl::StrCat("tensor '", key, "': ", AV(why)));
  };
  if (!v.is_object()) return bad("entry is not a JSON object");
  SafetensorsTensor t;
  t.name = key;
  // Unknown fields are ignored, as serde's derive does without deny_unknown_fields.
  auto dtype = v.find("dtype");
  if (dtype == v.end()) return bad("missing field \"dtype\"");
  if (!dtype->is_string()) return bad("\"dtype\" is not a string");
  t.dtype = dtype->get<std::string>();
  if (!SafetensorsDtypeBits(t.dtype)) {
    return bad(absl::StrCat("unknown dtype \"", t.dtype, "\""));
  }
  auto shape = v.find("shape");
  if (shape == v.end()) return bad("missing field \"shape\"");
  if (!ReadU64Array(*shape, t.shape)) {
    return bad("\"shape\" is not an array of non-negative 64-bit integers");
  }
  auto offsets = v.find("data_offsets");
  if (offsets == v.end()) return bad("missing field \"data_offsets\"");
  std::vector<uint64_t> o;
  if (!ReadU64Array(*offsets, o) || o.size() != 2) {
    return bad("\"data_offsets\" is not [begin, end] of non-negative 64-bit integers");
  }
  t.begin = o[0];
  t.end = o[1];
  return t;
}

absl::StatusOr<SafetensorsFile> ParseHeader(std::string_view header, uint64_t file_size,
                                            std::string_view name) {
  SafetensorsFile file;
  file.header_size = header.size();
  file.data_start = 8 + header.size();

  if (size_t bad = FindInvalidUtf8(header); bad != std::string_view::npos) {
    return Invalid(name, absl::StrCat("safetensors header is not valid UTF-8 (byte ", 8 + bad,
                                      " of the file)"));
  }
  // The reference reader accepts JSON whitespace before the '{' (its InvalidHeaderStart check
  // is still disabled), so we do too; anything else must be the object itself.
  size_t first = header.find_first_not_of(" \t\n\r");
  if (first == std::string_view::npos || header[first] != '{') {
    return Invalid(
        name, absl::StrCat("safetensors header must start with '{' (byte ",
                           8 + (first == std::string_view::npos ? 0 : first), " of the file)"));
  }
  auto parsed = ParseStrictJson(header, "safetensors header");
  if (!parsed.ok()) return Invalid(name, std::string(parsed.status().message()));
  const Json& root = *parsed;
  if (!root.is_object()) return Invalid(name, "safetensors header is not a JSON object");

  file.tensors.reserve(root.size());
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (value.is_null()) continue;  // serde reads null as Option::None
      if (!value.is_object()) {
        return Invalid(name, "\"__metadata__\" is not a JSON object of strings");
      }
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          return Invalid(name,
                         absl::StrCat("\"__metadata__\" value for \"", mk, "\" is not a string"));
        }
        file.metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    ASSIGN_OR_RETURN(SafetensorsTensor t, ReadTensorEntry(key, value, name));
    file.tensors.push_back(std::move(t));
  }

  std::sort(file.tensors.begin(), file.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });

  uint64_t expected_begin = 0;
  for (SafetensorsTensor& t : file.tensors) {
    if (t.begin != expected_begin || t.end < t.begin) {
      std::string why;
      if (t.end < t.begin) {
        why = "end before begin";
      } else if (t.begin > expected_begin) {
        why = absl::StrCat("hole: the previous tensor ends at ", expected_begin);
      } else {
        why = absl::StrCat("overlap: the previous tensor ends at ", expected_begin);
      }
      return Invalid(name, absl::StrCat("tensor '", t.name, "' has invalid data_offsets [", t.begin,
                                        ", ", t.end, "] (", why, ")"));
    }
    expected_begin = t.end;
    SizeResult size = ComputeSize(t.shape, *SafetensorsDtypeBits(t.dtype));
    if (size.kind == SizeResult::kOverflow) {
      return Invalid(name, absl::StrCat("tensor '", t.name, "': shape ", ShapeString(t.shape),
                                        " of ", t.dtype, " overflows 64-bit size arithmetic"));
    }
    if (size.kind == SizeResult::kPartialByte) {
      return Invalid(name, absl::StrCat("tensor '", t.name, "': ", size.elements, " elements of ",
                                        t.dtype, " are not a whole number of bytes"));
    }
    if (t.end - t.begin != size.bytes) {
      return Invalid(
          name, absl::StrCat("tensor '", t.name, "' (", t.dtype, " ", ShapeString(t.shape),
                             ") needs ", size.bytes, " bytes but data_offsets [", t.begin, ", ",
                             t.end, "] span ", t.end - t.begin));
    }
    t.elements = size.elements;
  }

  uint64_t expected_size;
  if (__builtin_add_overflow(file.data_start, expected_begin, &expected_size) ||
      expected_size > file_size) {
    return absl::OutOfRangeError(absl::StrCat(
        AV(name), ": truncated: tensors end at data offset ", expected_begin, " (byte ",
        file.data_start, " + ", expected_begin, ") but the file is ", file_size, " bytes"));
  }
  if (expected_size < file_size) {
    return Invalid(name, absl::StrCat(file_size - expected_size,
                                      " trailing bytes after the last tensor (data ends at byte ",
                                      expected_size, ", file is ", file_size, " bytes)"));
  }
  file.file_size = file_size;
  return file;
}

}  // namespace

absl::StatusOr<nlohmann::json> ParseStrictJson(std::string_view text, std::string_view what) {
  if (size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(AV(what), " is not valid UTF-8 (byte ", bad, ")"));
  }
  StrictDomSax sax;
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &sax, Json::input_format_t::json,
                         /*strict=*/true, /*ignore_comments=*/false);
  } catch (const std::exception& e) {
    // sax_parse reports syntax errors through the handler; this only catches the unexpected
    // (allocation failures), which must still not escape as an exception.
    return absl::InvalidArgumentError(absl::StrCat(AV(what), " could not be parsed: ", e.what()));
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        AV(what), " is not valid JSON: ", sax.error.empty() ? "parse failed" : sax.error));
  }
  return std::move(sax.root);
}

absl::StatusOr<SafetensorsFile> ParseSafetensors(RangeReader& reader) {
  const std::string& name = reader.name();
  ASSIGN_OR_RETURN(uint64_t size, reader.Size());
  RETURN_IF_ERROR(CheckFileSizeAtLeast8(size, name));
  HeaderCursor cursor(reader, size);
  ASSIGN_OR_RETURN(uint64_t n, cursor.ReadU64());
  RETURN_IF_ERROR(CheckHeaderLength(n, size, name));
  ASSIGN_OR_RETURN(std::string_view header, cursor.Read(n));
  return ParseHeader(header, size, name);
}

absl::StatusOr<SafetensorsFile> ParseSafetensorsBytes(std::string_view bytes, uint64_t file_size,
                                                      std::string_view name) {
  if (bytes.size() > file_size) {
    return Invalid(name,
                   absl::StrCat("have ", bytes.size(), " bytes but the file size is ", file_size));
  }
  RETURN_IF_ERROR(CheckFileSizeAtLeast8(file_size, name));
  if (bytes.size() < 8) {
    return absl::OutOfRangeError(absl::StrCat(AV(name), ": prefix of ", bytes.size(),
                                              " bytes does not hold the 8-byte header length"));
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
  RETURN_IF_ERROR(CheckHeaderLength(n, file_size, name));
  if (8 + n > bytes.size()) {
    return absl::OutOfRangeError(absl::StrCat(AV(name), ": prefix of ", bytes.size(),
                                              " bytes does not hold the header (needs ", 8 + n,
                                              ")"));
  }
  return ParseHeader(bytes.substr(8, n), file_size, name);
}

uint64_t SafetensorsParameterCount(const SafetensorsFile& file) {
  uint64_t total = 0;
  for (const SafetensorsTensor& t : file.tensors) total += t.elements;
  return total;
}

}  // namespace modelfs
