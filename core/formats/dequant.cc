#include "core/formats/dequant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

constexpr size_t kQK8_0 = 32;
constexpr size_t kQK4_0 = 32;
constexpr size_t kQK_K = 256;  // K-quant super-block
constexpr size_t kQ4_KBytes = 144;
constexpr uint32_t kTypeF32 = 0, kTypeF16 = 1, kTypeQ4_0 = 2, kTypeQ8_0 = 8, kTypeQ4_K = 12,
                   kTypeI8 = 24, kTypeI16 = 25, kTypeI32 = 26, kTypeI64 = 27, kTypeF64 = 28,
                   kTypeBF16 = 30;

uint64_t LoadLE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

void StoreLE16(char* p, uint16_t v) {
  p[0] = static_cast<char>(v & 0xff);
  p[1] = static_cast<char>(v >> 8);
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  return std::bit_cast<float>(bits);
}

uint16_t FloatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;   // NaN (quiet)
  if (abs >= 0x477ff000u) return sign | 0x7c00;  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Subnormal or zero in half: value = abs_float; half units of 2^-24.
    if (abs < 0x33000000u) return sign;  // < 2^-25 rounds to 0
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14 - (e - 127) + 13 - 1 ... value = m * 2^(e-150)
    // half subnormal value = q * 2^-24, q = m * 2^(e-150+24) = m >> (126 - e)
    const uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = q + ((rem > half || (rem == half && (q & 1))) ? 1 : 0);
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias and round the 13 dropped mantissa bits to nearest even; a carry out of the
  // mantissa correctly bumps the exponent.
  uint32_t h = ((abs >> 13) - ((127 - 15) << 10));
  const uint32_t rem = abs & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return sign | static_cast<uint16_t>(h);
}

float Bf16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64);
  return static_cast<uint16_t>((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

absl::StatusOr<std::string> QuantizeQ8_0(const float* x, size_t n) {
  if (n % kQK8_0 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Q8_0 quantizes whole blocks of 32 values, got ", n));
  }
  std::string out(n / kQK8_0 * 34, '\0');
  for (size_t b = 0; b < n / kQK8_0; ++b) {
    const float* v = x + b * kQK8_0;
    char* y = out.data() + b * 34;
    float amax = 0.0f;
    for (size_t j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    StoreLE16(y, FloatToHalf(d));
    for (size_t j = 0; j < kQK8_0; ++j) {
      y[2 + j] = static_cast<char>(static_cast<int8_t>(std::roundf(v[j] * id)));
    }
  }
  return out;
}

absl::StatusOr<std::string> QuantizeQ4_0(const float* x, size_t n) {
  if (n % kQK4_0 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Q4_0 quantizes whole blocks of 32 values, got ", n));
  }
  std::string out(n / kQK4_0 * 18, '\0');
  for (size_t b = 0; b < n / kQK4_0; ++b) {
    const float* v = x + b * kQK4_0;
    char* y = out.data() + b * 18;
    // ggml keeps the sign of the largest-magnitude value so it maps to -8 exactly.
    float amax = 0.0f, max = 0.0f;
    for (size_t j = 0; j < kQK4_0; ++j) {
      if (amax < std::fabs(v[j])) {
        amax = std::fabs(v[j]);
        max = v[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    StoreLE16(y, FloatToHalf(d));
    for (size_t j = 0; j < kQK4_0 / 2; ++j) {
      const float x0 = v[j] * id;
      const float x1 = v[kQK4_0 / 2 + j] * id;
      const uint8_t xi0 = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>(x0 + 8.5f)));
      const uint8_t xi1 = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>(x1 + 8.5f)));
      y[2 + j] = static_cast<char>(xi0 | (xi1 << 4));
    }
  }
  return out;
}

namespace {
// The smallest half >= x (x >= 0, finite), as a float: a scale rounded up never clamps.
float HalfAtLeast(float x) {
  uint16_t h = FloatToHalf(x);
  if (HalfToFloat(h) < x) ++h;
  return HalfToFloat(h);
}
}  // namespace

absl::StatusOr<std::string> QuantizeQ4_K(const float* x, size_t n) {
  if (n % kQK_K != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Q4_K quantizes whole super-blocks of 256 values, got ", n));
  }
  std::string out(n / kQK_K * kQ4_KBytes, '\0');
  for (size_t b = 0; b < n / kQK_K; ++b) {
    const float* v = x + b * kQK_K;
    char* y = out.data() + b * kQ4_KBytes;
    // Per sub-block of 32: an affine map q * step - off over its range (min clamped to <= 0,
    // as ggml does), with the 8 steps and 8 offsets as 6-bit multiples of d and dmin. Offsets
    // and steps are rounded up, so every value maps into 0..15 and none is clamped.
    float range[8], min[8];
    float max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      float lo = v[32 * j], hi = v[32 * j];
      for (int l = 1; l < 32; ++l) {
        lo = std::min(lo, v[32 * j + l]);
        hi = std::max(hi, v[32 * j + l]);
      }
      lo = std::min(lo, 0.0f);
      range[j] = hi - lo;
      min[j] = -lo;
      max_min = std::max(max_min, min[j]);
    }
    const float dmin = HalfAtLeast(max_min / 63.0f);
    float max_scale = 0.0f;
    for (int j = 0; j < 8; ++j) max_scale = std::max(max_scale, (range[j] + dmin) / 15.0f);
    const float d = HalfAtLeast(max_scale / 63.0f);
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; ++j) {
      const float scale = (range[j] + dmin) / 15.0f;
      ls[j] = static_cast<uint8_t>(
          d > 0.0f ? std::clamp(static_cast<int>(std::ceil(scale / d)), 0, 63) : 0);
      lm[j] = static_cast<uint8_t>(
          dmin > 0.0f ? std::clamp(static_cast<int>(std::ceil(min[j] / dmin)), 0, 63) : 0);
    }
    StoreLE16(y, FloatToHalf(d));
    StoreLE16(y + 2, FloatToHalf(dmin));
    uint8_t* sc = reinterpret_cast<uint8_t*>(y + 4);
    // ggml's get_scale_min_k4 packing: sub-blocks 0..3 in the low 6 bits of bytes 0..7, 4..7
    // split between the nibbles of bytes 8..11 and the top 2 bits of bytes 0..7.
    for (int j = 0; j < 8; ++j) {
      if (j < 4) {
        sc[j] = ls[j];
        sc[j + 4] = lm[j];
      } else {
        sc[j + 4] = static_cast<uint8_t>((ls[j] & 0x0f) | ((lm[j] & 0x0f) << 4));
        sc[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
        sc[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
      }
    }
    uint8_t* qs = reinterpret_cast<uint8_t*>(y + 16);
    for (int j = 0; j < 8; ++j) {
      const float step = d * ls[j], off = dmin * lm[j];
      for (int l = 0; l < 32; ++l) {
        const int q =
            step > 0.0f
                ? std::clamp(static_cast<int>(std::lround((v[32 * j + l] + off) / step)), 0, 15)
                : 0;
        // Sub-blocks 2k and 2k+1 share 32 bytes: low nibbles, then high nibbles.
        qs[32 * (j / 2) + l] |= static_cast<uint8_t>(j % 2 == 0 ? q : q << 4);
      }
    }
  }
  return out;
}

absl::StatusOr<std::vector<float>> DequantizeValues(const GgmlType& type, std::string_view bytes,
                                                    size_t n) {
  std::vector<float> out;
  auto need = [&](uint64_t nbytes) -> absl::Status {
    if (bytes.size() < nbytes) {
      return absl::OutOfRangeError(
          absl::StrCat(n, " ", type.name, " values need ", nbytes, " bytes, have ", bytes.size()));
    }
    return absl::OkStatus();
  };
  const char* p = bytes.data();
  switch (type.id) {
    case kTypeF32:
    case kTypeF16:
    case kTypeBF16:
    case kTypeF64:
    case kTypeI8:
    case kTypeI16:
    case kTypeI32:
    case kTypeI64: {
      const uint64_t size = type.type_size;
      RETURN_IF_ERROR(need(n * size));
      out.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        const uint64_t raw = LoadLE(p + i * size, static_cast<int>(size));
        float v = 0;
        switch (type.id) {
          case kTypeF32:
            v = std::bit_cast<float>(static_cast<uint32_t>(raw));
            break;
          case kTypeF16:
            v = HalfToFloat(static_cast<uint16_t>(raw));
            break;
          case kTypeBF16:
            v = Bf16ToFloat(static_cast<uint16_t>(raw));
            break;
          case kTypeF64:
            v = static_cast<float>(std::bit_cast<double>(raw));
            break;
          case kTypeI8:
            v = static_cast<int8_t>(raw);
            break;
          case kTypeI16:
            v = static_cast<int16_t>(raw);
            break;
          case kTypeI32:
            v = static_cast<float>(static_cast<int32_t>(raw));
            break;
          default:
            v = static_cast<float>(static_cast<int64_t>(raw));
        }
        out.push_back(v);
      }
      return out;
    }
    case kTypeQ8_0: {
      const size_t blocks = (n + kQK8_0 - 1) / kQK8_0;
      RETURN_IF_ERROR(need(blocks * 34));
      out.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        const char* blk = p + (i / kQK8_0) * 34;
        const float d = HalfToFloat(static_cast<uint16_t>(LoadLE(blk, 2)));
        out.push_back(d * static_cast<int8_t>(blk[2 + i % kQK8_0]));
      }
      return out;
    }
    case kTypeQ4_0: {
      const size_t blocks = (n + kQK4_0 - 1) / kQK4_0;
      RETURN_IF_ERROR(need(blocks * 18));
      out.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        const char* blk = p + (i / kQK4_0) * 18;
        const float d = HalfToFloat(static_cast<uint16_t>(LoadLE(blk, 2)));
        const size_t j = i % kQK4_0;
        const uint8_t qs = static_cast<uint8_t>(blk[2 + j % 16]);
        const int q = j < 16 ? (qs & 0x0f) : (qs >> 4);
        out.push_back(d * static_cast<float>(q - 8));
      }
      return out;
    }
    case kTypeQ4_K: {
      const size_t blocks = (n + kQK_K - 1) / kQK_K;
      RETURN_IF_ERROR(need(blocks * kQ4_KBytes));
      out.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        const char* blk = p + (i / kQK_K) * kQ4_KBytes;
        const float d = HalfToFloat(static_cast<uint16_t>(LoadLE(blk, 2)));
        const float dmin = HalfToFloat(static_cast<uint16_t>(LoadLE(blk + 2, 2)));
        const uint8_t* sc = reinterpret_cast<const uint8_t*>(blk + 4);
        const size_t j = i % kQK_K / 32, l = i % 32;
        const int ls = j < 4 ? (sc[j] & 63) : ((sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4));
        const int lm = j < 4 ? (sc[j + 4] & 63) : ((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
        const uint8_t qs = static_cast<uint8_t>(blk[16 + 32 * (j / 2) + l]);
        const int q = j % 2 == 0 ? (qs & 0x0f) : (qs >> 4);
        out.push_back(d * static_cast<float>(ls) * static_cast<float>(q) -
                      dmin * static_cast<float>(lm));
      }
      return out;
    }
    default:
      return absl::UnimplementedError(
          absl::StrCat("decoding ggml type ", type.name, " (id ", type.id,
                       ") is not implemented; peek supports F32, F16, BF16, F64, I8..I64, "
                       "Q8_0, Q4_0 and Q4_K"));
  }
}

absl::StatusOr<std::vector<float>> PeekValues(RangeReader& reader, const GgufFile& file,
                                              std::string_view tensor, size_t n) {
  const GgufTensor* t = file.FindTensor(tensor);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat(reader.name(), ": no tensor named '",
                                            absl::string_view(tensor.data(), tensor.size()), "'"));
  }
  n = static_cast<size_t>(std::min<uint64_t>(n, t->elements));
  // Fail on an unsupported type before reading anything.
  RETURN_IF_ERROR(DequantizeValues(*t->type, std::string_view(), 0).status());
  const uint64_t blocks = (n + t->type->block_size - 1) / t->type->block_size;
  const uint64_t nbytes = std::min<uint64_t>(blocks * t->type->type_size, t->nbytes);
  ASSIGN_OR_RETURN(std::string bytes, reader.ReadAt(t->offset, nbytes));
  auto values = DequantizeValues(*t->type, bytes, n);
  if (!values.ok()) {
    return absl::Status(values.status().code(), absl::StrCat(reader.name(), ": tensor '", t->name,
                                                             "': ", values.status().message()));
  }
  return values;
}

}  // namespace modelfs
