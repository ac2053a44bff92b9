// GGUF parser. Layout (all little-endian):
//   "GGUF" u32 version u64 tensor_count u64 kv_count
//   kv_count x (string key, u32 value_type, value)      string = u64 length + bytes
//   tensor_count x (string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset)
//   padding to general.alignment, then the data section (offsets are relative to it).
// v2 and v3 share this layout (v1 used u32 counts and lengths; v3 allows big-endian files,
// which we detect and refuse).
#include "core/formats/gguf.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/io/header_cursor.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxReserve = 1 << 16;  // elements reserved up front from a declared count

// Smallest encoding of one element of each type: what an array count is checked against
// before anything is reserved.
uint64_t MinEncodedSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
    case GgufValueType::kString:  // u64 length
      return 8;
    case GgufValueType::kArray:  // u32 type + u64 count
      return 12;
  }
  return 1;
}

// Re-labels an error from the cursor with what was being read, keeping its code.
absl::Status Annotate(const absl::Status& s, std::string_view what) {
  if (s.ok()) return s;
  return absl::Status(
      s.code(), absl::StrCat(s.message(), " (", absl::string_view(what.data(), what.size()), ")"));
}

std::string Quote(std::string_view s) {
  // Names come from the file: keep messages one line and bounded.
  std::string out = "'";
  size_t n = 0;
  for (char c : s) {
    if (++n > 200) {
      out += "...";
      break;
    }
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += absl::StrCat("\\x", absl::Hex(u, absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

class Parser {
 public:
  Parser(RangeReader& reader, uint64_t size, const GgufParseLimits& limits)
      : reader_(reader), cur_(reader, size), limits_(limits) {}

  absl::StatusOr<GgufFile> Parse();

 private:
  std::string Name() const { return reader_.name(); }
  absl::Status Invalid(std::string_view msg) const {
    return absl::InvalidArgumentError(
        absl::StrCat(Name(), ": ", absl::string_view(msg.data(), msg.size())));
  }

  absl::StatusOr<std::string> ReadString(std::string_view what);
  absl::StatusOr<GgufValue> ReadValue(GgufValueType type, uint32_t depth, const std::string& key,
                                      uint64_t value_pos);

  RangeReader& reader_;
  HeaderCursor cur_;
  GgufParseLimits limits_;
  uint64_t array_elements_ = 0;
};

absl::StatusOr<std::string> Parser::ReadString(std::string_view what) {
  const uint64_t pos = cur_.position();
  auto len = cur_.ReadU64();
  if (!len.ok()) return Annotate(len.status(), what);
  auto bytes = cur_.Read(*len);
  if (!bytes.ok()) {
    return Annotate(bytes.status(), absl::StrCat(absl::string_view(what.data(), what.size()),
                                                 ": string of ", *len, " bytes at byte ", pos));
  }
  return std::string(*bytes);
}

absl::StatusOr<GgufValue> Parser::ReadValue(GgufValueType type, uint32_t depth,
                                            const std::string& key, uint64_t value_pos) {
  auto ctx = [&] { return absl::StrCat("metadata key ", Quote(key), " at byte ", value_pos); };
  auto wrap = [&](const absl::Status& s) { return Annotate(s, ctx()); };
#define MODELFS_GGUF_READ(var, expr) \
  auto var = (expr);                 \
  if (!var.ok()) return wrap(var.status())

  switch (type) {
    case GgufValueType::kUint8: {
      MODELFS_GGUF_READ(x, cur_.ReadU8());
      return GgufValue(*x);
    }
    case GgufValueType::kInt8: {
      MODELFS_GGUF_READ(x, cur_.ReadU8());
      return GgufValue(static_cast<int8_t>(*x));
    }
    case GgufValueType::kUint16: {
      MODELFS_GGUF_READ(x, cur_.ReadU16());
      return GgufValue(*x);
    }
    case GgufValueType::kInt16: {
      MODELFS_GGUF_READ(x, cur_.ReadU16());
      return GgufValue(static_cast<int16_t>(*x));
    }
    case GgufValueType::kUint32: {
      MODELFS_GGUF_READ(x, cur_.ReadU32());
      return GgufValue(*x);
    }
    case GgufValueType::kInt32: {
      MODELFS_GGUF_READ(x, cur_.ReadU32());
      return GgufValue(static_cast<int32_t>(*x));
    }
    case GgufValueType::kFloat32: {
      MODELFS_GGUF_READ(x, cur_.ReadU32());
      return GgufValue(std::bit_cast<float>(*x));
    }
    case GgufValueType::kBool: {
      // llama.cpp reads a bool as one byte and does not police it; neither do we.
      MODELFS_GGUF_READ(x, cur_.ReadU8());
      return GgufValue(*x != 0);
    }
    case GgufValueType::kString: {
      ASSIGN_OR_RETURN(std::string s, ReadString(ctx()));  // already names the key
      return GgufValue(std::move(s));
    }
    case GgufValueType::kUint64: {
      MODELFS_GGUF_READ(x, cur_.ReadU64());
      return GgufValue(*x);
    }
    case GgufValueType::kInt64: {
      MODELFS_GGUF_READ(x, cur_.ReadU64());
      return GgufValue(static_cast<int64_t>(*x));
    }
    case GgufValueType::kFloat64: {
      MODELFS_GGUF_READ(x, cur_.ReadU64());
      return GgufValue(std::bit_cast<double>(*x));
    }
    case GgufValueType::kArray: {
      const uint64_t array_pos = cur_.position();
      MODELFS_GGUF_READ(raw_type, cur_.ReadU32());
      if (*raw_type >= kGgufValueTypeCount) {
        return Invalid(absl::StrCat(ctx(), ": array at byte ", array_pos,
                                    " has unknown element type ", *raw_type));
      }
      const auto elem_type = static_cast<GgufValueType>(*raw_type);
      MODELFS_GGUF_READ(count, cur_.ReadU64());
      const uint64_t min_size = MinEncodedSize(elem_type);
      if (*count > cur_.remaining() / min_size) {
        return absl::OutOfRangeError(absl::StrCat(
            Name(), ": truncated or corrupt: ", ctx(), ": array of ", *count, " ",
            GgufValueTypeName(elem_type), " elements at byte ", array_pos, " needs at least ",
            absl::StrCat(*count > std::numeric_limits<uint64_t>::max() / min_size
                             ? std::string("more than 2^64")
                             : absl::StrCat(*count * min_size)),
            " bytes but only ", cur_.remaining(), " remain"));
      }
      if (*count > limits_.max_array_elements - array_elements_) {
        return Invalid(absl::StrCat(ctx(), ": array of ", *count,
                                    " elements takes the header past the limit of ",
                                    limits_.max_array_elements, " array elements"));
      }
      array_elements_ += *count;
      if (elem_type == GgufValueType::kArray && depth + 1 >= limits_.max_nesting) {
        return Invalid(absl::StrCat(ctx(), ": arrays nested more than ", limits_.max_nesting,
                                    " deep at byte ", array_pos));
      }
      GgufArray array;
      array.element_type = elem_type;
      // Grow past this as elements actually arrive: the count is only bounded, not trusted.
      array.items.reserve(std::min<uint64_t>(*count, kMaxReserve));
      for (uint64_t i = 0; i < *count; ++i) {
        const uint64_t item_pos = cur_.position();
        ASSIGN_OR_RETURN(GgufValue item, ReadValue(elem_type, depth + 1, key, item_pos));
        array.items.push_back(std::move(item));
      }
      return GgufValue(std::move(array));
    }
  }
#undef MODELFS_GGUF_READ
  return Invalid(absl::StrCat(ctx(), ": unknown value type ", static_cast<uint32_t>(type)));
}

absl::StatusOr<GgufFile> Parser::Parse() {
  GgufFile file;
  file.file_size = cur_.size();

  auto magic = cur_.Read(4);
  if (!magic.ok() || *magic != "GGUF") {
    return Invalid("not a GGUF file: the first four bytes are not 'GGUF'");
  }
  ASSIGN_OR_RETURN(uint32_t version, cur_.ReadU32());
  if (version == 1) {
    return Invalid(
        "GGUF v1 is not supported (only v2 and v3); convert the file with a current "
        "llama.cpp");
  }
  if (version != 2 && version != 3) {
    // A big-endian v2/v3 file stores the version byte-swapped.
    if (version == 0x02000000u || version == 0x03000000u) {
      return Invalid(
          absl::StrCat("big-endian GGUF (version ", version >> 24, ") is not supported"));
    }
    return Invalid(absl::StrCat("unsupported GGUF version ", version, " (only v2 and v3)"));
  }
  file.version = version;
  ASSIGN_OR_RETURN(uint64_t tensor_count, cur_.ReadU64());
  ASSIGN_OR_RETURN(uint64_t kv_count, cur_.ReadU64());

  // Smallest encodings: a kv is a key length, a type and a 1-byte value; a tensor info is a
  // name length, n_dims, type and offset. Counts that cannot fit are corrupt.
  constexpr uint64_t kMinKv = 8 + 4 + 1;
  constexpr uint64_t kMinTensor = 8 + 4 + 4 + 8;
  const uint64_t remaining = cur_.remaining();
  if (kv_count > remaining / kMinKv || tensor_count > remaining / kMinTensor ||
      kv_count * kMinKv + tensor_count * kMinTensor > remaining) {
    return absl::OutOfRangeError(absl::StrCat(
        Name(), ": truncated or corrupt: header declares ", kv_count, " metadata keys and ",
        tensor_count, " tensors, which cannot fit in the ", remaining, " bytes after byte 24"));
  }

  if (kv_count > limits_.max_metadata_keys || tensor_count > limits_.max_tensors) {
    return Invalid(absl::StrCat("header declares ", kv_count, " metadata keys and ", tensor_count,
                                " tensors; the limits are ", limits_.max_metadata_keys, " and ",
                                limits_.max_tensors));
  }
  file.metadata.reserve(std::min<uint64_t>(kv_count, kMaxReserve));
  for (uint64_t i = 0; i < kv_count; ++i) {
    const uint64_t kv_pos = cur_.position();
    ASSIGN_OR_RETURN(std::string key,
                     ReadString(absl::StrCat("metadata key ", i, " at byte ", kv_pos)));
    if (file.index.count(key) != 0) {
      return Invalid(absl::StrCat("duplicate metadata key ", Quote(key), " at byte ", kv_pos));
    }
    const uint64_t type_pos = cur_.position();
    auto raw_type = cur_.ReadU32();
    if (!raw_type.ok()) {
      return Annotate(raw_type.status(), absl::StrCat("metadata key ", Quote(key)));
    }
    if (*raw_type >= kGgufValueTypeCount) {
      return Invalid(absl::StrCat("metadata key ", Quote(key), " at byte ", type_pos,
                                  " has unknown value type ", *raw_type));
    }
    ASSIGN_OR_RETURN(GgufValue value,
                     ReadValue(static_cast<GgufValueType>(*raw_type), 0, key, cur_.position()));
    file.index.emplace(key, file.metadata.size());
    file.metadata.emplace_back(std::move(key), std::move(value));
  }

  file.alignment = kDefaultAlignment;
  if (const GgufValue* a = file.Find("general.alignment")) {
    const uint32_t* v = std::get_if<uint32_t>(&a->v);
    if (v == nullptr) {
      return Invalid(absl::StrCat("general.alignment must be a UINT32, got ", a->type_name()));
    }
    if (*v == 0 || (*v & (*v - 1)) != 0) {
      return Invalid(absl::StrCat("general.alignment must be a power of two, got ", *v));
    }
    file.alignment = *v;
  }

  file.tensors.reserve(std::min<uint64_t>(tensor_count, kMaxReserve));
  std::map<std::string, size_t, std::less<>> names;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    const uint64_t info_pos = cur_.position();
    GgufTensor t;
    ASSIGN_OR_RETURN(t.name, ReadString(absl::StrCat("tensor info ", i, " at byte ", info_pos)));
    const std::string where =
        absl::StrCat("tensor ", Quote(t.name), " (info at byte ", info_pos, ")");
    auto wrap = [&](const absl::Status& s) { return Annotate(s, where); };
    if (names.count(t.name) != 0) {
      return Invalid(absl::StrCat("duplicate tensor name ", Quote(t.name), " at byte ", info_pos));
    }
    auto n_dims = cur_.ReadU32();
    if (!n_dims.ok()) return wrap(n_dims.status());
    if (*n_dims > kMaxDims) {
      return Invalid(
          absl::StrCat(where, " has ", *n_dims, " dimensions; GGUF allows at most ", kMaxDims));
    }
    t.elements = 1;
    bool overflow = false;
    for (uint32_t d = 0; d < *n_dims; ++d) {
      auto dim = cur_.ReadU64();
      if (!dim.ok()) return wrap(dim.status());
      if (*dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Invalid(absl::StrCat(where, ": dimension ", d, " is negative (",
                                    static_cast<int64_t>(*dim), ")"));
      }
      t.dims.push_back(*dim);
      if (*dim != 0 &&
          t.elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / *dim) {
        overflow = true;
      }
      t.elements *= *dim;  // wraps only when overflow is already set
    }
    if (overflow) {
      return Invalid(absl::StrCat(where, ": element count overflows int64"));
    }
    auto type_id = cur_.ReadU32();
    if (!type_id.ok()) return wrap(type_id.status());
    t.type_id = *type_id;
    t.type = FindGgmlType(t.type_id);
    if (t.type == nullptr) {
      return Invalid(absl::StrCat(where, " has unknown ggml type id ", t.type_id, " (known: 0..",
                                  GgmlTypeCount() - 1, ")"));
    }
    if (t.type->removed) {
      return Invalid(absl::StrCat("tensor ", Quote(t.name), " uses removed ggml type ",
                                  t.type->name, " (id ", t.type_id, ")"));
    }
    const uint64_t row = t.dims.empty() ? 1 : t.dims[0];
    if (row % t.type->block_size != 0) {
      return Invalid(absl::StrCat(where, ": row length ", row, " is not a multiple of the ",
                                  t.type->name, " block size ", t.type->block_size));
    }
    auto nbytes = GgmlTensorBytes(*t.type, t.elements);
    if (!nbytes.ok()) return Invalid(absl::StrCat(where, ": ", nbytes.status().message()));
    t.nbytes = *nbytes;
    auto offset = cur_.ReadU64();
    if (!offset.ok()) return wrap(offset.status());
    if (*offset % file.alignment != 0) {
      return Invalid(absl::StrCat(where, ": offset ", *offset,
                                  " is not a multiple of the alignment ", file.alignment));
    }
    t.offset = *offset;  // relative until the data section is known
    names.emplace(t.name, file.tensors.size());
    file.tensors.push_back(std::move(t));
  }

  const uint64_t end_of_infos = cur_.position();
  const uint64_t pad = (file.alignment - end_of_infos % file.alignment) % file.alignment;
  file.data_offset = end_of_infos + pad;
  if (file.data_offset > file.file_size) {
    if (!file.tensors.empty()) {
      return absl::OutOfRangeError(
          absl::StrCat(Name(), ": truncated or corrupt: the data section would start at byte ",
                       file.data_offset, " but the file has ", file.file_size, " bytes"));
    }
    // A file with no tensors may end without the final padding.
    file.data_offset = file.file_size;
  }

  const uint64_t data_size = file.file_size - file.data_offset;
  for (GgufTensor& t : file.tensors) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return absl::OutOfRangeError(absl::StrCat(
          Name(), ": truncated or corrupt: tensor ", Quote(t.name), " data at data offset ",
          t.offset, " + ", t.nbytes, " bytes runs past the end of the file (", data_size,
          " data bytes after byte ", file.data_offset, ")"));
    }
    t.offset += file.data_offset;
  }

  std::vector<const GgufTensor*> by_offset;
  by_offset.reserve(file.tensors.size());
  for (const GgufTensor& t : file.tensors) by_offset.push_back(&t);
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  const GgufTensor* furthest = nullptr;  // the earlier tensor that reaches furthest
  for (const GgufTensor* t : by_offset) {
    if (furthest != nullptr && furthest->offset + furthest->nbytes > t->offset && t->nbytes > 0) {
      return Invalid(absl::StrCat("tensors ", Quote(furthest->name), " [", furthest->offset, ", ",
                                  furthest->offset + furthest->nbytes, ") and ", Quote(t->name),
                                  " [", t->offset, ", ", t->offset + t->nbytes, ") overlap"));
    }
    if (furthest == nullptr || t->offset + t->nbytes > furthest->offset + furthest->nbytes) {
      furthest = t;
    }
  }
  return file;
}

}  // namespace

absl::StatusOr<GgufFile> ParseGguf(RangeReader& reader, const GgufParseLimits& limits) {
  ASSIGN_OR_RETURN(uint64_t size, reader.Size());
  Parser parser(reader, size, limits);
  return parser.Parse();
}

}  // namespace modelfs
