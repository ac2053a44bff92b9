#include "core/text/escape.h"

#include <cstdint>

#include "absl/strings/str_format.h"
#include "core/text/utf8.h"

namespace modelfs {
namespace {

// The escapes both forms below write alike: a backslash, newline, carriage return and tab as C
// and JSON spell them; nullptr for any other byte.
const char* ShortEscape(uint8_t c) {
  switch (c) {
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      return nullptr;
  }
}

bool IsInvisibleControl(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
         (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string EscapeUntrusted(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      if (const char* e = ShortEscape(c)) {
        out += e;
      } else if (c < 0x20 || c == 0x7f) {
        absl::StrAppendFormat(&out, "\\x%02x", c);
      } else {
        out.push_back(static_cast<char>(c));
      }
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t n = DecodeUtf8(s, i, &cp);
    if (n == 0) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
      ++i;
    } else if (IsInvisibleControl(cp)) {
      absl::StrAppendFormat(&out, "\\u{%04x}", cp);
      i += n;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

void AppendJsonString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<uint8_t>(ch);
    if (const char* e = ShortEscape(c)) {
      out += e;
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\b') {
      out += "\\b";
    } else if (c == '\f') {
      out += "\\f";
    } else if (c < 0x20) {
      out += "\\u00";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('"');
}

}  // namespace modelfs
