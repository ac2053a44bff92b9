// The ggml type table. Ids, names and block geometry follow llama.cpp's ggml/include/ggml.h
// (enum ggml_type, GGML_TYPE_COUNT = 43) and ggml/src/ggml.c (type_traits: blck_size,
// type_size). Removed ids keep their historical names so files using them are rejected by name.
#include "core/formats/ggml_types.h"

#include <array>
#include <cctype>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace modelfs {
namespace {

constexpr uint32_t kQK = 256;  // QK_K: the K-quant and IQ super-block

constexpr std::array<GgmlType, 43> kTypes = {{
    {0, "F32", 1, 4, false},
    {1, "F16", 1, 2, false},
    {2, "Q4_0", 32, 18, false},  // f16 d + 16 bytes of nibbles
    {3, "Q4_1", 32, 20, false},  // f16 d, f16 m + 16
    {4, "Q4_2", 0, 0, true},
    {5, "Q4_3", 0, 0, true},
    {6, "Q5_0", 32, 22, false},  // f16 d + 4 high bits + 16
    {7, "Q5_1", 32, 24, false},
    {8, "Q8_0", 32, 34, false},  // f16 d + 32 int8
    {9, "Q8_1", 32, 36, false},  // f16 d, f16 s + 32 int8
    {10, "Q2_K", kQK, 84, false},
    {11, "Q3_K", kQK, 110, false},
    {12, "Q4_K", kQK, 144, false},
    {13, "Q5_K", kQK, 176, false},
    {14, "Q6_K", kQK, 210, false},
    {15, "Q8_K", kQK, 292, false},  // f32 d + 256 int8 + 16 int16 sums
    {16, "IQ2_XXS", kQK, 66, false},
    {17, "IQ2_XS", kQK, 74, false},
    {18, "IQ3_XXS", kQK, 98, false},
    {19, "IQ1_S", kQK, 50, false},
    {20, "IQ4_NL", 32, 18, false},
    {21, "IQ3_S", kQK, 110, false},
    {22, "IQ2_S", kQK, 82, false},
    {23, "IQ4_XS", kQK, 136, false},
    {24, "I8", 1, 1, false},
    {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},
    {27, "I64", 1, 8, false},
    {28, "F64", 1, 8, false},
    {29, "IQ1_M", kQK, 56, false},
    {30, "BF16", 1, 2, false},
    {31, "Q4_0_4_4", 0, 0, true},  // repacking moved to load time
    {32, "Q4_0_4_8", 0, 0, true},
    {33, "Q4_0_8_8", 0, 0, true},
    {34, "TQ1_0", kQK, 54, false},
    {35, "TQ2_0", kQK, 66, false},
    {36, "IQ4_NL_4_4", 0, 0, true},
    {37, "IQ4_NL_4_8", 0, 0, true},
    {38, "IQ4_NL_8_8", 0, 0, true},
    {39, "MXFP4", 32, 17, false},  // e8m0 scale + 16 bytes of fp4
    {40, "NVFP4", 64, 36, false},  // 4 e4m3 scales + 32 bytes of fp4
    {41, "Q1_0", 128, 18, false},  // f16 d + 16 bytes of bits
    {42, "Q2_0", 64, 18, false},   // f16 d + 16 bytes of 2-bit codes
}};

static_assert([] {
  for (uint32_t i = 0; i < kTypes.size(); ++i) {
    if (kTypes[i].id != i) return false;
  }
  return true;
}());

bool EqualsIgnoreCase(std::string_view a, const char* b) {
  size_t i = 0;
  for (; i < a.size(); ++i) {
    if (b[i] == '\0') return false;
    if (std::toupper(static_cast<unsigned char>(a[i])) !=
        std::toupper(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return b[i] == '\0';
}

}  // namespace

const GgmlType* FindGgmlType(uint32_t id) {
  if (id >= kTypes.size()) return nullptr;
  return &kTypes[id];
}

const GgmlType* FindGgmlTypeByName(std::string_view name) {
  for (const GgmlType& t : kTypes) {
    if (EqualsIgnoreCase(name, t.name)) return &t;
  }
  return nullptr;
}

uint32_t GgmlTypeCount() { return static_cast<uint32_t>(kTypes.size()); }

absl::StatusOr<uint64_t> GgmlTensorBytes(const GgmlType& t, uint64_t elements) {
  if (t.removed || t.block_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ggml type ", t.name, " (id ", t.id, ") has been removed and has no size"));
  }
  if (elements % t.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(elements, " elements are not a multiple of the ",
                                                   t.name, " block size ", t.block_size));
  }
  const uint64_t blocks = elements / t.block_size;
  if (blocks > std::numeric_limits<uint64_t>::max() / t.type_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(elements, " elements of ", t.name, " overflow a 64-bit byte count"));
  }
  return blocks * t.type_size;
}

}  // namespace modelfs
