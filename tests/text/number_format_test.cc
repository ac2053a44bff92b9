#include "core/text/number_format.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace modelfs {
namespace {

TEST(WithCommasTest, NumbersBelowOneThousandHaveNoSeparator) {
  EXPECT_EQ(WithCommas(0), "0");
  EXPECT_EQ(WithCommas(7), "7");
  EXPECT_EQ(WithCommas(999), "999");
}

TEST(WithCommasTest, ASeparatorGoesBeforeEachGroupOfThreeFromTheRight) {
  EXPECT_EQ(WithCommas(1000), "1,000");
  EXPECT_EQ(WithCommas(12345), "12,345");
  EXPECT_EQ(WithCommas(123456), "123,456");
  EXPECT_EQ(WithCommas(1234567), "1,234,567");
}

TEST(WithCommasTest, TheLargestCountIsWrittenWhole) {
  EXPECT_EQ(WithCommas(std::numeric_limits<uint64_t>::max()), "18,446,744,073,709,551,615");
}

}  // namespace
}  // namespace modelfs
