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
#include "core/io/header_cursor.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

using Json = nlohmann::json;

struct DtypeInfo {
  const char* name;
  uint32_t bits;
};

// The reference's Dtype enum, in declaration (alignment) order.
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 8},        {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
    {"I8", 8},          {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},
    {"F8_E5M2FNUZ", 8}, {"I16", 16},    {"U16", 16},    {"F16", 16},    {"BF16", 16},
    {"I32", 32},        {"U32", 32},    {"F32", 32},    {"C64", 64},    {"F64", 64},
    {"I64", 64},        {"U64", 64},
};

int DtypeRank(std::string_view dtype) {
  for (size_t i = 0; i < std::size(kDtypes); ++i) {
    if (dtype == kDtypes[i].name) return static_cast<int>(i);
  }
  return -1;
}

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string ShapeString(const std::vector<uint64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

// Element count and byte size of a shape, as the reference computes them (checked products;
// the bit count must be a whole number of bytes).
struct SizeResult {
  enum Kind { kOk, kOverflow, kPartialByte } kind = kOk;
  uint64_t elements = 0;
  uint64_t bytes = 0;
};

SizeResult ComputeSize(const std::vector<uint64_t>& shape, uint32_t bits) {
  SizeResult r;
  uint64_t elements = 1;
  for (uint64_t d : shape) {
    if (__builtin_mul_overflow(elements, d, &elements)) return {SizeResult::kOverflow};
  }
  uint64_t nbits;
  if (__builtin_mul_overflow(elements, static_cast<uint64_t>(bits), &nbits)) {
    return {SizeResult::kOverflow};
  }
  r.elements = elements;
  if (nbits % 8 != 0) {
    r.kind = SizeResult::kPartialByte;
    return r;
  }
  r.bytes = nbits / 8;
  return r;
}

// Returns the offset of the first byte that is not valid UTF-8, or npos.
size_t FindInvalidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t min;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2, min = 0x80, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, min = 0x800, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, min = 0x10000, cp = c & 0x07;
    } else {
      return i;
    }
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

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

// serde_json's string escaping, so the writer's bytes match the reference serializer's.
void AppendJsonString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xF]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

std::string ErrnoMessage(int err) { return std::strerror(err); }

absl::Status IoError(int err, std::string_view what, const std::string& path) {
  std::string msg = absl::StrCat(AV(what), " ", path, ": ", ErrnoMessage(err));
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  if (err == ENOENT) return absl::NotFoundError(msg);
  return absl::InternalError(msg);
}

absl::Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(errno, "write", path);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

constexpr uint64_t kCallbackPiece = 1 << 20;

}  // namespace

std::optional<uint32_t> SafetensorsDtypeBits(std::string_view dtype) {
  int rank = DtypeRank(dtype);
  if (rank < 0) return std::nullopt;
  return kDtypes[rank].bits;
}

const std::vector<std::string>& SafetensorsDtypes() {
  static const auto* const kAll = [] {
    auto* v = new std::vector<std::string>();
    for (const DtypeInfo& d : kDtypes) v->emplace_back(d.name);
    return v;
  }();
  return *kAll;
}

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

// ---- writer ----

absl::StatusOr<SafetensorsWriter::Entry> SafetensorsWriter::MakeEntry(
    std::string name, std::string dtype, std::vector<uint64_t> shape) const {
  if (name.empty()) return absl::InvalidArgumentError("tensor name is empty");
  if (name == "__metadata__") {
    return absl::InvalidArgumentError("tensor name \"__metadata__\" is reserved");
  }
  if (FindInvalidUtf8(name) != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("tensor name '", name, "' is not UTF-8"));
  }
  if (entries_.count(name)) {
    return absl::AlreadyExistsError(absl::StrCat("tensor '", name, "' was already added"));
  }
  std::optional<uint32_t> bits = SafetensorsDtypeBits(dtype);
  if (!bits) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': unknown dtype \"", dtype, "\""));
  }
  SizeResult size = ComputeSize(shape, *bits);
  if (size.kind == SizeResult::kOverflow) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': shape ", ShapeString(shape), " overflows"));
  }
  if (size.kind == SizeResult::kPartialByte) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", size.elements,
                                                   " elements of ", dtype,
                                                   " are not a whole number of bytes"));
  }
  Entry e;
  e.name = std::move(name);
  e.dtype = std::move(dtype);
  e.shape = std::move(shape);
  e.rank = DtypeRank(e.dtype);
  e.elements = size.elements;
  e.size = size.bytes;
  return e;
}

absl::Status SafetensorsWriter::Insert(Entry entry) {
  std::string key = entry.name;
  entries_.emplace(std::move(key), std::move(entry));
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::AddTensor(std::string name, std::string dtype,
                                          std::vector<uint64_t> shape, std::string bytes) {
  ASSIGN_OR_RETURN(Entry e, MakeEntry(std::move(name), std::move(dtype), std::move(shape)));
  if (bytes.size() != e.size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", e.name, "' (", e.dtype, " ",
                                                   ShapeString(e.shape), ") needs ", e.size,
                                                   " bytes but got ", bytes.size()));
  }
  e.bytes = std::move(bytes);
  return Insert(std::move(e));
}

absl::Status SafetensorsWriter::AddTensorFromCallback(std::string name, std::string dtype,
                                                      std::vector<uint64_t> shape, DataFn data) {
  if (!data) return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': no callback"));
  ASSIGN_OR_RETURN(Entry e, MakeEntry(std::move(name), std::move(dtype), std::move(shape)));
  e.data = std::move(data);
  return Insert(std::move(e));
}

absl::Status SafetensorsWriter::AddSparseTensor(std::string name, std::string dtype,
                                                std::vector<uint64_t> shape) {
  ASSIGN_OR_RETURN(Entry e, MakeEntry(std::move(name), std::move(dtype), std::move(shape)));
  e.sparse = true;
  return Insert(std::move(e));
}

void SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

std::vector<const SafetensorsWriter::Entry*> SafetensorsWriter::Ordered() const {
  std::vector<const Entry*> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(&e);
  // entries_ is already in name order; a stable sort by descending rank keeps it within a rank.
  std::stable_sort(out.begin(), out.end(),
                   [](const Entry* a, const Entry* b) { return a->rank > b->rank; });
  return out;
}

std::vector<SafetensorsTensor> SafetensorsWriter::Layout() const {
  std::vector<SafetensorsTensor> out;
  out.reserve(entries_.size());
  uint64_t offset = 0;
  for (const Entry* e : Ordered()) {
    SafetensorsTensor t;
    t.name = e->name;
    t.dtype = e->dtype;
    t.shape = e->shape;
    t.begin = offset;
    t.end = offset + e->size;
    t.elements = e->elements;
    offset = t.end;
    out.push_back(std::move(t));
  }
  return out;
}

std::string SafetensorsWriter::SerializeHeader() const {
  std::string json = "{";
  bool first = true;
  if (!metadata_.empty()) {
    json += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata_) {
      if (!first) json.push_back(',');
      first = false;
      AppendJsonString(json, k);
      json.push_back(':');
      AppendJsonString(json, v);
    }
    json += "}";
  }
  bool first_tensor = metadata_.empty();
  for (const SafetensorsTensor& t : Layout()) {
    if (!first_tensor) json.push_back(',');
    first_tensor = false;
    AppendJsonString(json, t.name);
    absl::StrAppend(&json, ":{\"dtype\":\"", t.dtype, "\",\"shape\":", ShapeString(t.shape),
                    ",\"data_offsets\":[", t.begin, ",", t.end, "]}");
  }
  json.push_back('}');
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += json;
  return out;
}

std::string SafetensorsWriter::Serialize() const {
  std::string out = SerializeHeader();
  const std::vector<SafetensorsTensor> layout = Layout();
  const std::vector<const Entry*> ordered = Ordered();
  for (size_t i = 0; i < ordered.size(); ++i) {
    const Entry& e = *ordered[i];
    if (e.data) {
      for (uint64_t off = 0; off < e.size; off += kCallbackPiece) {
        const uint64_t len = std::min(kCallbackPiece, e.size - off);
        absl::StatusOr<std::string> piece = e.data(layout[i], off, len);
        if (piece.ok() && piece->size() == len) {
          out += *piece;
        } else {
          out.append(len, '\0');
        }
      }
    } else if (e.sparse) {
      out.append(e.size, '\0');
    } else {
      out += e.bytes;
    }
  }
  return out;
}

absl::Status SafetensorsWriter::WriteFile(const std::string& path) const {
  const std::string header = SerializeHeader();
  if (header.size() - 8 > kSafetensorsMaxHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": safetensors header of ",
                                                   header.size() - 8, " bytes exceeds the limit ",
                                                   kSafetensorsMaxHeaderSize));
  }
  std::string tmp = path + ".tmp-XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) return IoError(errno, "create temporary file for", path);
  auto fail = [&](absl::Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  if (::fchmod(fd, 0644) != 0) return fail(IoError(errno, "chmod", tmp));
  if (absl::Status s = WriteAll(fd, header, tmp); !s.ok()) return fail(s);
  uint64_t total = header.size();
  const std::vector<SafetensorsTensor> layout = Layout();
  const std::vector<const Entry*> ordered = Ordered();
  for (size_t i = 0; i < ordered.size(); ++i) {
    const Entry& e = *ordered[i];
    if (e.data) {
      for (uint64_t off = 0; off < e.size; off += kCallbackPiece) {
        const uint64_t len = std::min(kCallbackPiece, e.size - off);
        absl::StatusOr<std::string> piece = e.data(layout[i], off, len);
        if (!piece.ok()) return fail(piece.status());
        if (piece->size() != len) {
          return fail(absl::InvalidArgumentError(
              absl::StrCat(path, ": tensor '", e.name, "': callback returned ", piece->size(),
                           " bytes at offset ", off, ", wanted ", len)));
        }
        if (absl::Status s = WriteAll(fd, *piece, tmp); !s.ok()) return fail(s);
      }
    } else if (e.sparse) {
      if (::lseek(fd, static_cast<off_t>(e.size), SEEK_CUR) < 0) {
        return fail(IoError(errno, "seek in", tmp));
      }
    } else {
      if (absl::Status s = WriteAll(fd, e.bytes, tmp); !s.ok()) return fail(s);
    }
    total += e.size;
  }
  // A trailing sparse tensor leaves the file short; extend it with a hole.
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0) return fail(IoError(errno, "truncate", tmp));
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return IoError(err, "close", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return IoError(err, "rename into place", path);
  }
  return absl::OkStatus();
}

}  // namespace modelfs
