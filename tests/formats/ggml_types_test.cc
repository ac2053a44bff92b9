// The ggml type table against llama.cpp's ggml.h / ggml.c (GGML_TYPE_COUNT = 43).
#include "core/formats/ggml_types.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

TEST(GgmlTypesTest, TableMatchesGgmlTypeTraitsForEveryId) {
  // id, name, blck_size, type_size (0, 0 for removed ids).
  const std::vector<std::tuple<uint32_t, std::string, uint32_t, uint32_t>> expected = {
      {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
      {3, "Q4_1", 32, 20},      {4, "Q4_2", 0, 0},        {5, "Q4_3", 0, 0},
      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},
      {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},
      {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},   {14, "Q6_K", 256, 210},
      {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
      {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},   {20, "IQ4_NL", 32, 18},
      {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136},
      {24, "I8", 1, 1},         {25, "I16", 1, 2},        {26, "I32", 1, 4},
      {27, "I64", 1, 8},        {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
      {30, "BF16", 1, 2},       {31, "Q4_0_4_4", 0, 0},   {32, "Q4_0_4_8", 0, 0},
      {33, "Q4_0_8_8", 0, 0},   {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},
      {36, "IQ4_NL_4_4", 0, 0}, {37, "IQ4_NL_4_8", 0, 0}, {38, "IQ4_NL_8_8", 0, 0},
      {39, "MXFP4", 32, 17},    {40, "NVFP4", 64, 36},    {41, "Q1_0", 128, 18},
      {42, "Q2_0", 64, 18},
  };
  ASSERT_EQ(GgmlTypeCount(), 43u);
  for (const auto& [id, name, block, size] : expected) {
    const GgmlType* t = FindGgmlType(id);
    ASSERT_NE(t, nullptr) << id;
    EXPECT_EQ(t->id, id);
    EXPECT_EQ(std::string(t->name), name) << id;
    EXPECT_EQ(t->block_size, block) << name;
    EXPECT_EQ(t->type_size, size) << name;
    EXPECT_EQ(t->removed, block == 0) << name;
  }
}

TEST(GgmlTypesTest, IdsPastTheTableAreUnknown) {
  EXPECT_EQ(FindGgmlType(43), nullptr);
  EXPECT_EQ(FindGgmlType(0xffffffffu), nullptr);
}

TEST(GgmlTypesTest, LookupByNameIgnoresCase) {
  EXPECT_EQ(FindGgmlTypeByName("q4_k")->id, 12u);
  EXPECT_EQ(FindGgmlTypeByName("Q8_0")->id, 8u);
  EXPECT_EQ(FindGgmlTypeByName("bf16")->id, 30u);
  EXPECT_EQ(FindGgmlTypeByName("mxfp4")->id, 39u);
  EXPECT_EQ(FindGgmlTypeByName("q4_2")->id, 4u);
  EXPECT_EQ(FindGgmlTypeByName("Q4_K_M"), nullptr);
  EXPECT_EQ(FindGgmlTypeByName("Q4"), nullptr);
  EXPECT_EQ(FindGgmlTypeByName(""), nullptr);
}

TEST(GgmlTypesTest, BitsPerWeightFollowTheBlockGeometry) {
  EXPECT_DOUBLE_EQ(FindGgmlType(8)->bits_per_weight(), 8.5);
  EXPECT_DOUBLE_EQ(FindGgmlType(2)->bits_per_weight(), 4.5);
  EXPECT_DOUBLE_EQ(FindGgmlType(12)->bits_per_weight(), 4.5);
  EXPECT_DOUBLE_EQ(FindGgmlType(14)->bits_per_weight(), 6.5625);
  EXPECT_DOUBLE_EQ(FindGgmlType(0)->bits_per_weight(), 32.0);
  EXPECT_DOUBLE_EQ(FindGgmlType(4)->bits_per_weight(), 0.0);
}

TEST(GgmlTypesTest, TensorBytesAreBlocksTimesBlockSize) {
  ASSERT_OK_AND_ASSIGN(uint64_t q8, GgmlTensorBytes(*FindGgmlType(8), 576ull * 49152));
  EXPECT_EQ(q8, 30081024u);
  ASSERT_OK_AND_ASSIGN(uint64_t q6k, GgmlTensorBytes(*FindGgmlType(14), 4096ull * 4096));
  EXPECT_EQ(q6k, 13762560u);
}

TEST(GgmlTypesTest, TensorBytesRejectPartialBlocks) {
  EXPECT_THAT(GgmlTensorBytes(*FindGgmlType(12), 100),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("100 elements are not a multiple of the Q4_K block size 256")));
}

TEST(GgmlTypesTest, TensorBytesRejectRemovedTypes) {
  EXPECT_THAT(GgmlTensorBytes(*FindGgmlType(31), 32),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ggml type Q4_0_4_4 (id 31) has been removed")));
}

TEST(GgmlTypesTest, TensorBytesRejectOverflow) {
  EXPECT_THAT(GgmlTensorBytes(*FindGgmlType(27), 1ull << 62),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflow")));
}

}  // namespace
}  // namespace modelfs
