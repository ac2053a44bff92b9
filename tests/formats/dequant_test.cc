// Half/bfloat16 conversions, Q8_0/Q4_0 quantization (ggml's reference rounding) and
// PeekValues on files written by GgufWriter.
#include "core/formats/dequant.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/formats/gguf_writer.h"
#include "testsupport/synth/synthetic_models.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14, kBF16 = 30;

std::string Le16(const std::vector<uint16_t>& v) {
  std::string out;
  for (uint16_t x : v) {
    out.push_back(static_cast<char>(x & 0xff));
    out.push_back(static_cast<char>(x >> 8));
  }
  return out;
}

uint16_t HalfBitsAt(const std::string& blocks, size_t block, size_t block_bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(blocks.data() + block * block_bytes);
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

// Parses bytes from a writer and peeks a tensor.
absl::StatusOr<std::vector<float>> WriteAndPeek(const GgufWriter& w, const std::string& name,
                                                size_t n) {
  auto bytes = w.Serialize();
  if (!bytes.ok()) return bytes.status();
  auto reader = MakeMemoryRangeReader("peek.gguf", *bytes);
  auto file = ParseGguf(*reader);
  if (!file.ok()) return file.status();
  return PeekValues(*reader, *file, name, n);
}

// ---- half / bfloat16 ----

TEST(HalfTest, KnownValuesConvertExactly) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.5f), 0xc100);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
}

TEST(HalfTest, RoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);             // tie -> 0
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(FloatToHalf(std::nanf("")) & 0x7c00, 0x7c00);
}

TEST(HalfTest, EveryNonNanHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;  // NaN
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(Bf16Test, EveryNonNanBf16RoundTripsExactly) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0) continue;
    ASSERT_EQ(FloatToBf16(Bf16ToFloat(static_cast<uint16_t>(b))), b) << std::hex << b;
  }
}

TEST(Bf16Test, RoundsToNearestEvenAndKeepsNanQuiet) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(FloatToBf16(std::nanf("")) & 0x7fc0, 0x7fc0);
}

// ---- Q8_0 / Q4_0 ----

TEST(QuantizeTest, Q8_0BlockOfKnownValuesHasGgmlBytes) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16) / 16.0f * 1.27f;  // amax 1.27
  ASSERT_OK_AND_ASSIGN(std::string q, QuantizeQ8_0(x));
  ASSERT_EQ(q.size(), 34u);
  EXPECT_EQ(HalfBitsAt(q, 0, 34), FloatToHalf(0.01f));
  EXPECT_EQ(static_cast<int8_t>(q[2]), -127);  // x[0] = -1.27
  EXPECT_EQ(static_cast<int8_t>(q[2 + 16]), 0);
  EXPECT_EQ(static_cast<int8_t>(q[2 + 17]), 8);  // 1.27/16 / 0.01 = 7.9375 -> 8
}

TEST(QuantizeTest, Q4_0BlockOfKnownValuesHasGgmlBytes) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);  // max magnitude -16
  ASSERT_OK_AND_ASSIGN(std::string q, QuantizeQ4_0(x));
  ASSERT_EQ(q.size(), 18u);
  EXPECT_EQ(HalfBitsAt(q, 0, 18), 0x4000);  // d = -16 / -8 = 2
  // j=0: -16/2+8.5 = 0.5 -> 0; j=16: 0/2+8.5 -> 8.
  EXPECT_EQ(static_cast<uint8_t>(q[2]), 0x80);
  // j=15: -1/2+8.5 = 8 -> 8; j=31: 15/2+8.5 = 16 -> clamped to 15.
  EXPECT_EQ(static_cast<uint8_t>(q[2 + 15]), 0xf8);
}

TEST(QuantizeTest, PartialBlocksAreRejected) {
  std::vector<float> x(33, 1.0f);
  EXPECT_THAT(QuantizeQ8_0(x), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("whole blocks of 32 values, got 33")));
  EXPECT_THAT(QuantizeQ4_0(x), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("whole blocks of 32 values, got 33")));
}

TEST(QuantizeTest, AllZeroBlockQuantizesToZeros) {
  std::vector<float> x(32, 0.0f);
  ASSERT_OK_AND_ASSIGN(std::string q8, QuantizeQ8_0(x));
  EXPECT_EQ(q8, std::string(34, '\0'));
  ASSERT_OK_AND_ASSIGN(std::vector<float> back, DequantizeValues(*FindGgmlType(kQ8_0), q8, 32));
  EXPECT_EQ(back, x);
}

TEST(PeekTest, Q8_0RoundTripIsWithinHalfAStep) {
  const std::vector<float> x = SyntheticWeights(7, 1, 64 * 32, 0.5f);
  ASSERT_OK_AND_ASSIGN(std::string q, QuantizeQ8_0(x));
  GgufWriter w;
  ASSERT_OK(w.AddTensor("w", {64, 32}, kQ8_0, q));
  ASSERT_OK_AND_ASSIGN(std::vector<float> y, WriteAndPeek(w, "w", x.size()));
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float d = std::fabs(HalfToFloat(HalfBitsAt(q, i / 32, 34)));
    // Half a step, plus the scale's own rounding to f16 (relative 2^-11) times |q| <= 127.
    EXPECT_LE(std::fabs(x[i] - y[i]), 0.5f * d + std::fabs(x[i]) * 0x1p-10f) << i;
  }
}

TEST(PeekTest, Q4_0RoundTripIsWithinHalfAStep) {
  // The largest magnitude maps to -8 exactly; keep the rest inside [-7.5, 7.5] steps so
  // none is clamped at +7.
  std::vector<float> x = SyntheticWeights(9, 2, 64 * 32, 0.1f);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    for (size_t j = 0; j < 32; ++j) x[b * 32 + j] = std::clamp(x[b * 32 + j], -0.29f, 0.29f);
    x[b * 32 + b % 32] = (b % 2 ? 0.32f : -0.32f);
  }
  ASSERT_OK_AND_ASSIGN(std::string q, QuantizeQ4_0(x));
  GgufWriter w;
  ASSERT_OK(w.AddTensor("w", {64, 32}, kQ4_0, q));
  ASSERT_OK_AND_ASSIGN(std::vector<float> y, WriteAndPeek(w, "w", x.size()));
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float d = std::fabs(HalfToFloat(HalfBitsAt(q, i / 32, 18)));
    EXPECT_LE(std::fabs(x[i] - y[i]), 0.5f * d + std::fabs(x[i]) * 0x1p-10f) << i;
  }
}

TEST(PeekTest, Q4_KRoundTripIsWithinHalfAStep) {
  const std::vector<float> x = SyntheticWeights(11, 3, 8 * 256, 0.1f);
  ASSERT_OK_AND_ASSIGN(std::string q, QuantizeQ4_K(x));
  ASSERT_EQ(q.size(), 8u * 144u);
  GgufWriter w;
  ASSERT_OK(w.AddTensor("w", {256, 8}, kQ4_K, q));
  ASSERT_OK_AND_ASSIGN(std::vector<float> y, WriteAndPeek(w, "w", x.size()));
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    // A sub-block's step is at most (its range + dmin) / 15 + d (steps are rounded up to a
    // multiple of d); no value is clamped, so the error is at most half a step.
    const size_t b = i / 256, sub = i / 32;
    const float d = HalfToFloat(HalfBitsAt(q, b, 144));
    const float dmin = HalfToFloat(HalfBitsAt(q.substr(2), b, 144));
    float lo = 0.0f, hi = x[sub * 32];
    for (size_t l = 0; l < 32; ++l) {
      lo = std::min(lo, x[sub * 32 + l]);
      hi = std::max(hi, x[sub * 32 + l]);
    }
    const float step = (hi - lo + dmin) / 15.0f + d;
    EXPECT_LE(std::fabs(x[i] - y[i]), 0.5f * step + 1e-6f) << i;
  }
}

TEST(QuantizeTest, Q4_KRejectsPartialSuperBlocks) {
  EXPECT_THAT(QuantizeQ4_K(std::vector<float>(255, 0.0f)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("whole super-blocks of 256 values, got 255")));
}

TEST(PeekTest, Q4_0UsesLowNibblesForTheFirstHalfOfABlock) {
  // d = 2.0; qs[0] = 0x9f: x[0] = 2*(15-8) = 14, x[16] = 2*(9-8) = 2.
  std::string block = Le16({0x4000}) + std::string(16, '\x88');
  block[2] = '\x9f';
  GgufWriter w;
  ASSERT_OK(w.AddTensor("w", {32}, kQ4_0, block));
  ASSERT_OK_AND_ASSIGN(std::vector<float> y, WriteAndPeek(w, "w", 32));
  EXPECT_EQ(y[0], 14.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[16], 2.0f);
}

TEST(PeekTest, Q8_0IsScaleTimesSignedByte) {
  std::string block = Le16({0x3800}) + std::string(32, '\0');  // d = 0.5
  block[2] = static_cast<char>(-3);
  block[3] = static_cast<char>(127);
  block[33] = static_cast<char>(-128);
  GgufWriter w;
  ASSERT_OK(w.AddTensor("w", {32}, kQ8_0, block));
  ASSERT_OK_AND_ASSIGN(std::vector<float> y, WriteAndPeek(w, "w", 32));
  EXPECT_EQ(y[0], -1.5f);
  EXPECT_EQ(y[1], 63.5f);
  EXPECT_EQ(y[31], -64.0f);
}

TEST(PeekTest, F32ValuesAreExact) {
  const std::vector<float> x = {1.5f, -0.0f, 3.25e-20f, -7.0f};
  std::string bytes(16, '\0');
  std::memcpy(bytes.data(), x.data(), 16);
  GgufWriter w;
  ASSERT_OK(w.AddTensor("w", {4}, kF32, bytes));
  ASSERT_OK_AND_ASSIGN(std::vector<float> y, WriteAndPeek(w, "w", 8));
  EXPECT_EQ(y, x);  // n is capped at the element count
}

TEST(PeekTest, F16ValuesAreExact) {
  GgufWriter w;
  ASSERT_OK(w.AddTensor("w", {4}, kF16, Le16({0x3c00, 0xc100, 0x7bff, 0x0001})));
  ASSERT_OK_AND_ASSIGN(std::vector<float> y, WriteAndPeek(w, "w", 4));
  EXPECT_THAT(y, ElementsAre(1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24)));
}

TEST(PeekTest, Bf16ValuesAreExact) {
  GgufWriter w;
  ASSERT_OK(w.AddTensor("w", {3}, kBF16, Le16({0x3f80, 0xc0a0, 0x3e20})));
  ASSERT_OK_AND_ASSIGN(std::vector<float> y, WriteAndPeek(w, "w", 3));
  EXPECT_THAT(y, ElementsAre(1.0f, -5.0f, 0.15625f));
}

TEST(PeekTest, PeekReadsOnlyTheBlocksItNeeds) {
  GgufWriter w;
  ASSERT_OK(w.AddSparseTensor("w", {4096, 4096}, kQ8_0));
  ASSERT_OK_AND_ASSIGN(std::string bytes, w.Serialize());
  auto reader = MakeMemoryRangeReader("peek.gguf", bytes);
  ASSERT_OK_AND_ASSIGN(GgufFile file, ParseGguf(*reader));
  const uint64_t before = reader->stats().bytes;
  ASSERT_OK_AND_ASSIGN(std::vector<float> y, PeekValues(*reader, file, "w", 40));
  EXPECT_EQ(y.size(), 40u);
  EXPECT_EQ(reader->stats().bytes - before, 2u * 34u);
}

TEST(PeekTest, UnsupportedTypeIsUnimplementedNamingTheType) {
  GgufWriter w;
  ASSERT_OK(w.AddSparseTensor("w", {256}, kQ6_K));
  EXPECT_THAT(WriteAndPeek(w, "w", 8),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("decoding ggml type Q6_K (id 14) is not implemented")));
}

TEST(PeekTest, MissingTensorIsNotFound) {
  GgufWriter w;
  EXPECT_THAT(WriteAndPeek(w, "nope", 8),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no tensor named 'nope'")));
}

}  // namespace
}  // namespace modelfs
