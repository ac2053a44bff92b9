#include "core/text/escape.h"

#include <string>

#include "gtest/gtest.h"

namespace modelfs {
namespace {

TEST(EscapeUntrustedTest, KeepsPrintableAsciiAndValidUtf8AsTheyAre) {
  EXPECT_EQ(EscapeUntrusted("model-00001-of-00002.safetensors"),
            "model-00001-of-00002.safetensors");
  EXPECT_EQ(EscapeUntrusted("模型/权重.gguf é ☃ 😀"), "模型/权重.gguf é ☃ 😀");
}

TEST(EscapeUntrustedTest, ANewlineCannotStartAForgedLine) {
  EXPECT_EQ(EscapeUntrusted("a.bin\nverified sha256:00 1 b.bin"),
            "a.bin\\nverified sha256:00 1 b.bin");
}

TEST(EscapeUntrustedTest, TerminalEscapesAndOtherC0ControlsBecomeHex) {
  EXPECT_EQ(EscapeUntrusted("\x1b[2J\x1b]0;title\x07"), "\\x1b[2J\\x1b]0;title\\x07");
  EXPECT_EQ(EscapeUntrusted(std::string("a\0b\x7f", 4)), "a\\x00b\\x7f");
  EXPECT_EQ(EscapeUntrusted("\r\t"), "\\r\\t");
}

TEST(EscapeUntrustedTest, BackslashIsDoubledSoAnEscapeCannotBeForged) {
  EXPECT_EQ(EscapeUntrusted("a\\nb"), "a\\\\nb");
  EXPECT_NE(EscapeUntrusted("a\\nb"), EscapeUntrusted("a\nb"));
}

TEST(EscapeUntrustedTest, C1ControlsLineSeparatorsAndBidiOverridesBecomeCodePoints) {
  EXPECT_EQ(EscapeUntrusted("\xc2\x9b"
                            "31m"),
            "\\u{009b}31m");
  EXPECT_EQ(EscapeUntrusted("a\xe2\x80\xa8"
                            "b"),
            "a\\u{2028}b");
  EXPECT_EQ(EscapeUntrusted("txt.\xe2\x80\xae"
                            "exe"),
            "txt.\\u{202e}exe");
  EXPECT_EQ(EscapeUntrusted("\xe2\x81\xa6x"), "\\u{2066}x");
}

TEST(EscapeUntrustedTest, BytesThatAreNotValidUtf8BecomeHex) {
  EXPECT_EQ(EscapeUntrusted("\x9b"
                            "31m"),
            "\\x9b31m");                                          // a raw 8-bit CSI
  EXPECT_EQ(EscapeUntrusted("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(EscapeUntrusted("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(EscapeUntrusted("ab\xe6\xa8"), "ab\\xe6\\xa8");       // truncated sequence
}

}  // namespace
}  // namespace modelfs

namespace modelfs {
namespace {

std::string Json(std::string_view s) {
  std::string out;
  AppendJsonString(out, s);
  return out;
}

TEST(AppendJsonStringTest, QuotesAndBackslashesAreEscapedAndTheLiteralIsQuoted) {
  EXPECT_EQ(Json("a\"b\\c"), "\"a\\\"b\\\\c\"");
}

TEST(AppendJsonStringTest, ControlsUseTheShortEscapesOrFourHexDigits) {
  EXPECT_EQ(Json("\b\f\n\r\t"), "\"\\b\\f\\n\\r\\t\"");
  EXPECT_EQ(Json(std::string("\x01\x1f\0", 3)), "\"\\u0001\\u001f\\u0000\"");
}

TEST(AppendJsonStringTest, DelAndUtf8AreWrittenAsTheyAre) {
  EXPECT_EQ(Json("\x7f é 😀"), "\"\x7f é 😀\"");
}

TEST(AppendJsonStringTest, AppendsToWhatIsThere) {
  std::string out = "{";
  AppendJsonString(out, "k");
  EXPECT_EQ(out, "{\"k\"");
}

}  // namespace
}  // namespace modelfs
