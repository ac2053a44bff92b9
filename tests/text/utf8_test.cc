#include "core/text/utf8.h"

#include <cstdint>
#include <string>
#include <string_view>

#include "gtest/gtest.h"

namespace modelfs {
namespace {

constexpr size_t kNone = std::string_view::npos;

TEST(DecodeUtf8Test, ATwoThreeAndFourByteSequenceGiveTheirCodePoints) {
  uint32_t cp = 0;
  EXPECT_EQ(DecodeUtf8("\xc3\xa9", 0, &cp), 2u);  // é
  EXPECT_EQ(cp, 0xe9u);
  EXPECT_EQ(DecodeUtf8("\xe2\x98\x83", 0, &cp), 3u);  // ☃
  EXPECT_EQ(cp, 0x2603u);
  EXPECT_EQ(DecodeUtf8("\xf0\x9f\x98\x80", 0, &cp), 4u);  // 😀
  EXPECT_EQ(cp, 0x1f600u);
}

TEST(DecodeUtf8Test, OverlongFormsSurrogatesAndCodePointsPastTheLastAreNotSequences) {
  uint32_t cp = 0;
  EXPECT_EQ(DecodeUtf8("\xc0\xaf", 0, &cp), 0u);
  EXPECT_EQ(DecodeUtf8("\xe0\x80\xaf", 0, &cp), 0u);
  EXPECT_EQ(DecodeUtf8("\xed\xa0\x80", 0, &cp), 0u);      // U+D800
  EXPECT_EQ(DecodeUtf8("\xf4\x90\x80\x80", 0, &cp), 0u);  // U+110000
}

TEST(FindInvalidUtf8Test, ValidTextHasNoInvalidByte) {
  EXPECT_EQ(FindInvalidUtf8(""), kNone);
  EXPECT_EQ(FindInvalidUtf8("model.embed_tokens.weight"), kNone);
  EXPECT_EQ(FindInvalidUtf8("模型/权重 é ☃ 😀"), kNone);
}

TEST(FindInvalidUtf8Test, TheOffsetOfTheFirstBadByteIsReturned) {
  EXPECT_EQ(FindInvalidUtf8("ab\xff"), 2u);
  EXPECT_EQ(FindInvalidUtf8("ab\xc3"), 2u);                 // cut short at the end
  EXPECT_EQ(FindInvalidUtf8("\xc3\xa9x\xc3(x"), 3u);        // a lead byte without its continuation
  EXPECT_EQ(FindInvalidUtf8(std::string("a\x80", 2)), 1u);  // a lone continuation byte
}

}  // namespace
}  // namespace modelfs
