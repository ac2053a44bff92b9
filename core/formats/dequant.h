// Decoding (and, for tests and synthetic models, encoding) of the simple ggml tensor formats:
// IEEE half and bfloat16 conversions, Q8_0 and Q4_0 blocks with ggml's reference rounding,
// and PeekValues, which reads only the first blocks of a tensor to show that its bytes are
// weights (`modelfs inspect --peek`).
//
// Block layouts (ggml-common.h):
//   Q8_0: f16 d, int8 q[32];               x = d * q
//   Q4_0: f16 d, uint8 qs[16];             x[j] = d * ((qs[j] & 15) - 8),
//                                          x[j + 16] = d * ((qs[j] >> 4) - 8)
//   Q4_K: f16 d, f16 dmin, uint8 scales[12], uint8 qs[128] per 256 values: 8 sub-blocks of 32
//         with 6-bit scale s and min m each; x = d * s * q - dmin * m, q 4 bits
//
// Thread safety: pure functions; PeekValues uses the RangeReader it is given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/formats/gguf.h"
#include "core/io/range_reader.h"

namespace modelfs {

// IEEE 754 binary16 <-> float. FloatToHalf rounds to nearest even (as the F16C instruction
// and ggml's software path do); overflow gives +-inf, NaN stays NaN.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
// bfloat16 <-> float. FloatToBf16 rounds to nearest even and keeps NaN quiet, as ggml's
// ggml_compute_fp32_to_bf16.
float Bf16ToFloat(uint16_t b);
uint16_t FloatToBf16(float f);

// ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref. n must be a multiple of 32.
// Errors: kInvalidArgument otherwise.
absl::StatusOr<std::string> QuantizeQ8_0(const float* x, size_t n);
absl::StatusOr<std::string> QuantizeQ4_0(const float* x, size_t n);
// A simple Q4_K encoder (per-sub-block min/max, no error search as ggml's make_qkx2_quants
// does): its blocks decode with ggml's dequantize_row_q4_K. n must be a multiple of 256.
absl::StatusOr<std::string> QuantizeQ4_K(const float* x, size_t n);
inline absl::StatusOr<std::string> QuantizeQ8_0(const std::vector<float>& x) {
  return QuantizeQ8_0(x.data(), x.size());
}
inline absl::StatusOr<std::string> QuantizeQ4_0(const std::vector<float>& x) {
  return QuantizeQ4_0(x.data(), x.size());
}
inline absl::StatusOr<std::string> QuantizeQ4_K(const std::vector<float>& x) {
  return QuantizeQ4_K(x.data(), x.size());
}

// Decodes the first n values of `bytes`, which hold whole blocks of `type`. Supported: F32,
// F16, BF16, F64, I8, I16, I32, I64, Q8_0, Q4_0, Q4_K.
// Errors: kUnimplemented naming the type for other types; kOutOfRange when bytes holds fewer
// than n values.
absl::StatusOr<std::vector<float>> DequantizeValues(const GgmlType& type, std::string_view bytes,
                                                    size_t n);

// Reads and decodes the first min(n, elements) values of `tensor` in `file` (which came from
// ParseGguf on the same reader), fetching only the blocks that hold them.
// Errors: kNotFound when there is no such tensor; kUnimplemented naming the type for types
// DequantizeValues does not decode; reader errors.
absl::StatusOr<std::vector<float>> PeekValues(RangeReader& reader, const GgufFile& file,
                                              std::string_view tensor, size_t n);

}  // namespace modelfs
