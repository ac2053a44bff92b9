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

TEST(ParseByteSizeTest, ABareNumberIsBytes) {
  EXPECT_EQ(*ParseByteSize("65536"), 65536u);
  EXPECT_EQ(*ParseByteSize("0"), 0u);
}

TEST(ParseByteSizeTest, UnitsArePowersOf1024InEitherSpelling) {
  EXPECT_EQ(*ParseByteSize("64KiB"), 65536u);
  EXPECT_EQ(*ParseByteSize("64k"), 65536u);
  EXPECT_EQ(*ParseByteSize("4MiB"), 4u << 20);
  EXPECT_EQ(*ParseByteSize("4M"), 4u << 20);
  EXPECT_EQ(*ParseByteSize("1GiB"), 1ull << 30);
  EXPECT_EQ(*ParseByteSize("2tib"), 2ull << 40);
}

TEST(ParseByteSizeTest, BadTextIsInvalidArgumentNamingIt) {
  for (const char* bad : {"", "MiB", "4 MiB", "4MB", "-1", "4.5MiB"}) {
    absl::StatusOr<uint64_t> got = ParseByteSize(bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseByteSize("4XiB").status().message().find("\"4XiB\""), std::string::npos);
}

TEST(ParseByteSizeTest, OverflowIsRefused) {
  EXPECT_FALSE(ParseByteSize("18446744073709551616").ok());
  EXPECT_FALSE(ParseByteSize("16777216TiB").ok());
}

TEST(HumanBytesTest, BytesBelowOneKiBAreWholeAndLargerSizesHaveTwoDecimals) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1536), "1.50 KiB");
  EXPECT_EQ(HumanBytes(3ull << 30), "3.00 GiB");
  EXPECT_EQ(HumanBytes(5ull << 50), "5.00 PiB");
}

}  // namespace
}  // namespace modelfs
