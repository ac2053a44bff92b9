// The safetensors dtype table and size rules (safetensors_dtypes.h), and the public dtype
// queries of safetensors.h built on them.
#include "core/formats/safetensors_dtypes.h"

#include <iterator>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/formats/safetensors.h"

namespace modelfs {
namespace {

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

}  // namespace

namespace safetensors_internal {

int DtypeRank(std::string_view dtype) {
  for (size_t i = 0; i < std::size(kDtypes); ++i) {
    if (dtype == kDtypes[i].name) return static_cast<int>(i);
  }
  return -1;
}

std::string ShapeString(const std::vector<uint64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

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

}  // namespace safetensors_internal

std::optional<uint32_t> SafetensorsDtypeBits(std::string_view dtype) {
  int rank = safetensors_internal::DtypeRank(dtype);
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

}  // namespace modelfs
