// ParseContentRange: the one Content-Range parser of the registry client and the http(s)
// RangeReader.
#include "core/http/content_range.h"

#include <gtest/gtest.h>

namespace modelfs {
namespace {

TEST(ContentRangeTest, ARangeWithATotalGivesAllThreeNumbers) {
  std::optional<ContentRange> cr = ParseContentRange("bytes 100-199/1000");
  ASSERT_TRUE(cr.has_value());
  EXPECT_EQ(cr->first, uint64_t{100});
  EXPECT_EQ(cr->last, uint64_t{199});
  EXPECT_EQ(cr->total, uint64_t{1000});
}

TEST(ContentRangeTest, TheOneByteOfAOneByteFileIsFirstZeroLastZeroTotalOne) {
  std::optional<ContentRange> cr = ParseContentRange("bytes 0-0/1");
  ASSERT_TRUE(cr.has_value());
  EXPECT_EQ(cr->first, uint64_t{0});
  EXPECT_EQ(cr->last, uint64_t{0});
  EXPECT_EQ(cr->total, uint64_t{1});
}

TEST(ContentRangeTest, AnUnsatisfiedRangeHasATotalAndNoBytes) {
  std::optional<ContentRange> cr = ParseContentRange("bytes */123");
  ASSERT_TRUE(cr.has_value());
  EXPECT_FALSE(cr->first.has_value());
  EXPECT_FALSE(cr->last.has_value());
  EXPECT_EQ(cr->total, uint64_t{123});
}

TEST(ContentRangeTest, AnUnknownTotalIsAbsent) {
  std::optional<ContentRange> cr = ParseContentRange("bytes 5-9/*");
  ASSERT_TRUE(cr.has_value());
  EXPECT_EQ(cr->first, uint64_t{5});
  EXPECT_EQ(cr->last, uint64_t{9});
  EXPECT_FALSE(cr->total.has_value());
}

TEST(ContentRangeTest, AnEqualsSignAfterTheUnitAndSurroundingSpacesAreAccepted) {
  std::optional<ContentRange> cr = ParseContentRange("  bytes=0-9/10 ");
  ASSERT_TRUE(cr.has_value());
  EXPECT_EQ(cr->first, uint64_t{0});
  EXPECT_EQ(cr->last, uint64_t{9});
  EXPECT_EQ(cr->total, uint64_t{10});
}

TEST(ContentRangeTest, TheLargestSixtyFourBitNumbersParse) {
  std::optional<ContentRange> cr =
      ParseContentRange("bytes 18446744073709551614-18446744073709551614/18446744073709551615");
  ASSERT_TRUE(cr.has_value());
  EXPECT_EQ(cr->first, uint64_t{18446744073709551614u});
  EXPECT_EQ(cr->total, uint64_t{18446744073709551615u});
}

TEST(ContentRangeTest, ATotalPastSixtyFourBitsIsRefused) {
  EXPECT_FALSE(ParseContentRange("bytes 0-1/18446744073709551616").has_value());
}

TEST(ContentRangeTest, AFirstBytePastSixtyFourBitsIsRefused) {
  EXPECT_FALSE(ParseContentRange("bytes 18446744073709551616-18446744073709551617/*").has_value());
}

TEST(ContentRangeTest, AMissingTotalIsRefused) {
  EXPECT_FALSE(ParseContentRange("bytes 0-9").has_value());
}

TEST(ContentRangeTest, AnEmptyTotalIsRefused) {
  EXPECT_FALSE(ParseContentRange("bytes 0-9/").has_value());
}

TEST(ContentRangeTest, ALastByteBeforeTheFirstIsRefused) {
  EXPECT_FALSE(ParseContentRange("bytes 10-9/100").has_value());
}

TEST(ContentRangeTest, ARangeWithoutADashIsRefused) {
  EXPECT_FALSE(ParseContentRange("bytes 10/100").has_value());
}

TEST(ContentRangeTest, AnotherUnitIsRefused) {
  EXPECT_FALSE(ParseContentRange("items 0-9/10").has_value());
}

TEST(ContentRangeTest, GarbageIsRefused) {
  EXPECT_FALSE(ParseContentRange("").has_value());
  EXPECT_FALSE(ParseContentRange("bytes").has_value());
  EXPECT_FALSE(ParseContentRange("bytes a-b/c").has_value());
  EXPECT_FALSE(ParseContentRange("bytes 0-9/10x").has_value());
  EXPECT_FALSE(ParseContentRange("bytes -1-9/10").has_value());
}

}  // namespace
}  // namespace modelfs
