#include "core/text/escape.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace modelfs {
namespace {

// Length and code point of the valid UTF-8 sequence at s[i], or 0 when there is none
// (overlong forms, surrogates and code points past U+10FFFF are not valid).
size_t DecodeUtf8(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  size_t n = 0;
  uint32_t v = 0;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    v = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    v = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    v = c & 0x07;
  } else {
    return 0;
  }
  if (s.size() - i < n) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3f);
  }
  if ((n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10ffff)) ||
      (v >= 0xd800 && v <= 0xdfff)) {
    return 0;
  }
  *cp = v;
  return n;
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
      switch (c) {
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20 || c == 0x7f) {
            absl::StrAppendFormat(&out, "\\x%02x", c);
          } else {
            out.push_back(static_cast<char>(c));
          }
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

}  // namespace modelfs
